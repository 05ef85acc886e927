"""DBOS baselines: a workflow of N steps, the way a DBOS user writes durable work.

DBOS checkpoints each step's output in its system database (SQLite file or Postgres);
that is the same guarantee onward's per-step checkpoint gives: a crashed workflow
resumes after its last completed step. Each run gets a fresh database.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dbos import DBOS

from _common import PG_URL


@DBOS.step()
def noop_step(i: int) -> int:
    return i


@DBOS.step()
def grow_step(i: int, size: int) -> str:
    """The step's output is its 200-byte share of the growing state."""
    return f"{i:08d}".ljust(size, "x")


@DBOS.workflow()
def noop_chain(n: int) -> int:
    total = 0
    for i in range(n):
        total += noop_step(i)
    return total


@DBOS.workflow()
def growing_chain(n: int, size: int) -> int:
    state: list[str] = []
    for i in range(n):
        state.append(grow_step(i, size))
    return len(state)


@contextmanager
def launched(url: str) -> Iterator[None]:
    DBOS(config={"name": "onward-bench", "system_database_url": url, "run_admin_server": False})
    DBOS.launch()
    try:
        yield
    finally:
        DBOS.destroy(destroy_registry=False)


@contextmanager
def pg_database() -> Iterator[str]:
    """A fresh Postgres database (DBOS keeps its tables in a ``dbos`` schema of its own)."""
    import psycopg

    name = f"dbos_bench_{uuid.uuid4().hex[:10]}"
    admin = PG_URL
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def timed_noop_chain(url: str, n: int) -> float:
    with launched(url):
        start = time.perf_counter()
        if noop_chain(n) != n * (n - 1) // 2:
            raise SystemExit("DBOS workflow returned a wrong total")
        return time.perf_counter() - start


def run_sqlite(n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="onward-bench-dbos-") as tmp:
        return timed_noop_chain(f"sqlite:///{Path(tmp) / 'dbos.sqlite'}", n)


def run_postgres(n: int) -> float:
    with pg_database() as url:
        return timed_noop_chain(url, n)
