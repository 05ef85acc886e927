"""Threads and runs as the LangGraph Server API sees them (``onward serve``).

A thread exists before its onward run does (``POST /threads`` then a run on it); it has
an owner (the API user who created it: other users get 404) and metadata that chat
frontends filter on (``graph_id``, ``assistant_id``). Each API run on a thread (a
stream, a wait, a resume) gets a run row with its status.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from onward.model.clock import utcnow
from onward.store.connection import SharedConnection
from onward.store.sql import Db, Statement, one_row_each

MAX_RUN_EVENTS = 5000
"""Stream events kept per run in the store (the oldest go first): a long run streams
many; a client that fell further behind than these gets the newest ones."""
KEEP_VALUES = 256
"""Values events kept whole past the newest ones (as the in-memory feed does). The
server stores a values event as its checkpoint's reference (``{"$checkpoint": ...}``,
onward.serve.states), which is kept for good; only one stored whole (an interrupt's,
one without a checkpoint) loses its data past these."""
REFERENCE_PREFIX = '{"$checkpoint":'
"""How a stored values reference's JSON starts (those keep their data)."""
EVENTS_PER_STATEMENT = 200
"""Stream events one INSERT of :meth:`Threads.add_events` takes (5 parameters each)."""


class CancelAction(StrEnum):
    INTERRUPT = "interrupt"
    """Stop the run where it is; the thread keeps its state and a later run goes on."""
    ROLLBACK = "rollback"
    """Stop the run, then remove it and the checkpoints it made (LangGraph's rollback)."""


class ApiRunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    INTERRUPTED = "interrupted"
    ERROR = "error"


FINISHED_RUNS = (ApiRunStatus.SUCCESS, ApiRunStatus.ERROR, ApiRunStatus.INTERRUPTED)


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
    """A queued run's request (``body``, ``who``, ``modes``, and ``by``: the process that
    queued it and will start it), until it starts."""
    multitask_strategy: str = "enqueue"
    pause_after: tuple[str, ...] = ()
    """The request's ``interrupt_after`` (honoured by a drive after a crash too)."""
    webhook: str | None = None
    """Where the run's record is POSTed when it ends (checked by the egress policy)."""
    stream_mode: tuple[str, ...] = ()
    """The stream modes it was started with (a recovered drive streams them again)."""
    cancel: CancelAction | None = None
    """A cancel asked of the run's driver (kept once done: how it was cancelled)."""


@dataclass(frozen=True, slots=True)
class RunEvent:
    seq: int
    event: str
    data: Any
    """None: a values event dropped past :data:`KEEP_VALUES` (its number is kept)."""


