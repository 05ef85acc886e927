"""One small database API over both backends: SQLite (embedded default) and Postgres.

onward's own tables (runs, ledger, leases, events, breakers, queue, artifacts) are
written once, with ``?`` placeholders and statements both engines speak (INSERT …
ON CONFLICT, plain UPDATE/DELETE). :class:`Db` supplies what differs:

- placeholders (``?`` → ``%s`` for psycopg, with literal ``%`` escaped);
- a write transaction that takes a lock: ``BEGIN IMMEDIATE`` on SQLite (the whole
  database), a transaction-scoped advisory lock on Postgres (one key, so runs and
  services do not wait on each other);
- errors: driver errors become :class:`StoreError` subclasses that say what to do.

Connections are in autocommit mode outside :meth:`Db.transaction`, so a read never
holds a snapshot open (a WAL reader pinning old pages, a Postgres idle transaction).
A Postgres store borrows its connections from the process's pool
(:class:`~onward.store.connection.PooledDb`); a server that cannot be reached now — down,
restarting, out of connections, or this connection killed — is a
:class:`DatabaseUnavailable`, which that pool waits out.
"""

from __future__ import annotations

import re
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from enum import StrEnum
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Protocol

from onward.errors import (
    DatabaseUnavailable,
    DiskFullError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    UsageError,
)
from onward.settings import settings
from onward.store import reserve
from onward.store.writelock import writes, writing


class Backend(StrEnum):
    SQLITE = "sqlite"
    POSTGRES = "postgres"


def backend_of(url: str) -> Backend:
    if url.startswith(("postgres://", "postgresql://")):
        needed = ("psycopg", "psycopg_pool", "langgraph.checkpoint.postgres")
        if not all(map(_installed, needed)):
            raise UsageError(
                "Postgres stores need the postgres extra: pip install 'onward[postgres]'"
            )
        return Backend.POSTGRES
    if "://" in url and not url.startswith("sqlite:///"):
        raise UsageError(
            f"unsupported store URL {url!r}; use sqlite:///path/to/onward.db or "
            "postgresql://user@host:port/database"
        )
    return Backend.SQLITE


def _installed(module: str) -> bool:
    """Whether ``module`` is there to import, found without importing it or its parents:
    LangGraph's Postgres saver loads LangChain, which a read of onward's own tables does
    not need (the store imports the saver when it opens the checkpointer)."""
    top, *sub = module.split(".")
    spec = find_spec(top)
    if spec is None or not sub:
        return spec is not None
    return any(
        Path(where, *sub).is_dir() or Path(where, *sub[:-1], f"{sub[-1]}.py").is_file()
        for where in spec.submodule_search_locations or ()
    )


def sqlite_path(url: str) -> Path:
    """``sqlite:///rel/path.db`` (relative to cwd), ``sqlite:////abs/path.db`` or a bare path."""
    return Path(url.removeprefix("sqlite:///"))


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}@{host}"


@contextmanager
def scratch_schema(url: str, prefix: str = "scratch") -> Iterator[str]:
    """A fresh Postgres schema in ``url``'s database, dropped afterwards; yields a URL that
    selects it (search_path), so a store opened on it starts empty. Tests and benches."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{url}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300", "53400"})
"""admin_shutdown (a restart, ``pg_terminate_backend``), crash_shutdown, cannot_connect_now
(starting up), too_many_connections, configuration_limit_exceeded; and class 08 (connection
exceptions). A client-side error has no SQLSTATE: the connection failed or was lost."""


def unavailable(exc: Exception) -> bool:
    """``exc`` (psycopg's, or psycopg_pool's timeout) says the server cannot be reached now."""
    import psycopg

    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _UNAVAILABLE_STATES


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Rows:
    """A statement's result, read whole before its connection went back to the pool."""

    __slots__ = ("_at", "_rows", "rowcount")

    def __init__(self, rowcount: int, rows: list[Any]) -> None:
        self.rowcount, self._rows, self._at = rowcount, rows, 0

    def fetchone(self) -> Any:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchall(self) -> list[Any]:
        rest, self._at = self._rows[self._at :], len(self._rows)
        return rest


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


