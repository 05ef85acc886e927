"""The event log: an append-only table of what happened to a run and why.

Leases write their events here too (acquired / taken over / released). Details are
JSON objects, so later readers (timeline, summary) can filter on their fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from onward.model.clock import utcnow
from onward.observe.kinds import ONCE_FIELDS, EventKind
from onward.store.connection import SharedConnection
from onward.store.encryption import Cipher, open_text, seal_text
from onward.store.leases import Fences, fenced
from onward.store.sql import Db

LogRow = tuple[datetime, str, dict[str, Any], "str | None"]
"""(at, kind, detail, dedupe key) of one event to record."""


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    thread_id: str
    at: datetime
    kind: str
    detail: dict[str, Any]


class EventLog:
    """Appends and reads events on a connection of its own, opened once: nodes on several
    threads log after every step, and a connection per write cost more than the write."""

    def __init__(
        self, connect: Callable[[], Db], cipher: Cipher | None = None, fences: Fences | None = None
    ) -> None:
        self._db = SharedConnection(connect)
        self._cipher = cipher
        self._fences = fences
        """A drive's events are fenced by its lease (store/leases.py): a driver that lost
        it logs nothing more (``LeaseLostError``)."""

    def close(self) -> None:
        self._db.close()

    def record(
        self,
        thread_id: str,
        kind: EventKind,
        detail: dict[str, Any] | None = None,
        *,
        at: datetime | None = None,
    ) -> None:
        self.record_many(thread_id, [(at or utcnow(), str(kind), detail or {}, None)])

    def record_many(
        self,
        thread_id: str,
        rows: Sequence[LogRow],
        *,
        artifact_refs: Sequence[tuple[str, str]] = (),
    ) -> None:
        """(at, kind, detail, dedupe key) rows in one transaction; a row whose dedupe key
        the thread already has is dropped (a re-run after a crash logs nothing twice).
        ``artifact_refs``: (sha256, thread id) uses of artifact bodies, in the same
        transaction."""
        statements = self.statements(thread_id, rows, artifact_refs)
        if not statements:
            return
        with (
            self._db.use() as conn,
            fenced(conn, self._fences, thread_id) as db,
            db.transaction(),
        ):
            for sql, params in statements:
                db.executemany(sql, params)

    def statements(
        self,
        thread_id: str,
        rows: Sequence[LogRow],
        artifact_refs: Sequence[tuple[str, str]] = (),
    ) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """The inserts (``?`` placeholders) that record ``rows`` and ``artifact_refs``, for
        a caller's own transaction (the checkpoint savers run them with a task's writes)."""
        out: list[tuple[str, list[tuple[Any, ...]]]] = []
        if rows:
            values = [
                (
                    thread_id,
                    at.isoformat(),
                    kind,
                    seal_text(self._cipher, _json(detail)),
                    key,
                )
                for at, kind, detail, key in rows
            ]
            out.append(
                (
                    "INSERT INTO onward_events (thread_id, at, kind, detail, dedupe) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    values,
                )
            )
        if artifact_refs:
            out.append(
                (
                    "INSERT INTO onward_artifact_refs (sha256, thread_id) VALUES (?, ?) "
                    "ON CONFLICT DO NOTHING",
                    list(dict.fromkeys(artifact_refs)),
                )
            )
        return out

    def list(self, thread_id: str, kinds: Iterable[EventKind] | None = None) -> list[Event]:
        wanted = [str(k) for k in kinds] if kinds is not None else None
        sql = "SELECT id, thread_id, at, kind, detail FROM onward_events WHERE thread_id = ?"
        params: list[str] = [thread_id]
        order = " ORDER BY id"
        if wanted is not None:
            sql += f" AND kind IN ({', '.join('?' * len(wanted))})" if wanted else " AND 1 = 0"
            params += wanted
            if not any(k in ONCE_FIELDS for k in wanted):
                # Rows of these kinds have no dedupe key: saying so lets both databases
                # read them by the index of such rows' kinds (store schema 14), a long
                # run's few suspensions on resume rather than its every event.
                sql += " AND dedupe IS NULL"
            # +id: SQLite reads the rows of these kinds by that index and sorts them,
            # rather than walking every event of the thread in id order.
            order = " ORDER BY +id"
        with self._db.use() as db:
            rows = db.execute(sql + order, params).fetchall()
        return [
            Event(r[0], r[1], datetime.fromisoformat(r[2]), r[3], self._detail(r[4])) for r in rows
        ]

    def threads_with(self, kind: EventKind) -> Sequence[str]:
        """The threads that logged an event of ``kind``."""
        with self._db.use() as db:
            rows = db.execute(
                "SELECT DISTINCT thread_id FROM onward_events WHERE kind = ? ORDER BY thread_id",
                (str(kind),),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def _detail(self, stored: str) -> dict[str, Any]:
        return _detail(open_text(self._cipher, stored))


def _detail(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {"text": text}  # lease events store the owner as plain text
    return value if isinstance(value, dict) else {"value": value}


def _json(detail: dict[str, Any]) -> str:
    """A detail as compact JSON (no space after each separator: ~5 % of an event row)."""
    return _DETAIL_JSON.encode(detail)


_DETAIL_JSON = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ":"))
"""``json.dumps`` with these options, without making an encoder per row (thread-safe: an
encoder keeps no state between calls)."""
