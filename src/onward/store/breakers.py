"""Circuit breakers: one per service, in the store, shared by every run and process on it.

closed → open when the failure rate over the last ``window`` calls reaches
``failure_rate`` (with at least ``min_calls`` calls), or after ``consecutive``
failures in a row. While open, calls to the service are not made: steps are
deferred and other work goes on. After ``cooldown`` one caller gets a half-open
probe; its success closes the breaker, its failure opens it again. Every change is
written to the event log. Only transient failures count: a 4xx is the caller's
fault, not the service's health.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from onward.observe.events import EventLog
from onward.observe.kinds import EventKind
from onward.policies.durations import fix_durations
from onward.store.connection import SharedConnection
from onward.store.sql import Db


@dataclass(frozen=True, kw_only=True, slots=True)
class BreakerPolicy:
    """When a service's breaker opens and how it recovers (``@tool(breaker=...)``)."""

    failure_rate: float = 0.3
    """Open when at least this share of the last ``window`` calls failed..."""
    min_calls: int = 10
    """... and there were at least this many calls in the window."""
    window: int = 20
    """How many recent calls the failure rate looks at."""
    consecutive: int = 5
    """Open after this many failures in a row, whatever the rate."""
    cooldown: timedelta = timedelta(seconds=30)
    """How long the breaker stays open before one half-open probe call is let through."""
    probe_timeout: timedelta = timedelta(minutes=2)
    """After this long, a probe that never reported back is presumed lost."""

    def __post_init__(self) -> None:
        fix_durations(self, "cooldown", "probe_timeout")
        if not 0 < self.failure_rate <= 1:
            raise ValueError("failure_rate must be above 0 and at most 1")
        if self.min_calls < 1 or self.window < 1 or self.consecutive < 1:
            raise ValueError("min_calls, window and consecutive must be at least 1")


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerRow:
    service: str
    state: BreakerState
    outcomes: str
    """Recent call outcomes, oldest first: ``1`` success, ``0`` failure."""
    consecutive: int
    opened_at: datetime | None
    probe_at: datetime | None
    probe_owner: str | None


