"""The store: one URL → LangGraph checkpointer + onward's own tables + artifact store.

SQLite is the embedded default (``sqlite:///.onward/onward.db``). The schema is
created once under an exclusive file lock, so several processes starting on a
fresh file at once do not race into "database is locked". WAL and a busy
timeout are set on every connection.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from onward.artifacts import ArtifactStore, fsync_enabled
from onward.checkpointing.breakers import BREAKER_SCHEMA, Breakers
from onward.checkpointing.events import EventLog
from onward.checkpointing.leases import LEASE_SCHEMA, LeasePolicy, Leases
from onward.checkpointing.ledger import LEDGER_SCHEMA, Ledger
from onward.checkpointing.serde import checkpoint_types
from onward.errors import StoreCorruptError, StoreError, StoreLockedError, UsageError
from onward.state import RunStatus, utcnow

DEFAULT_URL = "sqlite:///.onward/onward.db"
STORE_SCHEMA_VERSION = 5
"""1: runs. 2: leases and events. 3: the effect ledger. Each version's tables are created
with IF NOT EXISTS, so opening an older store brings it up to date under the schema lock."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS onward_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS onward_runs (
    thread_id   TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    status      TEXT NOT NULL,
    objective   TEXT NOT NULL,
    request     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS onward_runs_created ON onward_runs (created_at);
"""


def default_url() -> str:
    return os.environ.get("ONWARD_DB") or DEFAULT_URL


def sqlite_path(url: str) -> Path:
    """``sqlite:///rel/path.db`` (relative to cwd), ``sqlite:////abs/path.db`` or a bare path."""
    if url.startswith("postgres://") or url.startswith("postgresql://"):
        raise UsageError(
            "Postgres stores are not available in this version of onward; use a sqlite:/// URL"
        )
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    if "://" in url:
        raise UsageError(f"unsupported store URL {url!r}; use sqlite:///path/to/onward.db")
    return Path(url)


@dataclass(frozen=True, slots=True)
class RunRow:
    thread_id: str
    created_at: datetime
    updated_at: datetime
    status: RunStatus
    objective: str
    request: dict[str, Any]


def _classify(exc: sqlite3.Error, path: Path) -> StoreError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreLockedError(
            f"the database {path} is locked by another process ({text}); wait for it to "
            "finish, or stop it, then run the command again. Nothing was written"
        )
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return StoreCorruptError(
            f"{path} is not a usable onward database ({text}). Nothing was written to it. "
            "Point --db / ONWARD_DB at another file, or move this one aside to start fresh"
        )
    return StoreError(f"cannot use the database {path}: {text}")