FULL_HINT = (
    "Free space on that disk (or `onward prune --older-than 30d` old runs), then "
    "`onward resume` the run: what was saved before is intact, and the step whose save "
    "failed runs again"
)


def classify_sqlite(exc: sqlite3.Error, where: str) -> StoreError:
    text = str(exc)
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "is full" in text:
        return DiskFullError(
            f"the database {where} cannot grow: the disk is full, or the database reached "
            f"its size limit ({text}); nothing of this save was written. {FULL_HINT}"
        )
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_IOERR:
        return StoreError(
            f"writing the database {where} failed ({text}): the disk may be full, over a file "
            f"size limit (ulimit -f), or failing; nothing of this save was written. {FULL_HINT}"
        )
    if "locked" in text or "busy" in text:
        return StoreLockedError(
            f"the database {where} is locked by another process ({text}); wait for it to "
            "finish, or stop it, then run the command again. Nothing was written"
        )
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return StoreCorruptError(
            f"{where} is not a usable onward database ({text}). Nothing was written to it. "
            "Point --db / ONWARD_DB at another file, or move this one aside to start fresh"
        )
    return StoreError(f"cannot use the database {where}: {text}")


def classify_postgres(exc: Exception, where: str) -> StoreError:
    import psycopg

    text = first_line(exc)
    if isinstance(exc, psycopg.errors.DiskFull | psycopg.errors.OutOfMemory):
        return DiskFullError(
            f"the Postgres server of {where} is out of space ({text}); nothing of this save "
            f"was written. {FULL_HINT}"
        )
    if isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.DeadlockDetected):
        return StoreLockedError(f"the database {where} is locked ({text}); run the command again")
    if unavailable(exc):
        return DatabaseUnavailable(
            f"cannot reach the Postgres database {where} ({text}); check that the server "
            "runs and that the URL (host, port, user, database) is right. Nothing was written"
        )
    if isinstance(exc, psycopg.OperationalError):
        return StoreError(
            f"cannot reach the Postgres database {where} ({text}); check that the server "
            "runs and that the URL (host, port, user, database) is right. Nothing was written"
        )
    return StoreError(f"cannot use the database {where}: {text}")


@contextmanager
def translate_errors(backend: Backend, where: str) -> Iterator[None]:
    """Driver errors → onward StoreErrors that say what to do."""
    try:
        yield
    except Exception as exc:
        mapped = store_error(exc, backend, where)
        if mapped is None:
            raise
        raise mapped from exc


def store_error(exc: Exception, backend: Backend, where: str) -> Exception | None:
    """The onward StoreError a driver error means; None for an error not the driver's."""
    if isinstance(exc, sqlite3.Error):
        return classify_sqlite(exc, where)
    if backend is Backend.POSTGRES and type(exc).__module__.startswith("psycopg"):
        return classify_postgres(exc, where)
    return None


WAL_CHECKPOINT_PAGES = 1_000
"""``wal_autocheckpoint`` of every onward connection (SQLite's default), less on a volume
with little room (store/reserve.py: a WAL must never fill the disk)."""
WAL_KEPT_BYTES = 4 * 1024 * 1024
"""``journal_size_limit``: what the WAL file is cut back to when it restarts."""


def sqlite_synchronous() -> str:
    """The ``synchronous`` level of every connection to a SQLite store: FULL (each commit
    fsyncs the WAL) with ``ONWARD_FSYNC=1``, else NORMAL (a killed process loses nothing;
    a power cut may lose the last commits). SQLite's own default is FULL: connections
    that did not set it fsynced every commit of the store's threads, leases and events
    while its checkpoints did not."""
    return "FULL" if settings().fsync else "NORMAL"


