"""Threads and runs as the LangGraph Server API sees them (``onward serve``).

A thread exists before its onward run does (``POST /threads`` then a run on it); it has
an owner (the API user who created it: other users get 404) and metadata that chat
frontends filter on (``graph_id``, ``assistant_id``). Each API run on a thread (a
stream, a wait, a resume) gets a run row with its status.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from onward.model.clock import utcnow
from onward.store.connection import SharedConnection
from onward.store.sql import Db

THREAD_SCHEMA = """
CREATE TABLE IF NOT EXISTS onward_threads (
    thread_id  TEXT PRIMARY KEY,
    owner      TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    metadata   TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS onward_api_runs (
    run_id       TEXT PRIMARY KEY,
    thread_id    TEXT NOT NULL,
    assistant_id TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    status       TEXT NOT NULL,
    metadata     TEXT NOT NULL DEFAULT '{}',
    pause_before TEXT NOT NULL DEFAULT '[]',
    from_checkpoint TEXT,
    request      TEXT,
    multitask_strategy TEXT NOT NULL DEFAULT 'enqueue'
);
"""
RUN_COLUMNS_9 = (("pause_before", "TEXT NOT NULL DEFAULT '[]'"), ("from_checkpoint", "TEXT"))
"""Columns store schema 9 added to ``onward_api_runs`` (older stores get them on open)."""
RUN_COLUMNS_10 = (("request", "TEXT"), ("multitask_strategy", "TEXT NOT NULL DEFAULT 'enqueue'"))
"""Columns store schema 10 added: a queued run's request (it starts when the thread is
free, maybe after a restart) and the multitask strategy it was sent with."""


class ApiRunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    INTERRUPTED = "interrupted"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class ThreadRow:
    thread_id: str
    owner: str | None
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ApiRunRow:
    run_id: str
    thread_id: str
    assistant_id: str
    created_at: datetime
    updated_at: datetime
    status: ApiRunStatus
    metadata: dict[str, Any]
    pause_before: tuple[str, ...] = ()
    """The request's ``interrupt_before``: a drive after a crash pauses at the same nodes."""
    from_checkpoint: str | None = None
    """The checkpoint the run started from (None: a new thread's first run)."""
    request: dict[str, Any] | None = None
    """A queued run's request (``body``, ``who``, ``modes``), until it starts."""
    multitask_strategy: str = "enqueue"


