"""Crons of ``onward serve`` (LangGraph Server's ``/runs/crons``): a run request started
on a schedule, on a thread or on a new thread each time, by the server's scheduler
(:mod:`onward.serve.crons`). Each cron belongs to the API user who made it. The run request
is sealed with the store's key on an encrypted store, like every request onward keeps.

A due cron is claimed by moving its ``next_run_date`` on with a compare-and-set, so two
servers on one database never both start the same firing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from onward.store.connection import SharedConnection
from onward.store.encryption import Cipher, open_text, seal_text
from onward.store.sql import Db

_COLUMNS = (
    "cron_id, owner, thread_id, assistant_id, schedule, timezone, payload, metadata, "
    "on_run_completed, enabled, end_time, next_run_date, created_at, updated_at"
)


def stamp(when: datetime | None) -> str | None:
    """A time as the table keeps it: UTC ISO with microseconds, so text order is time order."""
    return None if when is None else when.astimezone(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True)
class CronRow:
    cron_id: str
    owner: str
    thread_id: str | None
    assistant_id: str
    schedule: str
    timezone: str | None
    payload: dict[str, Any]
    metadata: dict[str, Any]
    on_run_completed: str | None
    enabled: bool
    end_time: datetime | None
    next_run_date: datetime | None
    created_at: datetime
    updated_at: datetime


class Crons:
    def __init__(self, connect: Callable[[], Db], cipher: Cipher | None) -> None:
        self._db = SharedConnection(connect)
        self._cipher = cipher

    def close(self) -> None:
        self._db.close()

    def add(self, row: CronRow) -> None:
        with self._db.use() as db:
            db.execute(
                f"INSERT INTO onward_crons ({_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self._values(row),
            )

    def replace(self, row: CronRow) -> None:
        with self._db.use() as db:
            db.execute(
                "UPDATE onward_crons SET assistant_id = ?, schedule = ?, timezone = ?, "
                "payload = ?, metadata = ?, on_run_completed = ?, enabled = ?, end_time = ?, "
                "next_run_date = ?, updated_at = ? WHERE cron_id = ?",
                (*self._values(row)[3:12], stamp(row.updated_at), row.cron_id),
            )

    def get(self, cron_id: str) -> CronRow | None:
        rows = self._select("WHERE cron_id = ?", (cron_id,))
        return rows[0] if rows else None

    def of(self, owner: str | None) -> list[CronRow]:
        """``owner``'s crons (every cron: None), oldest first."""
        if owner is None:
            return self._select("ORDER BY created_at", ())
        return self._select("WHERE owner = ? ORDER BY created_at", (owner,))

    def count_of(self, owner: str) -> int:
        with self._db.use() as db:
            row = db.execute(
                "SELECT count(*) FROM onward_crons WHERE owner = ?", (owner,)
            ).fetchone()
        return int(row[0])

    def delete(self, cron_id: str) -> None:
        with self._db.use() as db:
            db.execute("DELETE FROM onward_crons WHERE cron_id = ?", (cron_id,))

    def delete_for_thread(self, thread_id: str) -> None:
        with self._db.use() as db:
            db.execute("DELETE FROM onward_crons WHERE thread_id = ?", (thread_id,))

    def due(self, now: datetime) -> list[CronRow]:
        """Enabled crons whose next run is at or before ``now``."""
        return self._select(
            "WHERE enabled = 1 AND next_run_date IS NOT NULL AND next_run_date <= ? "
            "ORDER BY next_run_date",
            (stamp(now),),
        )

    def claim(self, cron_id: str, was: datetime, then: datetime | None) -> bool:
        """Move a due cron's next run from ``was`` to ``then`` (None: it has no more);
        False when someone else moved it first (their firing, not ours)."""
        with self._db.use() as db:
            cur = db.execute(
                "UPDATE onward_crons SET next_run_date = ? WHERE cron_id = ? AND next_run_date = ?",
                (stamp(then), cron_id, stamp(was)),
            )
            return cur.rowcount == 1

    def _values(self, row: CronRow) -> tuple[Any, ...]:
        """In ``_COLUMNS`` order (``replace`` takes assistant_id to next_run_date, 3:12)."""
        return (
            row.cron_id,
            row.owner,
            row.thread_id,
            row.assistant_id,
            row.schedule,
            row.timezone,
            seal_text(self._cipher, json.dumps(row.payload)),
            json.dumps(row.metadata),
            row.on_run_completed,
            int(row.enabled),
            stamp(row.end_time),
            stamp(row.next_run_date),
            stamp(row.created_at),
            stamp(row.updated_at),
        )

    def _select(self, where: str, params: tuple[Any, ...]) -> list[CronRow]:
        with self._db.use() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM onward_crons {where}", params).fetchall()
        return [self._row(r) for r in rows]

    def _row(self, r: Any) -> CronRow:
        values = list(r)

        def when(text: str | None) -> datetime | None:
            return None if text is None else datetime.fromisoformat(text)

        created, updated = when(values[12]), when(values[13])
        assert created is not None
        assert updated is not None
        return CronRow(
            cron_id=values[0],
            owner=values[1],
            thread_id=values[2],
            assistant_id=values[3],
            schedule=values[4],
            timezone=values[5],
            payload=json.loads(open_text(self._cipher, values[6])),
            metadata=json.loads(values[7]),
            on_run_completed=values[8],
            enabled=bool(values[9]),
            end_time=when(values[10]),
            next_run_date=when(values[11]),
            created_at=created,
            updated_at=updated,
        )
