"""DBOS baselines: a workflow of N steps, the way a DBOS user writes durable work.

DBOS checkpoints each step's output in its system database (SQLite file or Postgres);
that is the same guarantee onward's per-step checkpoint gives: a crashed workflow
resumes after its last completed step. Each run gets a fresh database.

SQLite settings. DBOS opens its system database with SQLAlchemy and, left alone, keeps
SQLite's defaults: a rollback journal and ``synchronous=FULL``. To compare like with
like, :func:`launched` gives it onward's settings: ``journal_mode=WAL`` and the
``synchronous`` asked for (``NORMAL`` or ``FULL``), set by a SQLAlchemy ``connect``
listener on every connection its engine opens (DBOS's own listener — IMMEDIATE
transactions, ``busy_timeout``, ``foreign_keys`` — still runs). :func:`live_settings`
reads them back from a connection of DBOS's own engine. On Postgres DBOS runs at the
server's defaults, as onward does.

Fleets (bench/fleet.py). :func:`drain_queue` is a DBOS application draining a queue
(``worker_concurrency``) of workflows of I/O-bound steps, each step appending its start
and end time to a JSON-lines log (as onward's ``ONWARD_EXECUTION_LOG`` does).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from dbos import DBOS

from _common import PG_URL, SYNC_NAMES


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


@DBOS.step()
def io_step(i: int, seconds: float, log: str) -> int:
    """A step that waits ``seconds`` (an API call's shape), logged as onward's calls are."""
    start = time.time()
    time.sleep(seconds)
    with open(log, "a") as out:
        out.write(json.dumps({"phase": "start", "t": start}) + "\n")
        out.write(json.dumps({"phase": "end", "t": time.time()}) + "\n")
    return i


@DBOS.workflow()
def io_chain(steps: int, seconds: float, log: str) -> int:
    for i in range(steps):
        io_step(i, seconds, log)
    return steps


def drain_queue(
    url: str, concurrency: int, runs: int, steps: int, seconds: float, log: str
) -> None:
    """Launch DBOS on ``url`` with a queue of ``worker_concurrency`` ``concurrency``, enqueue
    ``runs`` workflows of ``steps`` I/O steps and wait for every one (``runs`` 0: start up
    and stop, the worker's start-up). Prints the CPU seconds the enqueueing took (JSON), which
    the bench leaves out: onward's runs are submitted by another process."""
    with launched(url):
        queue = DBOS.register_queue("fleet", worker_concurrency=concurrency)
        before = time.process_time()
        handles = [queue.enqueue(io_chain, steps, seconds, log) for _ in range(runs)]
        enqueue_cpu = time.process_time() - before  # the submitter's share, not the worker's
        done = [h.get_result() for h in handles]
    if done != [steps] * runs:
        raise SystemExit("some DBOS workflows did not finish")
    print(json.dumps({"submit_cpu": enqueue_cpu}))


_SYNCHRONOUS: list[str] = []
"""The ``synchronous`` the listener sets (empty: the listener leaves connections alone)."""


def _on_connect(dbapi_conn: Any, record: Any) -> None:
    import sqlite3

    if _SYNCHRONOUS and isinstance(dbapi_conn, sqlite3.Connection):
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[0]}")


sa.event.listen(sa.Engine, "connect", _on_connect)


@contextmanager
def launched(url: str, synchronous: str = "NORMAL") -> Iterator[None]:
    """DBOS launched on ``url``; on SQLite with WAL and this ``synchronous``."""
    _SYNCHRONOUS[:] = [synchronous] if url.startswith("sqlite") else []
    DBOS(config={"name": "onward-bench", "system_database_url": url, "run_admin_server": False})
    DBOS.launch()
    try:
        yield
    finally:
        DBOS.destroy(destroy_registry=False)
        _SYNCHRONOUS.clear()


def live_settings() -> dict[str, str]:
    """Durability settings read back from a connection of the launched DBOS's engine."""
    from dbos._dbos import _get_dbos_instance

    engine = _get_dbos_instance()._sys_db.engine
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            journal = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
            return {"journal_mode": str(journal), "synchronous": SYNC_NAMES.get(sync, str(sync))}
        return {"synchronous_commit": str(conn.exec_driver_sql("SHOW synchronous_commit").scalar())}


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