@contextmanager
def translate_errors(path: Path) -> Iterator[None]:
    """sqlite3 errors → onward StoreErrors that say what to do."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _classify(exc, path) from exc


class Store:
    """An open store. Use as a context manager, or call :meth:`close`."""

    def __init__(self, url: str | None = None, *, busy_timeout: float | None = None) -> None:
        self.url = url or default_url()
        self.path = sqlite_path(self.url).expanduser().absolute()
        timeout = (
            busy_timeout
            if busy_timeout is not None
            else float(os.environ.get("ONWARD_BUSY_TIMEOUT", "10"))
        )
        self._timeout = timeout
        existed = self.path.exists()
        if existed and self.path.is_dir():
            raise StoreError(f"{self.path} is a directory; --db must name a database file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with translate_errors(self.path):
            # Default (deferred) transactions, not autocommit: SqliteSaver writes a task's
            # writes with one executemany and commits once; in autocommit each row would
            # commit alone, and a SIGKILL mid-way leaves half a task's writes (seen: the
            # routing write lost, the run resumed into nothing).
            self.conn = sqlite3.connect(str(self.path), timeout=timeout, check_same_thread=False)
            try:
                # Read first: on a file that is not SQLite this fails before anything is written.
                self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                self.conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
                self._create_schema_once()
                sync = "FULL" if fsync_enabled() else "NORMAL"
                self.conn.execute(f"PRAGMA synchronous={sync}")
            except BaseException:
                self.conn.close()
                raise
        serde = JsonPlusSerializer(allowed_msgpack_modules=None).with_msgpack_allowlist(
            checkpoint_types()
        )
        self.saver = SqliteSaver(self.conn, serde=serde)
        self.saver.is_setup = True  # created under the lock above
        self.artifacts = ArtifactStore(self.path.parent / "artifacts")
        self.leases = Leases(self.connect, LeasePolicy.from_env())
        self.ledger = Ledger(self.connect)
        self.events = EventLog(self.connect)
        self.breakers = Breakers(self.connect, self.events, utcnow)

    def connect(self) -> sqlite3.Connection:
        """A new connection to the same database (for work on other threads)."""
        with translate_errors(self.path):
            conn = sqlite3.connect(str(self.path), timeout=self._timeout, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        return conn

    def _create_schema_once(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                row = self.conn.execute(
                    "SELECT name FROM sqlite_master WHERE name='onward_meta'"
                ).fetchone()
                found = 0 if row is None else self._check_schema_version()
                if found < STORE_SCHEMA_VERSION:
                    self.conn.execute("PRAGMA journal_mode=WAL")
                    SqliteSaver(self.conn).setup()
                    self.conn.executescript(_SCHEMA + LEASE_SCHEMA + LEDGER_SCHEMA + BREAKER_SCHEMA)
                    columns = {r[1] for r in self.conn.execute("PRAGMA table_info(onward_events)")}
                    if "dedupe" not in columns:  # a version-2..4 store
                        self.conn.execute("ALTER TABLE onward_events ADD COLUMN dedupe TEXT")
                    self.conn.execute(
                        "CREATE UNIQUE INDEX IF NOT EXISTS onward_events_once "
                        "ON onward_events (thread_id, dedupe) WHERE dedupe IS NOT NULL"
                    )
                    self.conn.execute(
                        "INSERT OR REPLACE INTO onward_meta VALUES ('schema_version', ?)",
                        (str(STORE_SCHEMA_VERSION),),
                    )
                    self.conn.commit()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _check_schema_version(self) -> int:
        row = self.conn.execute(
            "SELECT value FROM onward_meta WHERE key='schema_version'"
        ).fetchone()
        found = int(row[0]) if row else 0
        if found > STORE_SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer onward (store schema {found}, this onward "
                f"knows {STORE_SCHEMA_VERSION}); upgrade onward to use it"
            )
        return found

    def close(self) -> None:
        self.breakers.close()
        self.events.close()
        self.ledger.close()
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -------------------------------------------------------------

    def add_run(self, thread_id: str, objective: str, request: dict[str, Any]) -> None:
        now = utcnow().isoformat()
        with translate_errors(self.path), self.conn:
            self.conn.execute(
                "INSERT INTO onward_runs VALUES (?, ?, ?, ?, ?, ?)",
                (
                    thread_id,
                    now,
                    now,
                    RunStatus.PLANNING.value,
                    objective,
                    json.dumps(request, ensure_ascii=False),
                ),
            )

    def set_run_status(self, thread_id: str, status: RunStatus) -> None:
        with translate_errors(self.path), self.conn:
            self.conn.execute(
                "UPDATE onward_runs SET status=?, updated_at=? WHERE thread_id=?",
                (status.value, utcnow().isoformat(), thread_id),
            )

    def get_run(self, thread_id: str) -> RunRow | None:
        with translate_errors(self.path):
            row = self.conn.execute(
                "SELECT * FROM onward_runs WHERE thread_id=?", (thread_id,)
            ).fetchone()
        return _row(row) if row else None

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        with translate_errors(self.path):
            rows = self.conn.execute(
                "SELECT * FROM onward_runs ORDER BY created_at DESC LIMIT ?", (limit,)
            ).fetchall()
        return [_row(r) for r in rows]

    def unfinished_runs(self) -> list[RunRow]:
        """Runs that may still wait or go on (anything not done, failed or cancelled)."""
        finished = [s.value for s in RunStatus if s.finished]
        with translate_errors(self.path):
            rows = self.conn.execute(
                "SELECT * FROM onward_runs WHERE status NOT IN (?, ?, ?) ORDER BY created_at",
                finished,
            ).fetchall()
        return [_row(r) for r in rows]


def _row(r: tuple[Any, ...]) -> RunRow:
    return RunRow(
        thread_id=r[0],
        created_at=datetime.fromisoformat(r[1]),
        updated_at=datetime.fromisoformat(r[2]),
        status=RunStatus(r[3]),
        objective=r[4],
        request=json.loads(r[5]),
    )