class Threads:
    def __init__(self, connect: Callable[[], Db]) -> None:
        self._db = SharedConnection(connect)

    def close(self) -> None:
        self._db.close()

    def create(self, thread_id: str, owner: str | None, metadata: dict[str, Any]) -> bool:
        """False when the thread already exists (nothing changed)."""
        now = utcnow().isoformat()
        with self._db.use() as db:
            cur = db.execute(
                "INSERT INTO onward_threads VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (thread_id, owner, now, now, json.dumps(metadata)),
            )
            return cur.rowcount == 1

    def get(self, thread_id: str) -> ThreadRow | None:
        with self._db.use() as db:
            row = db.execute(
                "SELECT thread_id, owner, created_at, updated_at, metadata FROM onward_threads "
                "WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()
        return _thread(row) if row else None

    def all(self, owner: str | None) -> list[ThreadRow]:
        """Newest first; only ``owner``'s threads when one is given."""
        sql = "SELECT thread_id, owner, created_at, updated_at, metadata FROM onward_threads"
        params: tuple[Any, ...] = ()
        if owner is not None:
            sql, params = sql + " WHERE owner = ?", (owner,)
        with self._db.use() as db:
            rows = db.execute(sql + " ORDER BY updated_at DESC", params).fetchall()
        return [_thread(r) for r in rows]

    def merge_metadata(self, thread_id: str, metadata: dict[str, Any]) -> None:
        current = self.get(thread_id)
        merged = {**(current.metadata if current else {}), **metadata}
        with self._db.use() as db:
            db.execute(
                "UPDATE onward_threads SET metadata = ?, updated_at = ? WHERE thread_id = ?",
                (json.dumps(merged), utcnow().isoformat(), thread_id),
            )

    def touch(self, thread_id: str) -> None:
        with self._db.use() as db:
            db.execute(
                "UPDATE onward_threads SET updated_at = ? WHERE thread_id = ?",
                (utcnow().isoformat(), thread_id),
            )

    def delete(self, thread_id: str) -> None:
        with self._db.use() as db, db.transaction():
            db.execute("DELETE FROM onward_api_runs WHERE thread_id = ?", (thread_id,))
            db.execute("DELETE FROM onward_threads WHERE thread_id = ?", (thread_id,))

    # -- runs on a thread ---------------------------------------------------

    def add_run(
        self,
        run_id: str,
        thread_id: str,
        assistant_id: str,
        metadata: dict[str, Any],
        *,
        pause_before: Sequence[str] = (),
        from_checkpoint: str | None = None,
        status: ApiRunStatus = ApiRunStatus.RUNNING,
        request: dict[str, Any] | None = None,
        multitask_strategy: str = "enqueue",
    ) -> None:
        """Record a run; a queued one (``status`` pending, with its ``request``) is
        recorded again when it starts: the same row, now running from its checkpoint."""
        now = utcnow().isoformat()
        with self._db.use() as db:
            db.execute(
                "INSERT INTO onward_api_runs (run_id, thread_id, assistant_id, created_at, "
                "updated_at, status, metadata, pause_before, from_checkpoint, request, "
                "multitask_strategy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET updated_at = excluded.updated_at, "
                "status = excluded.status, pause_before = excluded.pause_before, "
                "from_checkpoint = excluded.from_checkpoint, request = NULL",
                (
                    run_id,
                    thread_id,
                    assistant_id,
                    now,
                    now,
                    status.value,
                    json.dumps(metadata),
                    json.dumps(list(pause_before)),
                    from_checkpoint,
                    json.dumps(request) if request is not None else None,
                    multitask_strategy,
                ),
            )

    def get_run(self, run_id: str) -> ApiRunRow | None:
        found = self._select("WHERE run_id = ?", (run_id,))
        return found[0] if found else None

    def delete_run(self, run_id: str) -> None:
        with self._db.use() as db:
            db.execute("DELETE FROM onward_api_runs WHERE run_id = ?", (run_id,))

    def queued(self, thread_id: str | None = None) -> list[ApiRunRow]:
        """Runs waiting for their thread (multitask ``enqueue``), oldest first."""
        where = "WHERE status = ? AND request IS NOT NULL"
        params: tuple[Any, ...] = (ApiRunStatus.PENDING.value,)
        if thread_id is not None:
            where, params = where + " AND thread_id = ?", (*params, thread_id)
        return self._select(where + " ORDER BY created_at, run_id", params)

    def count_runs(self, thread_id: str, *statuses: ApiRunStatus) -> int:
        marks = ", ".join("?" for _ in statuses)
        with self._db.use() as db:
            row = db.execute(
                f"SELECT COUNT(*) FROM onward_api_runs WHERE thread_id = ? AND status IN ({marks})",
                (thread_id, *(s.value for s in statuses)),
            ).fetchone()
        return int(row[0])

    def set_run_status(self, run_id: str, status: ApiRunStatus) -> None:
        with self._db.use() as db:
            db.execute(
                "UPDATE onward_api_runs SET status = ?, updated_at = ? WHERE run_id = ?",
                (status.value, utcnow().isoformat(), run_id),
            )

    def set_strategy(self, run_id: str, strategy: str) -> None:
        with self._db.use() as db:
            db.execute(
                "UPDATE onward_api_runs SET multitask_strategy = ? WHERE run_id = ?",
                (strategy, run_id),
            )

    def runs(self, thread_id: str) -> list[ApiRunRow]:
        return self._select("WHERE thread_id = ? ORDER BY created_at DESC", (thread_id,))

    def unfinished_runs(self) -> list[ApiRunRow]:
        """API runs still marked pending or running, oldest first (after a server crash,
        some of them have no driver any more)."""
        return self._select(
            "WHERE status IN (?, ?) ORDER BY created_at",
            (ApiRunStatus.PENDING.value, ApiRunStatus.RUNNING.value),
        )

    def _select(self, where: str, params: tuple[Any, ...]) -> list[ApiRunRow]:
        with self._db.use() as db:
            rows = db.execute(
                "SELECT run_id, thread_id, assistant_id, created_at, updated_at, status, "
                "metadata, pause_before, from_checkpoint, request, multitask_strategy "
                f"FROM onward_api_runs {where}",
                params,
            ).fetchall()
        return [
            ApiRunRow(
                r[0],
                r[1],
                r[2],
                datetime.fromisoformat(r[3]),
                datetime.fromisoformat(r[4]),
                ApiRunStatus(r[5]),
                json.loads(r[6]),
                tuple(json.loads(r[7])),
                r[8],
                json.loads(r[9]) if r[9] else None,
                r[10] or "enqueue",
            )
            for r in rows
        ]


def _thread(r: tuple[Any, ...]) -> ThreadRow:
    return ThreadRow(
        r[0], r[1], datetime.fromisoformat(r[2]), datetime.fromisoformat(r[3]), json.loads(r[4])
    )
