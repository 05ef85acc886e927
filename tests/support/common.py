"""Helpers shared by several test modules, moved out of tests/conftest.py: BACKENDS,
CliResult, PG_URL, cli_env, cli_runner, onward_cmd, postgres_schema, read_jsonl,
start_run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onward.store.sql import scratch_schema
from tests.support.zygote import Process, spawn
from tests.support.zygote import run as run_forked

PG_URL = os.environ.get("ONWARD_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"
BACKENDS = (os.environ.get("ONWARD_TEST_BACKENDS") or "sqlite,postgres").split(",")
"""Every test that touches the store runs on each backend (``ONWARD_TEST_BACKENDS`` narrows
it while developing; CI runs both)."""


def postgres_schema() -> AbstractContextManager[str]:
    """A fresh schema in the test database, dropped afterwards: the URL selects it."""
    return scratch_schema(PG_URL, "t")


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file another process may be appending to: a line
    still being written (no newline yet) is left for the next read."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "ONWARD_BLOCK_MODEL_REQUESTS": "1", **extra})
    return env


def onward_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "onward", *args]


def start_run(
    workdir: Path, db: str, thread_id: str, tools: str, *extra: str, **env: str
) -> Process:
    """``onward run --plan plan.yaml`` in the background (a test may SIGKILL it), forked
    from the zygote (``tests/support/zygote.py``: these tests are about the kill, not start-up)."""
    return spawn(
        [
            "run",
            "--plan",
            "plan.yaml",
            "--tools",
            tools,
            "--db",
            db,
            "--json",
            "--thread-id",
            thread_id,
            *extra,
        ],
        cwd=workdir,
        env=cli_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def cli_runner(workdir: Path, db_url: str, *, real: bool = False):  # type: ignore[no-untyped-def]
    """``run(ARGS)``: ``onward ARGS`` in a new process with --db pointing at the test's
    store; forked from the zygote (``tests/support/zygote.py``), or with ``real`` started as
    ``python -m onward`` (tests about the entry point: tests/cli/test_cli.py)."""

    def run(
        *args: str, db: str | None = db_url, env: dict[str, str] | None = None, timeout: float = 120
    ) -> CliResult:
        argv = [*args, *(["--db", db] if db else [])]
        if real:
            proc = subprocess.run(
                onward_cmd(*argv),
                cwd=workdir,
                capture_output=True,
                text=True,
                env=cli_env(**(env or {})),
                timeout=timeout,
            )
        else:
            proc = run_forked(argv, cwd=workdir, env=cli_env(**(env or {})), timeout=timeout)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run