class Breakers:
    def __init__(
        self,
        connect: Callable[[], Db],
        events: EventLog,
        clock: Callable[[], datetime],
    ) -> None:
        self._db, self._events, self.clock = SharedConnection(connect), events, clock

    def close(self) -> None:
        self._db.close()

    def get(self, service: str) -> BreakerRow | None:
        with self._db.use() as conn:
            return _read(conn, service)

    def blocked_until(self, service: str, policy: BreakerPolicy) -> datetime | None:
        """Read-only: when a call to ``service`` may next be tried, or None if now."""
        row = self.get(service)
        return None if row is None else _blocked_until(row, policy, self.clock())

    def acquire(
        self, service: str, policy: BreakerPolicy, thread_id: str, caller: str = ""
    ) -> datetime | None:
        """Ask to call ``service`` now: None = go ahead (possibly as the half-open probe,
        owned by ``caller``), else the time to try again. Atomic across processes."""
        seen = self.get(service)
        if seen is None or seen.state is BreakerState.CLOSED:
            return None  # the common case, without a write lock
        with self._db.use() as conn, conn.transaction(lock=f"breaker:{service}"):
            row = _read(conn, service)
            now = self.clock()
            if row is None:
                return None
            until = _blocked_until(row, policy, now)
            if until is not None:
                return until
            if row.state is BreakerState.CLOSED:
                return None
            # Cooldown over (or a probe was lost): this caller is the half-open probe.
            conn.execute(
                "UPDATE onward_breakers SET state = ?, probe_at = ?, probe_owner = ?, "
                "updated_at = ? WHERE service = ?",
                (
                    BreakerState.HALF_OPEN.value,
                    now.isoformat(),
                    caller,
                    now.isoformat(),
                    service,
                ),
            )
        self._events.record(
            thread_id, EventKind.BREAKER_HALF_OPEN, {"service": service, "probe": True}, at=now
        )
        return None

    def record(
        self, service: str, ok: bool, policy: BreakerPolicy, thread_id: str, caller: str = ""
    ) -> None:
        """The outcome of a call. While half-open, only the probe's own outcome (its
        ``caller``) decides; a slow call from before counts in the window only."""
        change: tuple[EventKind, str] | None = None
        with self._db.use() as conn, conn.transaction(lock=f"breaker:{service}"):
            now = self.clock()
            row = _read(conn, service) or BreakerRow(
                service, BreakerState.CLOSED, "", 0, None, None, None
            )
            outcomes = (row.outcomes + ("1" if ok else "0"))[-policy.window :]
            consecutive = 0 if ok else row.consecutive + 1
            state, opened_at = row.state, row.opened_at
            probe_at, probe_owner = None, None
            if row.state is BreakerState.HALF_OPEN and row.probe_owner != caller:
                probe_at, probe_owner = row.probe_at, row.probe_owner  # still the probe's
            elif row.state is BreakerState.HALF_OPEN:
                if ok:
                    state, outcomes, opened_at = BreakerState.CLOSED, "", None
                    change = (EventKind.BREAKER_CLOSED, "the half-open probe succeeded")
                else:
                    state, opened_at = BreakerState.OPEN, now
                    change = (EventKind.BREAKER_OPENED, "the half-open probe failed")
            elif row.state is BreakerState.CLOSED and not ok:
                failed = outcomes.count("0")
                rate = failed / len(outcomes)
                if consecutive >= policy.consecutive:
                    state, opened_at = BreakerState.OPEN, now
                    change = (EventKind.BREAKER_OPENED, f"{consecutive} failures in a row")
                elif len(outcomes) >= policy.min_calls and rate >= policy.failure_rate:
                    state, opened_at = BreakerState.OPEN, now
                    change = (
                        EventKind.BREAKER_OPENED,
                        f"{failed} of the last {len(outcomes)} calls failed ({rate:.0%})",
                    )
            conn.execute(
                "INSERT INTO onward_breakers (service, state, outcomes, consecutive, opened_at, "
                "probe_at, probe_owner, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (service) DO UPDATE SET state = excluded.state, outcomes = "
                "excluded.outcomes, consecutive = excluded.consecutive, opened_at = "
                "excluded.opened_at, probe_at = excluded.probe_at, probe_owner = "
                "excluded.probe_owner, updated_at = excluded.updated_at",
                (
                    service,
                    state.value,
                    outcomes,
                    consecutive,
                    opened_at.isoformat() if opened_at else None,
                    probe_at.isoformat() if probe_at else None,
                    probe_owner,
                    now.isoformat(),
                ),
            )
        if change is not None:
            self._events.record(
                thread_id, change[0], {"service": service, "reason": change[1]}, at=now
            )


def _blocked_until(row: BreakerRow, policy: BreakerPolicy, now: datetime) -> datetime | None:
    if row.state is BreakerState.OPEN and row.opened_at is not None:
        reopen = row.opened_at + policy.cooldown
        return reopen if now < reopen else None
    if row.state is BreakerState.HALF_OPEN and row.probe_at is not None:
        # One probe at a time; look again after a cooldown (the probe usually reports back
        # long before it would be presumed lost).
        lost = row.probe_at + policy.probe_timeout
        return min(lost, now + policy.cooldown) if now < lost else None
    return None


def _read(conn: Db, service: str) -> BreakerRow | None:
    r = conn.execute(
        "SELECT service, state, outcomes, consecutive, opened_at, probe_at, probe_owner "
        "FROM onward_breakers WHERE service = ?",
        (service,),
    ).fetchone()
    if r is None:
        return None
    return BreakerRow(
        r[0],
        BreakerState(r[1]),
        r[2],
        int(r[3]),
        datetime.fromisoformat(r[4]) if r[4] else None,
        datetime.fromisoformat(r[5]) if r[5] else None,
        r[6],
    )
