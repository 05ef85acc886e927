"""Leases: one live driver per run.

LangGraph lets two processes resume the same thread, and then every remaining
step happens twice. A driver must hold the run's lease: a row with its owner,
heartbeat and expiry. A heartbeat thread renews it while the run is driven;
the lease is released at the end. A live lease held by someone else refuses
the resume (exit code 4); an expired one is taken over, and the takeover is
logged as an event. So is the live lease of a driver that died on this host (its pid is
gone or reused, store/drivers.py): a resume after a kill need not wait out the TTL.
Portable SQL only (one UPSERT, plain UPDATE/DELETE), so the Postgres backend reuses it.

**Fencing.** A heartbeat notices a lost lease only between supersteps; a driver that was
paused or cut off longer than the TTL would write on after another took over. So every
acquisition gives the lease a new **epoch** (a fencing token from a counter of the store
that only grows), and this process's drive keeps it in :class:`Fences`. A write that makes
progress — a checkpoint commit, an effect's claim or completion, a heartbeat, the release —
checks, inside its own transaction, that the thread's lease is still (owner, epoch): on
Postgres the check locks the lease row ``FOR SHARE`` (a takeover's upsert waits for the
commit, or the check waits for the takeover's and fails), on SQLite the transaction is
``BEGIN IMMEDIATE`` (one writer). A failed check raises :class:`LeaseLostError` and writes
nothing. A thread this process holds no lease on is not fenced: LangGraph used directly
with onward's savers, or a person's ``update_state`` from another process, write as before.

**Whose clock.** Expiry is computed from the database's clock, never the process's: on
Postgres ``clock_timestamp()``, on SQLite the host's clock read by SQLite (``'now'``): a
SQLite store has no server, its writers share one host and so one clock. A process whose
own clock is wrong (or an injected test clock) cannot take over a live lease.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from onward.errors import LeaseLostError, RunBusyError, StoreError
from onward.model.clock import utcnow
from onward.observe.kinds import EventKind
from onward.policies.durations import fix_durations
from onward.settings import DEFAULT_HEARTBEAT as DEFAULT_BEAT
from onward.settings import DEFAULT_LEASE_TTL, settings
from onward.store import ticking
from onward.store.drivers import gone_here, new_driver_id
from onward.store.sql import Db, Statement
from onward.store.ticking import Job, Ticker


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
    epoch: int = 0
    """The fencing token: grows with every acquisition (0: taken before onward fenced)."""

    def live(self, now: datetime) -> bool:
        """Its driver may still be driving: the lease has not expired, and the driver is
        not a process known to have died on this host."""
        return self.expires_at > now and gone_here(self.owner) is None


def new_owner() -> str:
    """A driver id naming this process (store/drivers.py)."""
    return new_driver_id()


@dataclass(frozen=True, slots=True)
class Fence:
    """A lease this process's drive holds: who, and the epoch it was acquired with."""

    owner: str
    epoch: int


