"""The effect ledger: at most one execution of a side effect per idempotency key.

LangGraph re-runs a node killed before its writes commit, so a tool with an
external effect would repeat it. For non-pure tools, execute claims the key as
``started`` (committed *before* the call), calls the tool, then records
``completed`` with the result. A later execution of the same key finds either
the result (and returns it without calling) or a ``started`` row with no result:
the process died mid-effect and the outcome is unknown. Same database as the
checkpoints; portable SQL (INSERT … ON CONFLICT DO NOTHING, plain UPDATE).

A drive's writes here (claims, re-calls, results, settlements) are fenced by its lease
(store/leases.py): each is written in a transaction that first checks that the lease still
has the drive's epoch, so a driver that lost its lease claims nothing (``LeaseLostError``)
and so calls nothing. Writes of a thread this process does not drive (``onward resolve``)
are single statements, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from onward.model.clock import utcnow
from onward.store.artifacts import canonical_json
from onward.store.connection import SharedConnection
from onward.store.encryption import Cipher, open_text, seal_text
from onward.store.leases import Fences, fenced
from onward.store.sql import Cursor, Db


class EffectStatus(StrEnum):
    STARTED = "started"
    COMPLETED = "completed"
    SKIPPED = "skipped"
    """A human settled an unknown outcome as "skip": neither done nor to be retried."""
    RETRY = "retry"
    """A human settled an unknown outcome as "did not happen": perform it again."""


def effect_key(thread_id: str, step_id: str, args: Any) -> str:
    """sha256 of (thread id, step id, canonical JSON of the resolved args)."""
    material = canonical_json([thread_id, step_id, args])
    return hashlib.sha256(material).hexdigest()


@dataclass(frozen=True, slots=True)
class Effect:
    key: str
    thread_id: str
    step_id: str
    tool: str
    args: Any
    status: EffectStatus
    result: Any
    started_at: datetime
    completed_at: datetime | None
    calls: int
    compensable: bool


_COLUMNS = (
    "key, thread_id, step_id, tool, args, status, result, started_at, completed_at, calls, "
    "compensable"
)


class Ledger:
    """Ledger rows on a connection of its own (execute tasks run on several threads)."""

    def __init__(
        self, connect: Callable[[], Db], cipher: Cipher | None = None, fences: Fences | None = None
    ) -> None:
        self._db = SharedConnection(connect)
        self._cipher = cipher
        self._fences = fences
        """The leases of this process's drives: their writes here are fenced by them."""

    def _dump(self, value: Any) -> str:
        return seal_text(self._cipher, json.dumps(value, ensure_ascii=False))

    def close(self) -> None:
        self._db.close()

    def claim(
        self, key: str, *, thread_id: str, step_id: str, tool: str, args: Any, compensable: bool
    ) -> Effect | None:
        """Record ``started``; None when this call made the claim, else the existing row."""
        with self._db.use() as db, fenced(db, self._fences, thread_id) as conn:
            cur = conn.execute(
                f"INSERT INTO onward_effects ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, NULL, ?, NULL, 1, ?) ON CONFLICT (key) DO NOTHING",
                (
                    key,
                    thread_id,
                    step_id,
                    tool,
                    self._dump(args),
                    EffectStatus.STARTED.value,
                    utcnow().isoformat(),
                    int(compensable),
                ),
            )
            if cur.rowcount == 1:
                return None
        existing = self.get(key)
        assert existing is not None
        return existing

    def again(self, key: str) -> None:
        """Count another call of a started effect (idempotent re-call, or a retry)."""
        self._update(
            key,
            "UPDATE onward_effects SET calls = calls + 1, status = ?, started_at = ? WHERE key = ?",
            (EffectStatus.STARTED.value, utcnow().isoformat(), key),
        )

    def complete(self, key: str, result: Any) -> None:
        self._update(
            key,
            "UPDATE onward_effects SET status = ?, result = ?, completed_at = ? WHERE key = ?",
            (EffectStatus.COMPLETED.value, self._dump(result), utcnow().isoformat(), key),
        )

    def skip(self, key: str) -> None:
        self._settle(key, EffectStatus.SKIPPED)

    def allow_retry(self, key: str) -> None:
        self._settle(key, EffectStatus.RETRY)

    def _settle(self, key: str, status: EffectStatus) -> None:
        self._update(
            key,
            "UPDATE onward_effects SET status = ?, completed_at = ? WHERE key = ?",
            (status.value, utcnow().isoformat(), key),
        )

    def _update(self, key: str, sql: str, params: tuple[Any, ...]) -> Cursor:
        """One statement on ``key``'s row, fenced by its thread's lease when this process
        drives that thread (one statement alone otherwise: atomic on its own)."""
        with self._db.use() as db:
            if not self._fences:
                return db.execute(sql, params)
            row = db.execute("SELECT thread_id FROM onward_effects WHERE key = ?", (key,))
            found = row.fetchone()
            thread_id = str(found[0]) if found else ""
            with fenced(db, self._fences, thread_id) as conn:
                return conn.execute(sql, params)

    def get(self, key: str) -> Effect | None:
        with self._db.use() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM onward_effects WHERE key = ?", (key,)
            ).fetchone()
        return self._effect(row) if row else None

    def for_thread(self, thread_id: str) -> list[Effect]:
        with self._db.use() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM onward_effects WHERE thread_id = ? ORDER BY started_at",
                (thread_id,),
            ).fetchall()
        return [self._effect(r) for r in rows]

    def _effect(self, r: tuple[Any, ...]) -> Effect:
        return Effect(
            key=r[0],
            thread_id=r[1],
            step_id=r[2],
            tool=r[3],
            args=json.loads(open_text(self._cipher, r[4])),
            status=EffectStatus(r[5]),
            result=json.loads(open_text(self._cipher, r[6])) if r[6] is not None else None,
            started_at=datetime.fromisoformat(r[7]),
            completed_at=datetime.fromisoformat(r[8]) if r[8] else None,
            calls=int(r[9]),
            compensable=bool(r[10]),
        )
