"""Leases: one live driver per run.

LangGraph lets two processes resume the same thread, and then every remaining
step happens twice. A driver must hold the run's lease: a row with its owner,
heartbeat and expiry. A heartbeat thread renews it while the run is driven;
the lease is released at the end. A live lease held by someone else refuses
the resume (exit code 4); an expired one is taken over, and the takeover is
logged as an event. So is the live lease of a driver that died on this host (its pid is
gone or reused, store/drivers.py): a resume after a kill need not wait out the TTL.
Portable SQL only (one UPSERT, plain UPDATE/DELETE), so the Postgres backend reuses it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from onward.errors import RunBusyError, StoreError
from onward.model.clock import utcnow
from onward.observe.kinds import EventKind
from onward.policies.durations import fix_durations
from onward.settings import DEFAULT_HEARTBEAT as DEFAULT_BEAT
from onward.settings import DEFAULT_LEASE_TTL, settings
from onward.store.drivers import gone_here, new_driver_id
from onward.store.sql import Db

LEASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS onward_leases (
    thread_id    TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    acquired_at  TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    expires_at   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS onward_events (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id TEXT NOT NULL,
    at        TEXT NOT NULL,
    kind      TEXT NOT NULL,
    detail    TEXT NOT NULL DEFAULT '',
    dedupe    TEXT
);
CREATE INDEX IF NOT EXISTS onward_events_thread ON onward_events (thread_id, id);
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class LeasePolicy:
    """How long a driver's claim on a run lasts without a heartbeat."""

    ttl: timedelta = DEFAULT_LEASE_TTL
    """How long a lease stays live after its last heartbeat."""
    heartbeat: timedelta = DEFAULT_BEAT
    """Time between heartbeats; keep well under ``ttl``."""

    def __post_init__(self) -> None:
        fix_durations(self, "ttl", "heartbeat")
        if self.heartbeat >= self.ttl:
            raise ValueError("heartbeat must be shorter than ttl")

    @classmethod
    def from_env(cls) -> LeasePolicy:
        """``ONWARD_LEASE_TTL`` and ``ONWARD_HEARTBEAT`` (see :mod:`onward.settings`)."""
        s = settings()
        return cls(ttl=s.lease_ttl, heartbeat=s.heartbeat)

    def stale(self, heartbeat_at: datetime, now: datetime) -> bool:
        """A heartbeat older than two intervals means the driver is stuck or dead."""
        return now - heartbeat_at > 2 * self.heartbeat


@dataclass(frozen=True, slots=True)
class LeaseRow:
    thread_id: str
    owner: str
    acquired_at: datetime
    heartbeat_at: datetime
    expires_at: datetime

    def live(self, now: datetime) -> bool:
        """Its driver may still be driving: the lease has not expired, and the driver is
        not a process known to have died on this host."""
        return self.expires_at > now and gone_here(self.owner) is None


def new_owner() -> str:
    """A driver id naming this process (store/drivers.py)."""
    return new_driver_id()


