"""Connections of a store: one per component on SQLite, one bounded pool per process on Postgres.

**SQLite.** Nodes run on several threads and log, claim effects or consult breakers after
every step; a connection per call cost more than the statement. So each store component
keeps one connection (:class:`SharedConnection`), and calls take turns on its lock.

**Postgres.** Every store a process opens on one URL (a worker's slots, a server's drives)
shares one :class:`psycopg_pool.ConnectionPool` of at most ``ONWARD_PG_POOL_SIZE``
connections (default 10), whatever the concurrency: a statement borrows a connection for
itself, a transaction or a session lock for its length (:class:`PooledDb`), and the
LangGraph saver borrows one per commit or read. A pool whose connections are all busy
makes the borrower wait, never fail.

**Outages.** A server that cannot be reached now — stopped, restarting, answering "too many
clients", or this connection killed (``pg_terminate_backend``) — is waited out:
:meth:`PgPool.retry` backs off with jitter and tries again, on a new connection, for up to
``ONWARD_PG_OUTAGE`` (5 min) since the outage began, then raises
:class:`~onward.errors.DatabaseGone` (as does every later call while it lasts). Before
its first contact a process fails at once (``onward list`` on a server that is down says
so, exit 2), unless it opened the store
:func:`patiently` (``onward worker``: it waits for a server that is not up yet, as for an
outage). The process logs one line (logger
``onward.store``) when an outage begins and one when the server answers again, however many
threads wait. A statement outside a transaction is retried whole (onward's statements are
upserts, conditional updates and inserts that ignore a duplicate key); a transaction is
retried until its ``BEGIN`` went through, after which a lost connection fails it with
:class:`~onward.errors.DatabaseUnavailable` (its caller drives the run again).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeVar

from onward.errors import DatabaseGone, DatabaseUnavailable, StoreError
from onward.settings import settings
from onward.store.sql import (
    Backend,
    Db,
    Rows,
    first_line,
    redact,
    store_error,
    translate_errors,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import psycopg
    from psycopg_pool import ConnectionPool

T = TypeVar("T")

log = logging.getLogger("onward.store")
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())
"""psycopg_pool warns of every failed connection attempt; onward says one line per outage
(an application's own logging configuration still receives the pool's records)."""

BORROW_WAIT = 5.0
"""Seconds a borrower waits for a pooled connection before asking whether the server is
there (a busy pool then goes on waiting, silently; an unreachable server is an outage)."""
DOWN_BORROW_WAIT = 1.0
"""Seconds a borrower waits for a pooled connection while an outage is known."""
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 2.0
"""Seconds between retries: doubling from the first to the largest, each with ±50% jitter."""
QUIET = 5.0
"""An outage that begins this soon after the last one ended is the same outage (one line)."""


class SharedConnection:
    """One connection of a SQLite store component, shared by the threads that use it (they
    take turns on its lock); on Postgres, the store's :class:`PooledDb`, which borrows a
    connection per statement and so needs no lock."""

    def __init__(self, connect: Callable[[], Db]) -> None:
        self._connect = connect
        self._conn: Db | None = None
        self._pooled: PooledDb | None = None
        self._lock = threading.Lock()

    @contextmanager
    def use(self) -> Iterator[Db]:
        pooled = self._pooled or self._first()
        if pooled is not None:
            yield pooled
            return
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
            try:
                yield self._conn
            except StoreError:
                if self._conn.postgres and self._conn.raw.closed:
                    self._conn = None
                raise

    def _first(self) -> PooledDb | None:
        """Connect on first use; the store's pooled Db when ``connect`` gives one."""
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
                if isinstance(self._conn, PooledDb):
                    self._pooled = self._conn
            return self._pooled

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._pooled = None