class Threads:
    def __init__(self, connect: Callable[[], Db]) -> None:
        self._db = SharedConnection(connect)

    def close(self) -> None:
        self._db.close()

    def create(self, thread_id: str, owner: str | None, metadata: dict[str, Any]) -> bool:
        """False when the thread already exists (nothing changed)."""
        return self.made(thread_id, owner, metadata) is not None

    def made(self, thread_id: str, owner: str | None, metadata: dict[str, Any]) -> ThreadRow | None:
        """:meth:`create`: the row it wrote (what :meth:`get` would read now), None when
        the thread already exists (nothing changed)."""
        now = utcnow()
        text = json.dumps(metadata)
        with self._db.use() as db:
            cur = db.execute(
                "INSERT INTO onward_threads VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (thread_id, owner, now.isoformat(), now.isoformat(), text),
            )
            if cur.rowcount != 1:
                return None
        return ThreadRow(thread_id, owner, now, now, json.loads(text))

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
            db.execute(*_touching(thread_id, utcnow().isoformat()))

    def delete(self, thread_id: str) -> None:
        with self._db.use() as db, db.transaction():
            db.execute("DELETE FROM onward_api_runs WHERE thread_id = ?", (thread_id,))
            db.execute("DELETE FROM onward_api_run_events WHERE thread_id = ?", (thread_id,))
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
        pause_after: Sequence[str] = (),
        webhook: str | None = None,
        stream_mode: Sequence[str] = (),
        touch: bool = False,
        also: Sequence[tuple[str, Sequence[Sequence[Any]]]] = (),
    ) -> None:
        """Record a run; a queued one (``status`` pending, with its ``request``) is
        recorded again when it starts: the same row, now running from its checkpoint.
        ``touch``: the thread's ``updated_at`` too; ``also``: more statements (``?``
        placeholders, their rows), such as an event's; all together (:meth:`Db.write_all`)."""
        now = utcnow().isoformat()
        statements: list[Statement] = []
        if touch:
            statements.append(_touching(thread_id, now))
        statements.extend(one_row_each(also))
        statements.append(
            (
                "INSERT INTO onward_api_runs (run_id, thread_id, assistant_id, created_at, "
                "updated_at, status, metadata, pause_before, from_checkpoint, request, "
                "multitask_strategy, pause_after, webhook, stream_mode) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET updated_at = excluded.updated_at, "
                "status = excluded.status, pause_before = excluded.pause_before, "
                "from_checkpoint = excluded.from_checkpoint, request = NULL, "
                "multitask_strategy = excluded.multitask_strategy, "
                "pause_after = excluded.pause_after, webhook = excluded.webhook, "
                "stream_mode = excluded.stream_mode",
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
                    json.dumps(list(pause_after)),
                    webhook,
                    json.dumps(list(stream_mode)),
                ),
            )
        )
        with self._db.use() as db:
            db.write_all(statements)

    def get_run(self, run_id: str) -> ApiRunRow | None:
        found = self._select("WHERE run_id = ?", (run_id,))
        return found[0] if found else None

    def delete_run(self, run_id: str) -> None:
        with self._db.use() as db, db.transaction():
            db.execute("DELETE FROM onward_api_runs WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM onward_api_run_events WHERE run_id = ?", (run_id,))

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

    def settle(
        self,
        run_id: str,
        thread_id: str,
        status: ApiRunStatus | None,
        also: Sequence[Statement] = (),
    ) -> None:
        """A run's drive ended: its record's ``status`` (None: left as it is), its
        thread's ``updated_at`` and ``also`` (statements with ``?`` placeholders, such as
        the queue's wake-up), together (Postgres: one statement; SQLite: one commit)."""
        now = utcnow().isoformat()
        ran: list[Statement] = []
        if status is not None:
            ran.append(
                (
                    "UPDATE onward_api_runs SET status = ?, updated_at = ? WHERE run_id = ?",
                    (status.value, now, run_id),
                )
            )
        with self._db.use() as db:
            db.write_all([*ran, *also, _touching(thread_id, now)])

    def runs(self, thread_id: str) -> list[ApiRunRow]:
        return self._select("WHERE thread_id = ? ORDER BY created_at DESC", (thread_id,))

    def unfinished_runs(self) -> list[ApiRunRow]:
        """API runs still marked pending or running, oldest first (after a server crash,
        some of them have no driver any more)."""
        return self._select(
            "WHERE status IN (?, ?) ORDER BY created_at",
            (ApiRunStatus.PENDING.value, ApiRunStatus.RUNNING.value),
        )

    # -- cancels asked of another process's drive ---------------------------

    def request_cancel(self, run_id: str, action: CancelAction) -> bool:
        """Ask whoever drives the run to stop it (a rollback overrides an interrupt);
        False when it is not running any more."""
        with self._db.use() as db:
            cur = db.execute(
                "UPDATE onward_api_runs SET cancel = CASE WHEN cancel = ? THEN cancel ELSE ? "
                "END WHERE run_id = ? AND status = ?",
                (
                    CancelAction.ROLLBACK.value,
                    action.value,
                    run_id,
                    ApiRunStatus.RUNNING.value,
                ),
            )
            return cur.rowcount == 1

    def cancel_asked(self, thread_id: str) -> ApiRunRow | None:
        """The thread's running run if a cancel was asked of it (one runs at a time)."""
        found = self._select(
            "WHERE thread_id = ? AND status = ? AND cancel IS NOT NULL",
            (thread_id, ApiRunStatus.RUNNING.value),
        )
        return found[0] if found else None

    def cancels_asked(self, run_ids: Sequence[str]) -> dict[str, CancelAction]:
        """Of these runs, those still running with a cancel asked (one query for all)."""
        if not run_ids:
            return {}
        marks = ", ".join("?" for _ in run_ids)
        with self._db.use() as db:
            rows = db.execute(
                f"SELECT run_id, cancel FROM onward_api_runs WHERE run_id IN ({marks}) "
                "AND status = ? AND cancel IS NOT NULL",
                (*run_ids, ApiRunStatus.RUNNING.value),
            ).fetchall()
        return {r[0]: CancelAction(r[1]) for r in rows}

    # -- stream events --------------------------------------------------------

    def add_events(
        self, run_id: str, thread_id: str, events: Sequence[tuple[int, str, Any]]
    ) -> None:
        """Keep stream events ``(seq, event, data)`` (numbered in the run's stream), all
        or none, within the run's bounds: values older than :data:`KEEP_VALUES` events
        lose their data, events older than :data:`MAX_RUN_EVENTS` go."""
        self.add_runs_events([(run_id, thread_id, events)])

    def add_runs_events(
        self, runs: Sequence[tuple[str, str, Sequence[tuple[int, str, Any]]]]
    ) -> None:
        """:meth:`add_events` for several runs ``(run id, thread id, events)`` at once: one
        statement for all their events (a transaction only when it takes more than one, or
        a run's bounds are reached)."""
        rows = [
            (run_id, seq, thread_id, event, data)
            for run_id, thread_id, events in runs
            for seq, event, data in events
        ]
        if not rows:
            return
        newest = [
            (run_id, max(e[0] for e in events), len(events))
            for run_id, _t, events in runs
            if events
        ]
        trims = [n for n in newest if n[1] > KEEP_VALUES]
        drops = [n for n in newest if n[1] > MAX_RUN_EVENTS]
        whole = bool(trims or drops) or len(rows) > EVENTS_PER_STATEMENT
        with self._db.use() as db, db.transaction() if whole else nullcontext(db):
            # One statement for the batch (atomic by itself): a statement per event cost
            # Postgres a round trip each, and a transaction around them two more.
            for part in range(0, len(rows), EVENTS_PER_STATEMENT):
                chunk = rows[part : part + EVENTS_PER_STATEMENT]
                db.execute(
                    "INSERT INTO onward_api_run_events (run_id, seq, thread_id, event, data) "
                    f"VALUES {', '.join('(?, ?, ?, ?, ?)' for _ in chunk)} "
                    "ON CONFLICT (run_id, seq) DO UPDATE SET "
                    "event = excluded.event, data = excluded.data",
                    [
                        value
                        for run_id, seq, thread_id, event, data in chunk
                        for value in (run_id, seq, thread_id, event, _compact(data))
                    ],
                )
            for run_id, top, count in trims:
                db.execute(
                    "UPDATE onward_api_run_events SET data = NULL WHERE run_id = ? AND seq < ? "
                    "AND seq >= ? AND event = 'values' AND data NOT LIKE ?",
                    (
                        run_id,
                        top - KEEP_VALUES,
                        top - KEEP_VALUES - count - 1,
                        REFERENCE_PREFIX + "%",
                    ),
                )
            for run_id, top, _count in drops:
                db.execute(
                    "DELETE FROM onward_api_run_events WHERE run_id = ? AND seq <= ?",
                    (run_id, top - MAX_RUN_EVENTS),
                )

    def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[RunEvent]:
        """The run's kept stream events numbered past ``after``, oldest first."""
        with self._db.use() as db:
            rows = db.execute(
                "SELECT seq, event, data FROM onward_api_run_events WHERE run_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (run_id, after, limit),
            ).fetchall()
        return [RunEvent(int(r[0]), r[1], json.loads(r[2]) if r[2] else None) for r in rows]

    def last_event(self, run_id: str) -> int:
        """The number of the run's newest kept event (0: none)."""
        with self._db.use() as db:
            row = db.execute(
                "SELECT MAX(seq) FROM onward_api_run_events WHERE run_id = ?", (run_id,)
            ).fetchone()
        return int(row[0] or 0)

    def drop_old_events(self, before: datetime) -> int:
        """Forget the stream events of runs that ended before ``before`` (and of runs
        whose record is gone); returns the events removed."""
        ended = ", ".join("?" for _ in FINISHED_RUNS)
        with self._db.use() as db:
            cur = db.execute(
                "DELETE FROM onward_api_run_events WHERE run_id NOT IN "
                "(SELECT run_id FROM onward_api_runs WHERE status NOT IN "
                f"({ended}) OR updated_at >= ?)",
                (*(s.value for s in FINISHED_RUNS), before.isoformat()),
            )
            return int(cur.rowcount or 0)

    def _select(self, where: str, params: tuple[Any, ...]) -> list[ApiRunRow]:
        with self._db.use() as db:
            rows = db.execute(
                "SELECT run_id, thread_id, assistant_id, created_at, updated_at, status, "
                "metadata, pause_before, from_checkpoint, request, multitask_strategy, "
                f"pause_after, webhook, stream_mode, cancel FROM onward_api_runs {where}",
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
                tuple(json.loads(r[11] or "[]")),
                r[12],
                tuple(json.loads(r[13] or "[]")),
                CancelAction(r[14]) if r[14] else None,
            )
            for r in rows
        ]


def _touching(thread_id: str, now: str) -> Statement:
    """The thread's ``updated_at`` set to ``now``."""
    return ("UPDATE onward_threads SET updated_at = ? WHERE thread_id = ?", (now, thread_id))


def _compact(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _thread(r: tuple[Any, ...]) -> ThreadRow:
    return ThreadRow(
        r[0], r[1], datetime.fromisoformat(r[2]), datetime.fromisoformat(r[3]), json.loads(r[4])
    )