def wal_checkpoints(conn: sqlite3.Connection) -> None:
    """WAL checkpoints every 1,000 pages (~80 plan steps; fewer on a nearly full volume:
    reserve.checkpoint_pages). A checkpoint costs three fsyncs of its own with FULL, 0.08
    a step; at 10,000 pages the WAL grew to 40 MB and filled a small volume beyond repair
    (issue 37). Durability is unchanged: a commit is durable once in the WAL; a checkpoint
    only copies committed pages into the database file. Set on every connection (the
    threshold is per connection, and any commit past it checkpoints)."""
    pages = reserve.checkpoint_pages(conn, WAL_CHECKPOINT_PAGES)
    conn.execute(f"PRAGMA wal_autocheckpoint={pages}")
    conn.execute(f"PRAGMA journal_size_limit={WAL_KEPT_BYTES}")


Statement = tuple[str, tuple[Any, ...]]
"""A statement (``?`` placeholders) and its parameters."""


_TABLE = re.compile(r"\b(?:INSERT\s+INTO|DELETE\s+FROM|UPDATE)\s+(\w+)", re.IGNORECASE)


@cache
def table_written(sql: str) -> str | None:
    """The table a statement writes (None: one this cannot tell); the store sends a
    handful of distinct statements, so each is parsed once."""
    match = _TABLE.search(sql)
    return match.group(1).lower() if match else None