class PgPool:
    """The process's pool of connections to one Postgres database, and its outages."""

    def __init__(self, url: str, connect_timeout: float) -> None:
        from psycopg_pool import ConnectionPool

        s = settings()
        self.url, self.where = url, redact(url)
        self.size = s.pg_pool_size
        self.outage_limit = s.pg_outage.total_seconds()
        self.users = 0
        self.pool: ConnectionPool[Any] = ConnectionPool(
            url,
            min_size=0,
            max_size=self.size,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(connect_timeout))},
            timeout=BORROW_WAIT,
            # A growth attempt that keeps failing gives up soon; the next borrow starts a new
            # one (its backoff starts over), so the pool reconnects within about a second of
            # the server's return, not after psycopg_pool's doubling delays.
            reconnect_timeout=BORROW_WAIT,
            name=f"onward {self.where}",
            open=True,
        )
        self._state = threading.Lock()
        self._down_since: float | None = None
        self._reported = False
        self._back_at = 0.0
        self._probe_lock = threading.Lock()
        self._probed: tuple[float, str | None] = (0.0, None)

    # -- borrowing --------------------------------------------------------

    def _borrow_wait(self) -> float:
        """How long a borrower waits for a connection: shortly while the server is known
        to be away (the retries' backoff does the waiting), else :data:`BORROW_WAIT`."""
        return DOWN_BORROW_WAIT if self._down_since is not None else BORROW_WAIT

    def borrowed(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``work`` on a connection of the pool (once: see :meth:`retry`)."""
        with self.pool.connection(timeout=self._borrow_wait()) as conn:
            return work(conn)

    def checkout(self, begin: bool) -> psycopg.Connection[Any]:
        """A connection for a block of statements (:meth:`checkin` it after), known to
        work: it has begun a transaction, or answered an empty statement."""
        conn: psycopg.Connection[Any] = self.pool.getconn(timeout=self._borrow_wait())
        try:
            conn.execute("BEGIN" if begin else "SELECT 1")
        except BaseException:
            self.pool.putconn(conn)
            raise
        return conn

    def checkin(self, conn: psycopg.Connection[Any]) -> None:
        self.pool.putconn(conn)

    # -- outages ----------------------------------------------------------

    def reach(self, *, patient: bool) -> None:
        """Connect once before the pool is used, so a server that is not there is told at
        once, with its reason (the pool would only time out); ``patient``: wait for it as
        for an outage."""
        first, delay = time.monotonic(), BACKOFF_FIRST
        while (reason := self._probe(fresh=True)) is not None:
            if not patient:
                raise DatabaseUnavailable(
                    f"cannot reach the Postgres database {self.where} ({reason}); check that "
                    "the server runs and that the URL (host, port, user, database) is right. "
                    "Nothing was written"
                )
            self._lost(reason)
            self._give_up(first, reason, None)
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, BACKOFF_MAX)
        self._answered()

    def retry(self, work: Callable[[], T]) -> T:
        """``work()``, again after a backoff for as long as the server cannot be reached (up
        to ``ONWARD_PG_OUTAGE`` from the first failure). Driver errors come out as the
        StoreErrors they mean; :class:`DatabaseGone` once waiting is over."""
        first: float | None = None
        delay = BACKOFF_FIRST
        while True:
            try:
                result = work()
            except Exception as exc:
                error = store_error(exc, Backend.POSTGRES, self.where)
                if error is None:
                    raise
                if not isinstance(error, DatabaseUnavailable) or isinstance(error, DatabaseGone):
                    raise error from exc
                first = time.monotonic() if first is None else first
                self._failed(exc, first)
                time.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            if self._down_since is not None:
                self._answered()
            return result

    def _failed(self, exc: Exception, first: float) -> None:
        """Note a failure; raise :class:`DatabaseGone` once the outage lasted too long."""
        from psycopg_pool import PoolTimeout

        if not isinstance(exc, PoolTimeout):
            reason: str | None = first_line(exc)
        elif self.pool.get_stats().get("pool_size", 0) >= self.size:
            reason = None  # every connection is open and lent: the pool is only busy
        else:
            reason = self._probe()  # the pool cannot grow: is the server there?
        if reason is not None:
            self._lost(reason)
            with suppress(Exception):
                self.pool.check()  # drop the idle connections the outage broke
        self._give_up(first, reason or first_line(exc), exc)

    def _give_up(self, first: float, reason: str, exc: Exception | None) -> None:
        # Since the outage began, not only this call's first failure: once it lasted past
        # the limit, every later call gives up at once too while the server is away (a
        # drive's clean-up statements do not each wait the limit again).
        began = self._down_since
        if began is None or began >= first or self._probe() is None:
            began = first  # (a server that answers again: this call's own failures)
        waited = time.monotonic() - began
        if waited > self.outage_limit:
            raise DatabaseGone(
                f"the Postgres database {self.where} has been unreachable for {waited:.0f} s "
                f"({reason}); stopped waiting (ONWARD_PG_OUTAGE is {self.outage_limit:g} s). "
                "Check that the server runs and that the URL is right; what was saved "
                "before is intact"
            ) from exc

    def _probe(self, *, fresh: bool = False) -> str | None:
        """Why the server cannot be reached, or None when it answers (the pool is only
        busy). One connection at a time, at most once a second for the whole process
        (``fresh``: now)."""
        import psycopg

        with self._probe_lock:
            at, reason = self._probed
            if not fresh and time.monotonic() - at < 1.0:
                return reason
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                reason = None
            except psycopg.Error as exc:
                reason = first_line(exc)
            self._probed = (time.monotonic(), reason)
            return reason

    def _lost(self, reason: str) -> None:
        with self._state:
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
            say = not self._reported and self._down_since - self._back_at > QUIET
            self._reported = self._reported or say
        if say:
            log.warning(
                "the Postgres database %s cannot be reached (%s): waiting for it, up to %g s "
                "(ONWARD_PG_OUTAGE)",
                self.where,
                reason,
                self.outage_limit,
            )

    def _answered(self) -> None:
        with self._state:
            since, self._down_since = self._down_since, None
            if since is None:
                return
            self._back_at = time.monotonic()
            say, self._reported = self._reported, False
        if say:
            log.warning(
                "the Postgres database %s answers again (after %.1f s)",
                self.where,
                self._back_at - since,
            )

    def close(self) -> None:
        self.pool.close()


_POOLS: dict[str, PgPool] = {}
_POOLS_LOCK = threading.Lock()
_PATIENCE = threading.local()


@contextmanager
def patiently() -> Iterator[None]:
    """Stores this thread opens in the block wait for a server that cannot be reached yet
    (up to ``ONWARD_PG_OUTAGE``) instead of failing at once."""
    _PATIENCE.on = True
    try:
        yield
    finally:
        _PATIENCE.on = False


def patient() -> bool:
    """Whether this thread opens stores :func:`patiently`."""
    return bool(getattr(_PATIENCE, "on", False))


def open_pool(url: str, connect_timeout: float) -> PgPool:
    """The process's pool for ``url`` (made, and the server reached, on first use);
    :func:`close_pool` when done."""
    with _POOLS_LOCK:
        pool = _POOLS.get(url)
        if pool is None:
            pool = PgPool(url, connect_timeout)
            try:
                pool.reach(patient=patient())
            except BaseException:
                pool.close()
                raise
            _POOLS[url] = pool
        pool.users += 1
        return pool


def shared_pool(url: str) -> PgPool | None:
    """The pool this process has open for ``url``, if any (:func:`close_pool` it after)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(url)
        if pool is not None:
            pool.users += 1
        return pool


def close_pool(pool: PgPool) -> None:
    """A store is done with ``pool``: the last one closes it."""
    with _POOLS_LOCK:
        pool.users -= 1
        if pool.users > 0:
            return
        if _POOLS.get(pool.url) is pool:
            del _POOLS[pool.url]
    pool.close()


class PooledDb(Db):
    """A :class:`Db` on the process's pool, safe to share between threads: a statement
    borrows a connection for itself (and is retried through an outage), a transaction or a
    session lock holds one for its length, for the thread that opened it."""

    def __init__(self, pool: PgPool) -> None:
        super().__init__(None, Backend.POSTGRES, pool.where)
        self.pool = pool
        self._local = threading.local()

    @property
    def raw(self) -> Any:
        """The connection this thread holds (in a transaction or a session lock)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            raise StoreError("a pooled connection is held only in a transaction or session lock")
        return conn

    @raw.setter
    def raw(self, value: Any) -> None:
        """Set by :class:`Db`'s constructor (None): a pooled Db holds no connection."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        text, args = self._sql(sql), tuple(params)
        return self._run(lambda conn: _rows(conn.execute(text, args)))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        text, args = self._sql(sql), [tuple(r) for r in rows]

        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.cursor() as cur:
                cur.executemany(text, args)

        self._run(work)

    def script(self, sql: str) -> None:
        self._run(lambda conn: conn.execute(sql))

    def _run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        held = getattr(self._local, "conn", None)
        if held is not None:
            with translate_errors(Backend.POSTGRES, self.where):
                return work(held)
        return self.pool.retry(lambda: self.pool.borrowed(work))

    @contextmanager
    def _hold(self, begin: bool) -> Iterator[psycopg.Connection[Any]]:
        held = getattr(self._local, "conn", None)
        if held is not None:  # a transaction inside a session lock: on its connection
            if begin:
                self._run(lambda conn: conn.execute("BEGIN"))
            yield held
            return
        conn = self.pool.retry(lambda: self.pool.checkout(begin))
        self._local.conn = conn
        try:
            yield conn
        finally:
            self._local.conn = None
            self.pool.checkin(conn)

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[Db]:
        if getattr(self._local, "in_tx", False):  # nested: part of the outer transaction
            yield self
            return
        with self._hold(begin=True) as conn:
            self._local.in_tx = True
            try:
                with translate_errors(Backend.POSTGRES, self.where):
                    if lock is not None:
                        conn.execute(
                            # Per schema, as Db.transaction.
                            "SELECT pg_advisory_xact_lock("
                            "hashtextextended(current_schema() || ':' || %s, 0))",
                            (lock,),
                        )
                    yield self
                    conn.execute("COMMIT")
            except BaseException:
                with suppress(Exception):  # a lost connection: keep the first error
                    conn.execute("ROLLBACK")
                raise
            finally:
                self._local.in_tx = False

    @contextmanager
    def session_lock(self, key: str, timeout: float) -> Iterator[None]:
        with self._hold(begin=False), super().session_lock(key, timeout):
            yield

    def close(self) -> None:
        """Nothing to close: the connections are the pool's (the store closes its pool)."""


def _rows(cur: psycopg.Cursor[Any]) -> Rows:
    return Rows(cur.rowcount, cur.fetchall() if cur.description is not None else [])
