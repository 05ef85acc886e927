"""LangGraph's checkpointer conformance suite on onward's savers (plain and encrypted) beside
LangGraph's own SqliteSaver and PostgresSaver, in one run: conformance level and tests
passed per capability. Needs Postgres on 127.0.0.1:5432 (as the tests do).

    python bench/conformance.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.common import postgres_schema
from tests.support.conformance import onward_saver, own_saver, report

Opener = Callable[[str], AbstractContextManager[Any]]


def line(name: str, url: str, opener: Opener) -> None:
    r = report(name, lambda: opener(url))
    caps = ", ".join(
        f"{c} {x.tests_passed}/{x.tests_passed + x.tests_failed}"
        for c, x in r.results.items()
        if x.detected
    )
    total = sum(x.tests_passed for x in r.results.values())
    print(f"{name:28} {r.conformance_level():6} {total:3} passed   {caps}")


@contextmanager
def stores() -> Iterator[dict[str, str]]:
    """A fresh SQLite file and Postgres schema for each side."""
    with postgres_schema() as pg1, postgres_schema() as pg2, postgres_schema() as pg3:
        dirs = [Path(tempfile.mkdtemp()) for _ in range(3)]
        urls = [f"sqlite:///{d / 'store' / 'onward.db'}" for d in dirs]
        for d in dirs:
            (d / "store").mkdir()
        yield {
            "sqlite": urls[0],
            "sqlite2": urls[1],
            "sqlite3": urls[2],
            "postgres": pg1,
            "postgres2": pg2,
            "postgres3": pg3,
        }


def main() -> None:
    with stores() as url:
        for backend in ("sqlite", "postgres"):
            line(f"langgraph {backend}", url[backend], own_saver)
            line(f"onward {backend}", url[f"{backend}2"], onward_saver)
            os.environ["ONWARD_AES_KEY"] = "k" * 32
            try:
                line(f"onward {backend} encrypted", url[f"{backend}3"], onward_saver)
            finally:
                del os.environ["ONWARD_AES_KEY"]


if __name__ == "__main__":
    main()