def one_row_each(statements: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> list[Statement]:
    """(SQL, rows) pairs as one statement per row, in order."""
    return [(sql, tuple(row)) for sql, rows in statements for row in rows]


def _in_one(first: Sequence[Statement], last: Statement) -> Statement:
    """Postgres: ``first`` as data-modifying CTEs of ``last``, one statement (one round
    trip) for what SQLite runs as one transaction. The CTEs see the snapshot the
    statement began with, not each other's writes: for writes of different rows."""
    if not first:
        return last
    ctes = ", ".join(f"also{i} AS ({sql})" for i, (sql, _) in enumerate(first))
    params = tuple(p for _, ps in first for p in ps)
    return f"WITH {ctes} {last[0]}", params + tuple(last[1])


MOST_PARAMS = 16_384
"""Parameters of a batch sent as one statement (Postgres takes 65,535); a larger batch is
sent as a transaction."""


def batch_in_one(
    batch: Sequence[tuple[str, Sequence[Sequence[Any]]]], last: Statement | None = None
) -> Statement | None:
    """Postgres: a batch of (SQL, rows) and then ``last`` as one
    statement, each SQL's rows as one multi-row INSERT among data-modifying CTEs; None when
    it cannot be (see :func:`_rows_in_one`), or two of its statements write one table
    (CTEs run in no set order). Each row of an INSERT is a driver call and a message of
    its own; a commit of a plan step is a dozen rows of four tables."""
    parts: list[Statement] = []
    for sql, rows in batch:
        if rows:
            part = _rows_in_one(sql, rows)
            if part is None:
                return None
            parts.append(part)
    tables = [table_written(sql) for sql, _ in parts]
    if None in tables or len(set(tables)) != len(tables):
        return None
    if sum(len(params) for _, params in parts) > MOST_PARAMS:
        return None
    if last is not None:
        return _in_one(parts, last)
    return _in_one(parts[:-1], parts[-1]) if parts else None


def _rows_in_one(sql: str, rows: Sequence[Sequence[Any]]) -> Statement | None:
    """One statement for ``sql`` run once per row, in order; None if it is not an INSERT
    of one VALUES group, or is an upsert (``DO UPDATE``) two of whose rows have the same
    key (a statement may not update one row twice; in order, the second updates the
    first's). ``DO NOTHING`` keeps the first of two such rows, as the rows in order do,
    and serial ids follow the VALUES list's order."""
    text = sql.strip().rstrip(";").rstrip()
    if text[:4].upper() == "WITH":  # Postgres allows data-modifying CTEs only at the top
        return None
    if len(rows) == 1:
        return text, tuple(rows[0])
    shape = _values_shape(text)
    if shape is None:
        return None
    head, group, tail, keys = shape
    width = group.count("%s")
    if any(len(row) != width for row in rows):
        return None
    if keys is not None and len({tuple(row[k] for k in keys) for row in rows}) < len(rows):
        return None
    return head + ", ".join([group] * len(rows)) + tail, tuple(p for row in rows for p in row)


_VALUES = re.compile(r"^\s*INSERT\s+INTO\s+\w+\s*\(([^)]*)\)\s*VALUES\s*", re.IGNORECASE)
_UPSERT_KEYS = re.compile(r"\bON\s+CONFLICT\s*\(([^)]*)\)\s*DO\s+UPDATE\b", re.IGNORECASE)
_PLACEHOLDERS = re.compile(r"\(\s*%s(?:\s*,\s*%s)*\s*\)")


@cache
def _values_shape(sql: str) -> tuple[str, str, str, tuple[int, ...] | None] | None:
    """(text before the VALUES group, the group, the text after it, the positions of an
    upsert's key columns in a row, None for another INSERT) of an INSERT with one
    VALUES group; None for another statement."""
    found = _VALUES.match(sql)
    if found is None or sql[found.end() : found.end() + 1] != "(":
        return None
    start = end = found.end()
    depth = 0
    for end in range(start, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[end], 0)
        if depth == 0:
            break
    group, tail = sql[start : end + 1], sql[end + 1 :]
    if depth or tail.lstrip().startswith(","):
        return None
    upsert = _UPSERT_KEYS.search(tail)
    if upsert is None:
        return (sql[:start], group, tail, None) if "DO UPDATE" not in tail.upper() else None
    columns = [c.strip().lower() for c in found.group(1).split(",")]
    keys = [c.strip().lower() for c in upsert.group(1).split(",")]
    if not _PLACEHOLDERS.fullmatch(group) or not set(keys) <= set(columns):
        return None  # a key's place in a row is its column's only when all are placeholders
    return sql[:start], group, tail, tuple(columns.index(k) for k in keys)


class Db:
    """A connection of either backend with one API. Not shared between threads by itself;
    see :class:`~onward.store.connection.SharedConnection`."""

    def __init__(self, raw: Any, backend: Backend, where: str) -> None:
        self.raw, self.backend, self.where = raw, backend, where
        self._in_tx = False

    @classmethod
    def open(cls, url: str, *, timeout: float = 10.0) -> Db:
        backend = backend_of(url)
        where = redact(url)
        with translate_errors(backend, where):
            if backend is Backend.SQLITE:
                path = sqlite_path(url).expanduser().absolute()
                conn = sqlite3.connect(
                    str(path), timeout=timeout, check_same_thread=False, isolation_level=None
                )
                conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
                conn.execute(f"PRAGMA synchronous={sqlite_synchronous()}")
                wal_checkpoints(conn)
                return cls(conn, backend, str(path))
            import psycopg

            raw = psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout)))
            return cls(raw, backend, where)

    @property
    def postgres(self) -> bool:
        return self.backend is Backend.POSTGRES

    def _sql(self, sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s") if self.postgres else sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        with translate_errors(self.backend, self.where), self._write_lock(sql):
            cur: Cursor = self.raw.execute(self._sql(sql), tuple(params))
            return cur

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with translate_errors(self.backend, self.where), self._write_lock(None):
            if self.postgres:
                with self.raw.cursor() as cur:
                    cur.executemany(self._sql(sql), [tuple(r) for r in rows])
            else:
                self.raw.executemany(sql, rows)

    def _write_lock(self, sql: str | None) -> AbstractContextManager[None]:
        """A SQLite write (``sql``; None: rows of one) outside a transaction takes the
        process's write lock of the file (onward.store.writelock); in one, the transaction
        holds it. Postgres never looks at the statement."""
        if self.postgres or self._in_tx or (sql is not None and not writes(sql)):
            return nullcontext()
        return writing(self.where)

    def script(self, sql: str) -> None:
        """Several ``;``-separated statements without parameters (schemas)."""
        with translate_errors(self.backend, self.where):
            if self.postgres:
                self.raw.execute(sql)
            else:
                self.raw.executescript(sql)

    def write_all(self, statements: Sequence[Statement]) -> None:
        """Writes that go together, all or nothing: on Postgres one statement where it can
        be (:func:`batch_in_one`: one round trip, where a transaction is BEGIN, each
        statement and COMMIT), on SQLite one transaction. Statements that write the same
        table stay a transaction on Postgres too: a statement's CTEs run in no set order,
        and the rows' serial ids must keep theirs."""
        if len(statements) < 2:
            for sql, params in statements:
                self.execute(sql, params)
            return
        one = batch_in_one([(sql, [params]) for sql, params in statements])
        if self.postgres and one is not None:
            self.execute(*one)
            return
        with self.transaction():
            for sql, params in statements:
                self.execute(sql, params)

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[Db]:
        """All or nothing. ``lock``: serialise with every other transaction taking the same
        lock (SQLite locks the whole database for writing, Postgres only that key)."""
        if self._in_tx:  # nested: part of the outer transaction
            yield self
            return
        with translate_errors(self.backend, self.where):
            if self.postgres:
                with self.raw.transaction():
                    self._in_tx = True
                    try:
                        if lock is not None:
                            self.raw.execute(
                                # Per schema: stores in other schemas of one database
                                # do not wait for each other.
                                "SELECT pg_advisory_xact_lock("
                                "hashtextextended(current_schema() || ':' || %s, 0))",
                                (lock,),
                            )
                        yield self
                    finally:
                        self._in_tx = False
                return
            with writing(self.where):
                self.raw.execute("BEGIN IMMEDIATE" if lock is not None else "BEGIN")
                self._in_tx = True
                try:
                    yield self
                except BaseException:
                    self._in_tx = False
                    self.raw.rollback()
                    raise
                self._in_tx = False
                self.raw.commit()

    @contextmanager
    def session_lock(self, key: str, timeout: float) -> Iterator[None]:
        """Postgres: hold an advisory lock without holding a transaction open. Waiting is
        polling, not a blocked statement: LangGraph's setup creates indexes CONCURRENTLY,
        which waits for every open transaction, a waiter's included."""
        assert self.postgres
        deadline = time.monotonic() + max(timeout, 30.0)
        while not self.execute(
            "SELECT pg_try_advisory_lock(hashtextextended(?, 0))", (key,)
        ).fetchone()[0]:
            if time.monotonic() > deadline:
                raise StoreLockedError(
                    f"another process has been setting up the database {self.where} for over "
                    f"{max(timeout, 30.0):.0f} s; check for a stuck onward process, then retry"
                )
            time.sleep(0.05)
        try:
            yield
        finally:
            self.execute("SELECT pg_advisory_unlock(hashtextextended(?, 0))", (key,))

    def close(self) -> None:
        with suppress(Exception):  # closing a connection the server already dropped
            self.raw.close()


def store_exists(url: str) -> bool:
    """A store is at ``url`` (its meta table is there). Nothing is written or created to
    find out; a file that is not a database is a :class:`StoreCorruptError`."""
    backend = backend_of(url)
    if backend is Backend.SQLITE:
        path = sqlite_path(url).expanduser().absolute()
        if not path.is_file():
            return False
        with translate_errors(backend, str(path)):
            conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
            try:
                found = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'onward_meta'"
                ).fetchone()
            finally:
                conn.close()
        return found is not None
    from onward.store.connection import PooledDb, close_pool, open_pool, patient, shared_pool

    # A worker's slots ask at once: on its pool (which waits for a server not up yet).
    pool = shared_pool(url) or (open_pool(url, 10.0) if patient() else None)
    db = Db.open(url) if pool is None else PooledDb(pool)
    try:
        return db.execute("SELECT to_regclass('onward_meta')").fetchone()[0] is not None
    finally:
        db.close()
        if pool is not None:
            close_pool(pool)


def require_store(url: str) -> None:
    """A :class:`StoreError` unless a store is at ``url``: commands that only read (list,
    status, show…) never create one, nor its directories. Nothing is written to find out."""
    if store_exists(url):
        return
    if backend_of(url) is Backend.SQLITE:
        where = str(sqlite_path(url).expanduser().absolute())
    else:
        where = redact(url)
    raise StoreError(
        f"no store at {where}: nothing was created. Check --db / ONWARD_DB; `onward run` or "
        "`onward submit` creates a store"
    )
