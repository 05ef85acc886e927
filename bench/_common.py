"""Shared by the bench scripts (run as ``python bench/NAME.py``, so this is importable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

from onward import Plan, PlanStep

PG_URL = os.environ.get("ONWARD_BENCH_PG") or "postgresql://postgres@127.0.0.1:5432/test"
"""The Postgres the benches use ($ONWARD_BENCH_PG); each run gets a fresh schema in it."""

SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
"""``PRAGMA synchronous`` answers with a number."""


def pg_schema() -> AbstractContextManager[str]:
    """A fresh schema (dropped afterwards); the URL selects it through search_path."""
    # Imported here: commits.py's child imports this module under older checkouts too,
    # whose package has no onward.store.
    from onward.store.sql import scratch_schema

    return scratch_schema(PG_URL, "bench")


def chain_plan(n: int) -> Plan:
    """N noop steps, each depending on the previous one."""
    return Plan(
        steps=[
            PlanStep(
                id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else []
            )
            for i in range(n)
        ]
    )


def any_size(**policy: Any) -> dict[str, Any]:
    """``Onward.run`` keywords for a plan of any size: onward refuses plans over its run
    policy's ``max_plan_steps`` (300 by default), so a long chain raises it. The older
    revisions bench/commits.py compares have no such field, and get the policy without it."""
    from onward import RunPolicy

    if "max_plan_steps" in RunPolicy.model_fields:
        policy["max_plan_steps"] = 10**9
    return {"policy": RunPolicy(**policy)} if policy else {}


def scratch_store(stack: ExitStack, postgres: bool, name: str) -> tuple[Path, str]:
    """(a temporary directory, now the working one; a store URL): a fresh Postgres schema,
    or a SQLite file ``name`` in that directory."""
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    os.chdir(tmp)
    return tmp, stack.enter_context(pg_schema()) if postgres else f"sqlite:///{tmp}/{name}"


@contextmanager
def served_here(app: Any, port: int) -> Iterator[str]:
    """``app`` under uvicorn on a thread of this process (``uvicorn-loop``), its URL once it
    serves; stopped at the end."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True, name="uvicorn-loop").start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True


def pg_durability(url: str = PG_URL) -> str:
    """The Postgres server's durability settings, read back (stated in a bench's output)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        got = [
            f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
            for name in ("synchronous_commit", "fsync", "wal_sync_method")
        ]
    return "Postgres " + " ".join(got)


def sqlite_durability() -> str:
    """The journal mode and synchronous level an onward SQLite store opens with, read back
    from a fresh store (ONWARD_FSYNC as every bench sets it)."""
    import tempfile

    from onward import Onward

    with tempfile.TemporaryDirectory() as tmp, Onward(f"sqlite:///{tmp}/o.db") as ow:
        conn = ow.store.conn  # type: ignore[attr-defined]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = SYNC_NAMES[conn.execute("PRAGMA synchronous").fetchone()[0]]
    return f"SQLite journal_mode={mode} synchronous={sync}"


def write_json(path: Path | None, rows: list[dict[str, Any]]) -> None:
    """The script's results for ``run_all.py``: one row per ratio, with its target."""
    if path is not None:
        path.write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")


@contextmanager
def sampled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy (plain mode) on process ``pid`` while the block runs, into ``out`` (raw
    folded stacks; nothing when ``out`` is None). ``PYSPY_ARGS`` adds py-spy options."""
    if out is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    argv = [str(spy), "record", "-p", str(pid), "-o", str(out), "-f", "raw", "-r", "100"]
    argv += os.environ.get("PYSPY_ARGS", "").split()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the block's work starts
    try:
        yield
    finally:
        proc.send_signal(2)  # SIGINT: py-spy writes what it sampled
        proc.wait(60)