class Fences:
    """The leases this process's drives hold, by thread, and those found lost. Writes of a
    thread with a fence here are conditioned on it (:func:`fenced`); others are not."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, Fence] = {}
        self._lost: set[str] = set()

    def hold(self, thread_id: str, fence: Fence) -> None:
        with self._lock:
            self._held[thread_id] = fence
            self._lost.discard(thread_id)

    def of(self, thread_id: str) -> Fence | None:
        with self._lock:
            return self._held.get(thread_id)

    def drop(self, thread_id: str, owner: str) -> None:
        """``owner``'s drive ended: its thread's writes are no longer fenced here."""
        with self._lock:
            if (held := self._held.get(thread_id)) is not None and held.owner == owner:
                del self._held[thread_id]
                self._lost.discard(thread_id)

    def lose(self, thread_id: str) -> None:
        """A fenced write found the lease gone: the drive must stop (it stays fenced)."""
        with self._lock:
            self._lost.add(thread_id)

    def lost(self, thread_id: str) -> bool:
        with self._lock:
            return thread_id in self._lost

    def check_lost(self, thread_id: str) -> None:
        """Raise :class:`LeaseLostError` if a write of the thread was refused."""
        if self.lost(thread_id):
            raise LeaseLostError(thread_id)

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._held)


FENCE_SQL = "SELECT 1 FROM onward_leases WHERE thread_id = ? AND owner = ? AND epoch = ?"
"""A fence check (SQLite, and Postgres's ledger writes with ``FOR SHARE``)."""

FENCE_SQLSTATE = "OW001"
"""The SQLSTATE ``onward_fence`` raises: a lease is not the drive's any more."""


def check_fence(db: Db, thread_id: str, fence: Fence, fences: Fences | None = None) -> None:
    """Inside a write transaction: raise :class:`LeaseLostError` unless the thread's lease
    is still ``fence``. On Postgres the row is locked ``FOR SHARE`` until the commit, so a
    takeover waits for this transaction (or this check waits for the takeover, and fails)."""
    share = " FOR SHARE" if db.postgres else ""
    row = db.execute(FENCE_SQL + share, (thread_id, fence.owner, fence.epoch)).fetchone()
    if row is None:
        if fences is not None:
            fences.lose(thread_id)
        raise LeaseLostError(thread_id)


@contextmanager
def fenced(db: Db, fences: Fences | None, thread_id: str) -> Iterator[Db]:
    """A transaction in which a write of ``thread_id`` happens only while this process's
    drive still holds its lease (:class:`LeaseLostError` otherwise, nothing written). A
    thread without a fence here: the statements run as they are, each atomic alone."""
    fence = fences.of(thread_id) if fences is not None else None
    if fence is None:
        yield db
        return
    # SQLite: BEGIN IMMEDIATE (a lock name), so the check and the write see one database.
    with db.transaction(lock=None if db.postgres else "fence"):
        check_fence(db, thread_id, fence, fences)
        yield db


def fenced_write(
    db: Db, fences: Fences | None, thread_id: str, sql: str, params: Sequence[Any]
) -> int:
    """One ``UPDATE``/``DELETE`` (``sql`` ends with its ``WHERE`` clause) of ``thread_id``,
    written only while this process's drive still holds its lease, as :func:`fenced`
    does; returns the rows written. On Postgres it is one statement, the check inside it
    (``EXISTS`` of the lease row, locked ``FOR SHARE`` until the statement commits: a
    takeover waits for it, or it waits for the takeover and writes nothing), not a
    transaction of four; only when it wrote nothing does a second look tell a lost lease
    (:class:`LeaseLostError`) from a row that is not there."""
    fence = fences.of(thread_id) if fences is not None else None
    if fence is None or not db.postgres:
        with fenced(db, fences, thread_id) as conn:
            return int(conn.execute(sql, params).rowcount or 0)
    written = db.execute(
        f"{sql} AND EXISTS ({FENCE_SQL} FOR SHARE)",
        (*params, thread_id, fence.owner, fence.epoch),
    ).rowcount
    if not written:
        check_fence(db, thread_id, fence, fences)
    return int(written or 0)


def database_now(db: Db) -> datetime:
    """The database's clock, aware UTC: Postgres ``clock_timestamp()``; on SQLite the
    host's clock as SQLite reads it (one host, so one clock for all its writers)."""
    if db.postgres:
        now: datetime = db.execute("SELECT clock_timestamp()").fetchone()[0]
        return now.astimezone(UTC)
    text = db.execute("SELECT strftime('%Y-%m-%dT%H:%M:%f', 'now')").fetchone()[0]
    return datetime.fromisoformat(str(text)).replace(tzinfo=UTC)


def next_epoch(db: Db) -> int:
    """A fencing token larger than any handed out before in this store (a counter, not
    the lease row's: a released lease's row is deleted, its epoch must not come again)."""
    if db.postgres:
        return int(db.execute("SELECT nextval('onward_lease_epochs')").fetchone()[0])
    row = db.execute(
        "INSERT INTO onward_meta VALUES ('lease_epoch', '1') ON CONFLICT (key) DO UPDATE "
        "SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) RETURNING value"
    ).fetchone()
    return int(row[0])


class Leases:
    """Lease operations on their own connection (the heartbeat runs in another thread)."""

    def __init__(
        self,
        connect: Callable[[], Db],
        policy: LeasePolicy,
        clock: Callable[[], datetime] = utcnow,
        fences: Fences | None = None,
        ticker: Ticker | None = None,
    ) -> None:
        self._connect = connect
        self.policy = policy
        self.clock = clock
        """The process's clock: only for showing leases (stalled); expiry is the database's."""
        self.fences = fences if fences is not None else Fences()
        """The leases this process's drives hold (:meth:`acquire` adds, :meth:`release`
        removes); the store's savers and ledger fence their writes by them."""
        self.ticker = ticker if ticker is not None else ticking.ticker("")
        """Where this process's heartbeats of these leases run (one thread per store)."""
        self._spare: list[Db] = []
        self._spare_lock = threading.Lock()
        self._closed = False
        self.renewal: Callable[[str], Statement | None] = lambda _thread_id: None
        """What goes with each acquire and heartbeat of a run's lease, in its statement or
        transaction (None: nothing): the store renews a worker's queue claim with its
        lease."""

    @contextmanager
    def _use(self) -> Iterator[Db]:
        """A connection of these leases' own (a heartbeat never waits behind another
        component's statements), kept for the next call: on SQLite a new connection
        reads the database's schema at its first statement, which made taking and
        letting go of a lease cost 3.5 ms of the file's write lock per drive. One that
        saw an error is closed, not kept."""
        with self._spare_lock:
            conn = self._spare.pop() if self._spare else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        with self._spare_lock:
            if not self._closed and len(self._spare) < SPARE:
                self._spare.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the connections kept between calls (a call after this connects anew)."""
        with self._spare_lock:
            spare, self._spare, self._closed = self._spare, [], True
        for conn in spare:
            conn.close()

    def get(self, thread_id: str) -> LeaseRow | None:
        with self._use() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM onward_leases WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        return _lease(row) if row else None

    def live(self, thread_id: str) -> bool:
        """Someone may be driving the thread now: it has a lease that is live by the
        database's clock (:meth:`LeaseRow.live`; no lease, no clock read)."""
        lease = self.get(thread_id)
        return lease is not None and lease.live(self.clock())

    def all(self) -> dict[str, LeaseRow]:
        with self._use() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM onward_leases").fetchall()
        return {r[0]: _lease(r) for r in rows}

    def stopped(self, lease: LeaseRow) -> bool:
        """The lease's driver hangs or is gone: its heartbeat is stale, or its process on
        this host has exited (known at once, not only once the heartbeat is stale)."""
        return self.policy.stale(lease.heartbeat_at, self.clock()) or (
            gone_here(lease.owner) is not None
        )

    def acquire(self, thread_id: str, owner: str) -> LeaseRow | None:
        """Take the lease with a new epoch, which this process's writes of the thread are
        fenced by from now on; returns the expired lease that was taken over, if any.
        Raises RunBusyError while someone else's lease is live (by the database's clock)."""
        with self._use() as conn:
            if conn.postgres:
                taken_over, epoch = self._swap(conn, thread_id, owner)
            else:
                with conn.transaction(lock=f"lease:{thread_id}"):
                    taken_over, epoch = self._acquire(conn, thread_id, owner)
                    self._renewed(conn, thread_id)
        self.fences.hold(thread_id, Fence(owner, epoch))
        return taken_over

    def _swap(self, conn: Db, thread_id: str, owner: str) -> tuple[LeaseRow | None, int]:
        """Postgres: :meth:`_acquire` in two statements instead of a transaction of six (a
        worker acquires a lease per drive). One reads the database's clock, a new epoch
        and the lease; the other writes the lease and its events, only if the row is still
        the one read (its epoch and expiry: a takeover or a heartbeat in between makes it
        write nothing) or there was none and still is none. A lost race reads again.
        A run nobody holds a lease on (a fleet's every claim: a drive's end deletes its
        lease) takes one statement, :func:`_insert_fresh`."""
        epoch = _insert_fresh(conn, thread_id, owner, self.policy.ttl, self.renewal(thread_id))
        if epoch is not None:
            return None, epoch
        while True:
            now, epoch, previous, swap = _read_for_swap(conn, thread_id)
            taken_over, events = _taking(thread_id, owner, previous, now)
            expires = now + self.policy.ttl
            if _write_swap(conn, thread_id, owner, now, expires, epoch, swap, events):
                self._renewed(conn, thread_id)
                return taken_over, epoch

    def _acquire(self, conn: Db, thread_id: str, owner: str) -> tuple[LeaseRow | None, int]:
        now = database_now(conn)
        row = conn.execute(
            # FOR UPDATE: a fenced commit holding the row (FOR SHARE) finishes first.
            f"SELECT {_COLUMNS} FROM onward_leases WHERE thread_id = ?"
            + (" FOR UPDATE" if conn.postgres else ""),
            (thread_id,),
        ).fetchone()
        taken_over, events = _taking(thread_id, owner, _lease(row) if row else None, now)
        expires = now + self.policy.ttl
        epoch = next_epoch(conn)
        conn.execute(
            f"INSERT INTO onward_leases ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
            "acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at, "
            "expires_at = excluded.expires_at, epoch = excluded.epoch",
            (thread_id, owner, now.isoformat(), now.isoformat(), expires.isoformat(), epoch),
        )
        for kind, detail in events:
            _event(conn, thread_id, now, kind, detail)
        return taken_over, epoch

    def _ours(self, thread_id: str, owner: str) -> tuple[str, tuple[str | int, ...]]:
        """The WHERE clause (and its parameters) naming ``owner``'s lease: with its epoch
        when this process acquired it."""
        fence = self.fences.of(thread_id)
        if fence is None or fence.owner != owner:
            return "thread_id = ? AND owner = ?", (thread_id, owner)
        return "thread_id = ? AND owner = ? AND epoch = ?", (thread_id, owner, fence.epoch)

    def _renewed(self, conn: Db, thread_id: str) -> None:
        """The lease was taken or renewed: what goes with it (:attr:`renewal`). Taking it
        counts too: a worker's claim made before its drive took the lease would else
        lapse before the lease does when the drive is slow to start (a loaded host), and
        a second worker would claim the run, find it busy and requeue it."""
        also = self.renewal(thread_id)
        if also is not None:
            conn.execute(*also)

    def renew(self, thread_id: str, owner: str) -> bool:
        """Heartbeat (expiry by the database's clock); False when the lease is no longer
        ours (taken over after expiry)."""
        with self._use() as conn:
            now = database_now(conn)
            where, params = self._ours(thread_id, owner)
            cur = conn.execute(
                f"UPDATE onward_leases SET heartbeat_at = ?, expires_at = ? WHERE {where}",
                (now.isoformat(), (now + self.policy.ttl).isoformat(), *params),
            )
            if cur.rowcount != 1:
                self.fences.lose(thread_id)
                return False
            self._renewed(conn, thread_id)
            return True

    def release(self, thread_id: str, owner: str) -> None:
        """Let go of ``owner``'s lease (of its epoch: a lease taken over is not touched);
        this process's writes of the thread are no longer fenced."""
        where, params = self._ours(thread_id, owner)
        with self._use() as conn:
            if conn.postgres:  # one statement: the delete and its event, by the server's clock
                conn.execute(
                    f"WITH gone AS (DELETE FROM onward_leases WHERE {where} RETURNING thread_id) "
                    "INSERT INTO onward_events (thread_id, at, kind, detail) "
                    f"SELECT thread_id, {PG_NOW_TEXT}, ?, ? FROM gone",
                    (*params, EventKind.LEASE_RELEASED, owner),
                )
            else:
                with conn.transaction():
                    cur = conn.execute(f"DELETE FROM onward_leases WHERE {where}", params)
                    if cur.rowcount:
                        now = database_now(conn)
                        _event(conn, thread_id, now, EventKind.LEASE_RELEASED, owner)
        self.fences.drop(thread_id, owner)

    def events(self, thread_id: str) -> list[tuple[datetime, str, str]]:
        """The lease events of a run (acquired, taken over, released), in order."""
        with self._use() as conn:
            rows = conn.execute(
                "SELECT at, kind, detail FROM onward_events WHERE thread_id = ? "
                # Lease events have no dedupe key: by the index of such rows' kinds, see
                # EventLog.list.
                "AND kind IN (?, ?, ?) AND dedupe IS NULL ORDER BY +id",
                (thread_id, *_LEASE_KINDS),
            ).fetchall()
        return [(datetime.fromisoformat(a), k, d) for a, k, d in rows]


class Heartbeat:
    """Renews a lease every ``policy.heartbeat`` until stopped, on the store's ticker
    (store/ticking.py: one thread for every drive of the process, not one per drive)."""

    def __init__(self, leases: Leases, thread_id: str, owner: str) -> None:
        self.leases, self.thread_id, self.owner = leases, thread_id, owner
        self.lost = threading.Event()
        self._job: Job | None = None

    def __enter__(self) -> Heartbeat:
        every = self.leases.policy.heartbeat.total_seconds()
        self._job = self.leases.ticker.every(every, self._beat)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._job is not None:
            self._job.stop()  # a beat in progress ends first: none after the drive

    def _beat(self) -> bool:
        try:
            if not self.leases.renew(self.thread_id, self.owner):
                self.lost.set()
                return False
        except StoreError:
            pass  # a busy database delays one beat; the ttl absorbs it
        return True


SPARE = 4
"""Connections :class:`Leases` keeps between calls (more are closed after use): a drive,
its heartbeat and a few drives at once."""

_LEASE_KINDS = (EventKind.LEASE_ACQUIRED, EventKind.LEASE_TAKEN_OVER, EventKind.LEASE_RELEASED)


_COLUMNS = "thread_id, owner, acquired_at, heartbeat_at, expires_at, epoch"

Swap = tuple[int, str] | None
"""What a lease swap compares: the row's epoch and expiry text as read (None: no row)."""

PG_NOW_TEXT = (
    "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
)
"""Postgres: the server's clock as the text ``datetime.isoformat()`` writes for UTC."""


def _taking(
    thread_id: str, owner: str, previous: LeaseRow | None, now: datetime
) -> tuple[LeaseRow | None, list[tuple[EventKind, str]]]:
    """What ``owner`` taking the lease means, read before anything is written: the lease
    it takes over (None: there was none, or it was ``owner``'s own) and the events that
    say so, in order. RunBusyError while someone else's lease is live, unless its
    driver was killed on this host (then it is taken over at once)."""
    dead = None
    if previous and previous.owner != owner and previous.expires_at > now:
        dead = gone_here(previous.owner)
        if dead is None:
            age = (now - previous.heartbeat_at).total_seconds()
            raise RunBusyError(thread_id, previous.owner, age, previous.expires_at)
    taken_over = previous if previous and previous.owner != owner else None
    events = [(EventKind.LEASE_ACQUIRED, owner)]
    if taken_over:
        why = dead or f"expired {taken_over.expires_at.isoformat()}"
        events.insert(
            0, (EventKind.LEASE_TAKEN_OVER, f"from {taken_over.owner} ({why}) by {owner}")
        )
    return taken_over, events


def _read_for_swap(conn: Db, thread_id: str) -> tuple[datetime, int, LeaseRow | None, Swap]:
    """The database's clock, a new epoch, the run's lease (if any), and what a swap of
    that lease compares (its epoch and expiry as stored): one statement."""
    row = conn.execute(
        f"SELECT clock_timestamp(), nextval('onward_lease_epochs'), {_COLUMNS} "
        "FROM (SELECT 1) AS one LEFT JOIN onward_leases ON thread_id = ?",
        (thread_id,),
    ).fetchone()
    now: datetime = row[0].astimezone(UTC)
    if row[2] is None:
        return now, int(row[1]), None, None
    return now, int(row[1]), _lease(row[2:]), (int(row[7]), str(row[6]))


_FRESH_CTES = (
    "WITH won AS (INSERT INTO onward_leases "
    f"({_COLUMNS}) SELECT ?, ?, {{now}}, {{now}}, {{expires}}, nextval('onward_lease_epochs') "
    "FROM (SELECT clock_timestamp() AS t) AS now ON CONFLICT (thread_id) DO NOTHING "
    "RETURNING thread_id, acquired_at, epoch), "
    "logged AS (INSERT INTO onward_events (thread_id, at, kind, detail) "
    "SELECT thread_id, acquired_at, ?, ? FROM won)"
).format(
    now=PG_NOW_TEXT.replace("clock_timestamp()", "now.t"),
    expires=PG_NOW_TEXT.replace("clock_timestamp()", "(now.t + ? * interval '1 second')"),
)
"""Postgres: a lease taken where there is none, with its acquired event, by the
database's clock, in one statement; no row when one is there (someone else's, or a
takeover to be judged: :func:`_taking`): its CTEs, which :func:`_insert_fresh` ends with
what goes with the lease (a claim's renewal, :attr:`Leases.renewal`) and its SELECT."""


def _insert_fresh(
    conn: Db, thread_id: str, owner: str, ttl: timedelta, also: Statement | None
) -> int | None:
    """The new lease's epoch, or None when the run has a lease row already; ``also`` (the
    lease's :attr:`Leases.renewal`) in the same statement, whichever it is."""
    params = (thread_id, owner, ttl.total_seconds(), EventKind.LEASE_ACQUIRED, owner)
    renewed = "" if also is None else f", renewed AS ({also[0]})"
    sql = f"{_FRESH_CTES}{renewed} SELECT epoch FROM won"
    row = conn.execute(sql, params + (() if also is None else also[1])).fetchone()
    return int(row[0]) if row else None


def _write_swap(
    conn: Db,
    thread_id: str,
    owner: str,
    now: datetime,
    expires: datetime,
    epoch: int,
    previous: Swap,
    events: list[tuple[EventKind, str]],
) -> bool:
    """The lease (and its events, in order) written if the row is still ``previous``
    (None: still no row); False when another writer came first."""
    at = now.isoformat()
    guard = "FALSE"  # no row was read: one inserted meanwhile is someone else's
    guard_params: tuple[int | str, ...] = ()
    if previous is not None:
        guard = "onward_leases.epoch = ? AND onward_leases.expires_at = ?"
        guard_params = previous
    values = ", ".join("(?, ?, ?)" for _ in events)
    rows = conn.execute(
        f"WITH won AS (INSERT INTO onward_leases ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
        "acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at, "
        f"expires_at = excluded.expires_at, epoch = excluded.epoch WHERE {guard} "
        "RETURNING thread_id) "
        "INSERT INTO onward_events (thread_id, at, kind, detail) "
        f"SELECT won.thread_id, ?, e.kind, e.detail FROM won, (VALUES {values}) "
        "AS e(n, kind, detail) ORDER BY e.n RETURNING 1",
        (
            thread_id,
            owner,
            at,
            at,
            expires.isoformat(),
            epoch,
            *guard_params,
            at,
            *[x for n, (kind, detail) in enumerate(events) for x in (n, str(kind), detail)],
        ),
    ).fetchall()
    return bool(rows)


def _lease(r: tuple[str, str, str, str, str, int]) -> LeaseRow:
    at, beat, expires = (datetime.fromisoformat(x) for x in r[2:5])
    return LeaseRow(r[0], r[1], at, beat, expires, int(r[5]))


def _event(conn: Db, thread_id: str, at: datetime, kind: EventKind, detail: str) -> None:
    conn.execute(
        "INSERT INTO onward_events (thread_id, at, kind, detail) VALUES (?, ?, ?, ?)",
        (thread_id, at.isoformat(), kind, detail),
    )