class Leases:
    """Lease operations on their own connection (the heartbeat runs in another thread)."""

    def __init__(
        self,
        connect: Callable[[], Db],
        policy: LeasePolicy,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._connect = connect
        self.policy = policy
        self.clock = clock
        self.on_renew: Callable[[Db, str, str], None] | None = None
        """Called on the renewing connection after each heartbeat of ours, with the
        thread id and owner: the store renews a worker's queue claim with its lease."""

    def get(self, thread_id: str) -> LeaseRow | None:
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT thread_id, owner, acquired_at, heartbeat_at, expires_at "
                "FROM onward_leases WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()
        finally:
            conn.close()
        return _lease(row) if row else None

    def all(self) -> dict[str, LeaseRow]:
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT thread_id, owner, acquired_at, heartbeat_at, expires_at FROM onward_leases"
            ).fetchall()
        finally:
            conn.close()
        return {r[0]: _lease(r) for r in rows}

    def stopped(self, lease: LeaseRow) -> bool:
        """The lease's driver hangs or is gone: its heartbeat is stale, or its process on
        this host has exited (known at once, not only once the heartbeat is stale)."""
        return self.policy.stale(lease.heartbeat_at, self.clock()) or (
            gone_here(lease.owner) is not None
        )

    def acquire(self, thread_id: str, owner: str) -> LeaseRow | None:
        """Take the lease; returns the expired lease that was taken over, if any.
        Raises RunBusyError while someone else's lease is live."""
        conn = self._connect()
        try:
            with conn.transaction(lock=f"lease:{thread_id}"):
                return self._acquire(conn, thread_id, owner)
        finally:
            conn.close()

    def _acquire(self, conn: Db, thread_id: str, owner: str) -> LeaseRow | None:
        now = self.clock()
        row = conn.execute(
            "SELECT thread_id, owner, acquired_at, heartbeat_at, expires_at "
            "FROM onward_leases WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()
        previous = _lease(row) if row else None
        dead = None
        if previous and previous.owner != owner and previous.expires_at > now:
            dead = gone_here(previous.owner)  # a driver killed on this host: at once
            if dead is None:
                age = (now - previous.heartbeat_at).total_seconds()
                raise RunBusyError(thread_id, previous.owner, age, previous.expires_at)
        expires = now + self.policy.ttl
        conn.execute(
            "INSERT INTO onward_leases VALUES (?, ?, ?, ?, ?) ON CONFLICT (thread_id) DO "
            "UPDATE SET owner = excluded.owner, acquired_at = excluded.acquired_at, "
            "heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at",
            (thread_id, owner, now.isoformat(), now.isoformat(), expires.isoformat()),
        )
        taken_over = previous if previous and previous.owner != owner else None
        if taken_over:
            why = dead or f"expired {taken_over.expires_at.isoformat()}"
            _event(
                conn,
                thread_id,
                now,
                EventKind.LEASE_TAKEN_OVER,
                f"from {taken_over.owner} ({why}) by {owner}",
            )
        _event(conn, thread_id, now, EventKind.LEASE_ACQUIRED, owner)
        return taken_over

    def renew(self, thread_id: str, owner: str) -> bool:
        """Heartbeat; False when the lease is no longer ours (taken over after expiry)."""
        conn = self._connect()
        try:
            now = self.clock()
            cur = conn.execute(
                "UPDATE onward_leases SET heartbeat_at = ?, expires_at = ? "
                "WHERE thread_id = ? AND owner = ?",
                (
                    now.isoformat(),
                    (now + self.policy.ttl).isoformat(),
                    thread_id,
                    owner,
                ),
            )
            if cur.rowcount != 1:
                return False
            if self.on_renew is not None:
                self.on_renew(conn, thread_id, owner)
            return True
        finally:
            conn.close()

    def release(self, thread_id: str, owner: str) -> None:
        conn = self._connect()
        try:
            with conn.transaction():
                cur = conn.execute(
                    "DELETE FROM onward_leases WHERE thread_id = ? AND owner = ?",
                    (thread_id, owner),
                )
                if cur.rowcount:
                    _event(conn, thread_id, self.clock(), EventKind.LEASE_RELEASED, owner)
        finally:
            conn.close()

    def events(self, thread_id: str) -> list[tuple[datetime, str, str]]:
        """The lease events of a run (acquired, taken over, released), in order."""
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT at, kind, detail FROM onward_events WHERE thread_id = ? "
                # Lease events have no dedupe key: by the index of such rows' kinds, see
                # EventLog.list.
                "AND kind IN (?, ?, ?) AND dedupe IS NULL ORDER BY +id",
                (thread_id, *_LEASE_KINDS),
            ).fetchall()
        finally:
            conn.close()
        return [(datetime.fromisoformat(a), k, d) for a, k, d in rows]


class Heartbeat:
    """Renews a lease every ``policy.heartbeat`` until stopped."""

    def __init__(self, leases: Leases, thread_id: str, owner: str) -> None:
        self.leases, self.thread_id, self.owner = leases, thread_id, owner
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="onward-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.leases.policy.heartbeat.total_seconds()):
            try:
                if not self.leases.renew(self.thread_id, self.owner):
                    self.lost.set()
                    return
            except StoreError:
                continue  # a busy database delays one beat; the ttl absorbs it


_LEASE_KINDS = (EventKind.LEASE_ACQUIRED, EventKind.LEASE_TAKEN_OVER, EventKind.LEASE_RELEASED)


def _lease(r: tuple[str, str, str, str, str]) -> LeaseRow:
    return LeaseRow(r[0], r[1], *(datetime.fromisoformat(x) for x in r[2:]))


def _event(conn: Db, thread_id: str, at: datetime, kind: EventKind, detail: str) -> None:
    conn.execute(
        "INSERT INTO onward_events (thread_id, at, kind, detail) VALUES (?, ?, ?, ?)",
        (thread_id, at.isoformat(), kind, detail),
    )
