"""The store: one URL → LangGraph checkpointer + onward's own tables + artifact store.

``sqlite:///.onward/onward.db`` (the embedded default) or ``postgresql://…``. Both
backends hold the same tables behind the same interface: runs, the effect ledger,
leases, events, breakers, the work queue and artifact references; Postgres keeps the
artifact bodies in a table too, so workers on other machines read them.

The schema is created (or brought up to date) once under a lock — an exclusive file
lock beside a SQLite file, an advisory lock on Postgres — so processes starting on a
fresh store at once do not race.
"""

from __future__ import annotations

import base64
import fcntl
import functools
import json
import re
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from onward.checkpointing.savers import HeldRows, OnwardSqliteSaver, Statements, postgres_saver
from onward.checkpointing.serde import checkpoint_serde
from onward.effects.ledger import LEDGER_SCHEMA, Ledger
from onward.errors import StoreCorruptError, StoreError
from onward.model.state import RunStatus, utcnow
from onward.observe.events import EventLog, LogRow
from onward.observe.kinds import EventKind
from onward.settings import DEFAULT_DB, settings
from onward.store import blobs, reserve
from onward.store.artifacts import ArtifactStore, fsync_enabled
from onward.store.assistants import ASSISTANT_SCHEMA, Assistants
from onward.store.breakers import BREAKER_SCHEMA, Breakers
from onward.store.connection import PgPool, PooledDb, SharedConnection, close_pool, open_pool
from onward.store.crons import CRON_SCHEMA, Crons
from onward.store.drivers import drive_ended
from onward.store.encryption import KEY_CHECK, Cipher, check_key, open_text, seal_text
from onward.store.leases import (
    LEASE_SCHEMA,
    PG_FENCING,
    Fences,
    LeasePolicy,
    Leases,
    fenced,
)
from onward.store.runs import (
    RUN_COLUMNS_9,
    RUN_COLUMNS_10,
    RUN_COLUMNS_11,
    RUN_EVENTS_SCHEMA,
    THREAD_SCHEMA,
    Threads,
)
from onward.store.sql import (
    Backend,
    Db,
    backend_of,
    redact,
    sqlite_path,
    store_error,
    translate_errors,
    wal_checkpoints,
)
from onward.store.tables import schema_version

DEFAULT_URL = DEFAULT_DB
STORE_SCHEMA_VERSION = 15
"""1: runs. 2: leases and events. 3: the effect ledger. 5: event dedupe keys. 6: the work
queue, artifact references (and bodies on Postgres). 7: API threads and runs (serve).
8: a run's request in its own table (``onward_runs.request`` is left empty: its whole plan
made every status change rewrite megabytes on SQLite); events indexed by kind (a resume
looks up a long run's suspensions without reading its every event). 9: an API run keeps
its ``interrupt_before`` and the checkpoint it started from (a recovered run pauses where
it was asked to). 10: API runs queue behind a busy thread (their request is kept until
they start, with their multitask strategy); assistants and their versions (serve).
11: API runs keep their stream events, ``interrupt_after``, webhook and stream modes, and
a cancel asked of a run another process drives (:func:`_migrate_11_run_lifecycle`).
12: crons of ``onward serve`` (:func:`_migrate_12_crons`).
13: one index of events by kind and dedupe key for two. 14: event indexes in the order
events are written, and no second index on thread_id beside the primary keys of
PostgresSaver's tables (:func:`_migrate_14_indexes`); a new SQLite store's event ids
without AUTOINCREMENT (no ``sqlite_sequence`` row rewritten by every commit).
15: leases carry a fencing epoch; Postgres gets its counter and ``onward_fence``
(:func:`_migrate_15_fencing`).
Tables are created with IF NOT EXISTS, so opening an older store brings it up to date
under the schema lock."""

_SQLITE_SAVER_TABLES = """
CREATE TABLE IF NOT EXISTS writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT,
    value BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
) WITHOUT ROWID;
"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS onward_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS onward_runs (
    thread_id   TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    status      TEXT NOT NULL,
    objective   TEXT NOT NULL,
    request     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS onward_runs_created ON onward_runs (created_at);
CREATE TABLE IF NOT EXISTS onward_requests (
    thread_id   TEXT PRIMARY KEY,
    request     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS onward_queue (
    thread_id   TEXT PRIMARY KEY,
    ready_at    DOUBLE PRECISION,
    claimed_by  TEXT,
    claimed_at  DOUBLE PRECISION,
    enqueued_at DOUBLE PRECISION NOT NULL,
    for_person  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS onward_queue_ready ON onward_queue (ready_at);
CREATE TABLE IF NOT EXISTS onward_artifact_refs (
    thread_id TEXT NOT NULL,
    sha256    TEXT NOT NULL,
    PRIMARY KEY (thread_id, sha256)
);
"""

_POSTGRES_ONLY = """
CREATE TABLE IF NOT EXISTS onward_artifacts (sha256 TEXT PRIMARY KEY, body BYTEA NOT NULL);
"""

_DEFLATED = "z:"
"""Prefix of a request row deflated by :meth:`Store._seal_request` (then base85)."""
_DEFLATE_REQUEST_CHARS = 1024
"""Shorter requests stay plain JSON (deflating them saves less than a page's slack)."""

_THREAD_TABLES = (
    "onward_events",
    "onward_effects",
    "onward_leases",
    "onward_queue",
    "onward_artifact_refs",
    "onward_api_runs",
    "onward_api_run_events",
    "onward_threads",
    "onward_requests",
    "onward_runs",
)
"""Every onward table with a row per run (deleted by :meth:`Store.delete_run`)."""
_API_TABLES = ("onward_api_runs", "onward_api_run_events", "onward_threads")
"""The API's records of a thread (kept when a rolled-back first run empties it)."""


_KEYED_TABLES = (
    "onward_meta",
    "onward_runs",
    "onward_requests",
    "onward_queue",
    "onward_artifact_refs",
    "onward_leases",
    "onward_breakers",
)
_KEYED_SERVE_TABLES = ("onward_threads", "onward_assistants")
"""SQLite tables created ``WITHOUT ROWID``: the primary key is the table, not a second
b-tree beside it (a page per table even when empty, and each key stored twice). Only
tables of small rows or few: such a table spills a row of more than about 1 KB to an
overflow page (a rowid table keeps up to 4 KB in place), so the effect ledger (a row per
effect, with its result), API runs and their stream events keep their rowid; a request
(one row per run, deflated) or a cron (a few: :func:`_migrate_12_crons`) may spill.
Stores created before keep their tables as they are (same columns and queries; only the
layout differs)."""


def _without_rowid(script: str, tables: Sequence[str] = _KEYED_TABLES) -> str:
    """``script`` with ``tables`` created ``WITHOUT ROWID`` (SQLite only)."""
    for table in tables:
        script, found = re.subn(
            rf"(CREATE TABLE IF NOT EXISTS {table} \(.*?\));",
            r"\1 WITHOUT ROWID;",
            script,
            flags=re.DOTALL,
        )
        if found != 1:
            raise AssertionError(f"the store schema creates {table} {found} times, not once")
    return script


def _tables(db: Db) -> Collection[str]:
    """The tables of a store that may lack some of :data:`_THREAD_TABLES` (a SQLite store
    makes the serve ones on first use; a Postgres store has them all)."""
    if db.postgres:
        return _THREAD_TABLES
    rows = db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'").fetchall()
    return {r[0] for r in rows}


def _serve_schema(db: Db) -> None:
    """The tables of ``onward serve`` (threads, API runs and their stream events, assistants,
    crons), as this onward creates them. On SQLite a new store makes them when one is first
    used (:meth:`Store._serve_connect`): a store that never served keeps none of their empty
    pages (0.36 KB per step of a 100-step run). IF NOT EXISTS throughout, so it is also a
    no-op on a store that has them (a later schema change to these tables must therefore
    also alter them in :func:`_serve_schema`'s script, for stores that make them late)."""
    script = THREAD_SCHEMA + ASSISTANT_SCHEMA + RUN_EVENTS_SCHEMA
    db.script(script if db.postgres else _without_rowid(script, _KEYED_SERVE_TABLES))
    db.execute(
        "CREATE INDEX IF NOT EXISTS onward_api_run_events_thread "
        "ON onward_api_run_events (thread_id)"
    )
    _migrate_12_crons(db)


def _migrate_11_run_lifecycle(db: Db, sqlite_conn: sqlite3.Connection | None) -> None:
    """Schema 11: API runs keep their stream events (``Last-Event-ID`` across restarts),
    what a recovered run honours (``interrupt_after``, ``webhook``, stream modes) and a
    cancel asked of another process's drive. Idempotent (safe on any older store)."""
    if sqlite_conn is not None:
        sqlite_conn.executescript(RUN_EVENTS_SCHEMA)
        columns = {r[1] for r in sqlite_conn.execute("PRAGMA table_info(onward_api_runs)")}
        for name, kind in RUN_COLUMNS_11:
            if name not in columns:
                sqlite_conn.execute(f"ALTER TABLE onward_api_runs ADD COLUMN {name} {kind}")
    else:
        db.script(RUN_EVENTS_SCHEMA)
        for name, kind in RUN_COLUMNS_11:
            db.execute(f"ALTER TABLE onward_api_runs ADD COLUMN IF NOT EXISTS {name} {kind}")
    db.execute(
        "CREATE INDEX IF NOT EXISTS onward_api_run_events_thread "
        "ON onward_api_run_events (thread_id)"
    )


def default_url() -> str:
    return settings().db


@dataclass(frozen=True, slots=True)
class RunRow:
    thread_id: str
    created_at: datetime
    updated_at: datetime
    status: RunStatus
    objective: str


@dataclass(frozen=True, slots=True)
class QueueRow:
    thread_id: str
    ready_at: float | None
    """Epoch seconds when a worker may claim it; None = parked (waits for a human)."""
    claimed_by: str | None


_SAVER_CALLS = ("put", "put_writes", "flush", "get_tuple", "delete_thread")
"""The saver methods a drive calls, each a commit or a read of the database."""
_SAVER_RETRIED = frozenset({"get_tuple", "delete_thread"})
"""Those that may run again whole after a lost connection (a read; a delete)."""


def retry_call(
    retry: Callable[[Callable[[], Any]], Any], method: Callable[..., Any], *args: Any, **kw: Any
) -> Any:
    return retry(lambda: method(*args, **kw))


def _map_saver_errors(
    saver: BaseCheckpointSaver[Any],
    backend: Backend,
    where: str,
    retry: Callable[[Callable[[], Any]], Any] | None = None,
) -> None:
    """Driver errors of the checkpoint saver's commits and reads → StoreErrors, as for every
    other statement of the store (:func:`~onward.store.sql.translate_errors`): a full disk
    while a step's writes commit says what to do instead of a traceback. Wrapped on the
    instance, at the store's boundary, so the savers stay LangGraph's (``checkpointing``).
    ``retry`` (Postgres: the pool's) waits out an outage in the calls that only read or
    repeat what they did (:data:`_SAVER_RETRIED`; the commits retry inside the saver)."""

    def mapped(method: Callable[..., Any]) -> Callable[..., Any]:
        # translate_errors without its context manager: a plan step makes four of these
        # calls, and entering the generator cost more than the mapping (same errors).
        if retry is not None and method.__name__ in _SAVER_RETRIED:
            method = functools.partial(retry_call, retry, method)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except Exception as exc:
                error = store_error(exc, backend, where)
                if error is None:
                    raise
                raise error from exc

        return call

    def mapped_iter(method: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with translate_errors(backend, where):
                yield from method(*args, **kwargs)

        return call

    def with_allowlist(extra: Any) -> BaseCheckpointSaver[Any]:
        # A compiled graph clones its saver with the state's types on the serializer's
        # allowlist (a shallow copy): the clone gets the mapping of its own methods, not
        # this instance's, whose serializer would read a user's types back as dicts.
        clone = type(saver).with_allowlist(saver, extra)
        if clone is not saver:
            for name in (*_SAVER_CALLS, "list", "with_allowlist"):
                vars(clone).pop(name, None)
            _map_saver_errors(clone, backend, where, retry)
        return clone

    for name in _SAVER_CALLS:
        setattr(saver, name, mapped(getattr(saver, name)))
    saver.list = mapped_iter(saver.list)  # type: ignore[method-assign]
    saver.with_allowlist = with_allowlist  # type: ignore[method-assign,assignment]


class TableArtifacts(ArtifactStore):
    """Artifact bodies in the ``onward_artifacts`` table (Postgres: every worker, on any
    machine, reads what another wrote)."""

    def __init__(self, db: SharedConnection, **kw: Any) -> None:
        super().__init__(Path("."), **kw)
        self._db = db

    def location(self, sha256: str) -> str:
        return f"table onward_artifacts, sha256 {sha256[:12]}…"

    def read_body(self, sha256: str) -> bytes | None:
        with self._db.use() as db:
            row = db.execute("SELECT body FROM onward_artifacts WHERE sha256 = ?", (sha256,))
            found = row.fetchone()
        return bytes(found[0]) if found else None

    def write_body(self, sha256: str, body: bytes) -> None:
        with self._db.use() as db:
            db.execute(
                "INSERT INTO onward_artifacts VALUES (?, ?) "
                "ON CONFLICT (sha256) DO UPDATE SET body = excluded.body",
                (sha256, body),
            )

    def delete_body(self, sha256: str) -> int:
        with self._db.use() as db:
            row = db.execute(
                "DELETE FROM onward_artifacts WHERE sha256 = ? RETURNING length(body)", (sha256,)
            ).fetchone()
        return int(row[0]) if row else 0


def _migrate_12_crons(db: Db) -> None:
    """Store schema 12: the crons table of ``onward serve`` (:mod:`onward.store.crons`).
    IF NOT EXISTS, so it is also what opening any older store runs."""
    db.script(CRON_SCHEMA if db.postgres else _without_rowid(CRON_SCHEMA, ("onward_crons",)))


_SAVER_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
"""PostgresSaver's tables; each has a primary key that begins with thread_id."""
_THREAD_ID_INDEXES = tuple(f"{table}_thread_id_idx" for table in _SAVER_TABLES)
"""The second index on thread_id PostgresSaver's migrations add to each (store schema 14
neither makes nor keeps them: each cost a WAL record per row and served no lookup the
primary key does not)."""


def _setup_postgres_saver(conn: Any) -> None:
    """``PostgresSaver.setup()`` (the same loop over its ``MIGRATIONS``, each recorded in
    ``checkpoint_migrations`` as it records them, so its own ``setup()`` later finds them
    done and runs only newer ones), except the migrations that add a second index on
    thread_id: onward drops them (store schema 14), and each was a ``CREATE INDEX
    CONCURRENTLY``, which waits for every transaction open in the database when it starts
    (a new store waited on other clients' work)."""
    from langgraph.checkpoint.postgres import PostgresSaver

    migrations = PostgresSaver.MIGRATIONS
    conn.execute(migrations[0])
    row = conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v DESC LIMIT 1").fetchone()
    for version in range(-1 if row is None else row["v"], len(migrations) - 1):
        migration = migrations[version + 1]
        if not any(name in migration for name in _THREAD_ID_INDEXES):
            conn.execute(migration)
        conn.execute("INSERT INTO checkpoint_migrations (v) VALUES (%s)", (version + 1,))


def _migrate_14_indexes(db: Db) -> None:
    """Store schema 14: fewer index pages and records written per step.

    The event indexes follow the order events are written in.
    Keyed events (a step attempt's four, ``step_started:s3:1`` … ``step_done:s3:1``) are
    kept single by a unique index on (thread, the key without its kind, kind): a step's
    events sit side by side, so a commit that logs them dirties one leaf page of it, where
    the (thread, kind, key) index of schema 13 put each kind in a region of its own (about
    six of a step's 16.6 WAL pages on SQLite). The key names its kind (``kind:…``,
    :data:`onward.observe.kinds.ONCE_FIELDS`) and kinds hold no ``:``, so the pair is
    unique exactly when the key is. Kind lookups (a run's suspensions, cancel requests,
    all of kinds without a key) read a second index over the rows without a key only.
    Idempotent; the new indexes are built before the old ones (schema 12, 13) go."""
    if db.postgres:
        after_kind = "(substr(dedupe, strpos(dedupe, ':') + 1))"
    else:
        after_kind = "substr(dedupe, instr(dedupe, ':') + 1)"
    db.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS onward_events_attempt "
        f"ON onward_events (thread_id, {after_kind}, kind) WHERE dedupe IS NOT NULL"
    )
    db.execute(
        "CREATE INDEX IF NOT EXISTS onward_events_unkeyed_kind "
        "ON onward_events (thread_id, kind, id) WHERE dedupe IS NULL"
    )
    for old in ("onward_events_kind_once", "onward_events_kind", "onward_events_once"):
        db.execute(f"DROP INDEX IF EXISTS {old}")
    if db.postgres:  # an older store's (a new one never made them: _setup_postgres_saver)
        for name in _THREAD_ID_INDEXES:
            db.execute(f"DROP INDEX IF EXISTS {name}")


def _migrate_15_fencing(db: Db, sqlite_conn: sqlite3.Connection | None) -> None:
    """Schema 15: a lease's fencing epoch (store/leases.py). An older store's leases get
    epoch 0 (their drivers, of an older onward, do not fence); on Postgres the epoch counter
    and the commit's check (``onward_fence``). Idempotent."""
    if sqlite_conn is not None:
        columns = {r[1] for r in sqlite_conn.execute("PRAGMA table_info(onward_leases)")}
        if "epoch" not in columns:
            sqlite_conn.execute(
                "ALTER TABLE onward_leases ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0"
            )
        return
    db.execute("ALTER TABLE onward_leases ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0")
    db.script(PG_FENCING)


class Store:
    """An open store. Use as a context manager, or call :meth:`close`."""

    saver: BaseCheckpointSaver[Any]

    def __init__(self, url: str | None = None, *, busy_timeout: float | None = None) -> None:
        self.url = url or default_url()
        self.backend = backend_of(self.url)
        self.cipher = Cipher.from_env()
        self._timeout = (
            busy_timeout if busy_timeout is not None else settings().busy_timeout.total_seconds()
        )
        self.where = redact(self.url)
        self.held = HeldRows()
        """Event rows of finished tasks, saved with their writes (see ``savers``)."""
        self.fences = Fences()
        """The leases this process's drives hold: the saver and ledger fence by them."""
        if self.backend is Backend.SQLITE:
            self._open_sqlite()
        else:
            self._open_postgres()
        self.db = SharedConnection(self.connect)
        try:
            self._check_key()
        except BaseException:
            self._close_saver()
            raise
        if self.backend is Backend.SQLITE:
            self.artifacts: ArtifactStore = ArtifactStore(
                self.path.parent / "artifacts", cipher=self.cipher, on_put=self.use_artifact
            )
        else:
            self.artifacts = TableArtifacts(
                SharedConnection(self.connect), cipher=self.cipher, on_put=self.use_artifact
            )
        self.request_blobs = (
            blobs.RequestBlobs(self.path.parent / "requests", self.cipher)
            if self.backend is Backend.SQLITE
            else None
        )
        self.leases = Leases(self.connect, LeasePolicy.from_env(), fences=self.fences)
        self._claims: dict[str, tuple[str, float]] = {}
        """Queue claims this store's worker holds: thread id → (claimer, hold seconds)."""
        self.leases.on_renew = self._renew_claim
        self.ledger = Ledger(self.connect, self.cipher, self.fences)
        self.events = EventLog(self.connect, self.cipher, self.fences)
        self.breakers = Breakers(self.connect, self.events, utcnow)
        self._serve_ready = self.backend is Backend.POSTGRES  # made with the rest there
        self._serve_lock = threading.Lock()
        self.threads = Threads(self._serve_connect)
        self.assistants = Assistants(self._serve_connect)
        self.crons = Crons(self._serve_connect, self.cipher)

    # -- opening ----------------------------------------------------------

    def _open_sqlite(self) -> None:
        self.path = sqlite_path(self.url).expanduser().absolute()
        if self.path.exists() and self.path.is_dir():
            raise StoreError(f"{self.path} is a directory; --db must name a database file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.where = str(self.path)
        with translate_errors(Backend.SQLITE, self.where):
            # Default (deferred) transactions, not autocommit: SqliteSaver writes a task's
            # writes with one executemany and commits once; in autocommit each row would
            # commit alone, and a SIGKILL mid-way leaves half a task's writes (seen: the
            # routing write lost, the run resumed into nothing).
            conn = sqlite3.connect(str(self.path), timeout=self._timeout, check_same_thread=False)
            try:
                # Read first: on a file that is not SQLite this fails before anything is written.
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
                lock_path = self.path.with_name(self.path.name + ".lock")
                with open(lock_path, "a+") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    try:
                        self._migrate(Db(conn, Backend.SQLITE, self.where), conn)
                    finally:
                        fcntl.flock(lock, fcntl.LOCK_UN)
                sync = "FULL" if fsync_enabled() else "NORMAL"
                conn.execute(f"PRAGMA synchronous={sync}")
                wal_checkpoints(conn)
            except BaseException:
                conn.close()
                raise
        reserve.keep(self.path)  # room to release a lease on a full disk
        self.conn = conn
        self.saver = OnwardSqliteSaver(
            conn,
            serde=checkpoint_serde(self.cipher),
            held=self.held,
            to_sql=self._event_statements,
            fences=self.fences,
        )
        self.saver.is_setup = True  # created under the lock above
        _map_saver_errors(self.saver, Backend.SQLITE, self.where)

    def _open_postgres(self) -> None:
        """On the process's pool (store/connection.py), as every connection of the store:
        a server that is down is waited for, up to ONWARD_PG_OUTAGE. The schema lock is
        taken only when the schema is not this onward's yet (a worker's slots open a
        store each, at once)."""
        self.pg_pool: PgPool = open_pool(self.url, self._timeout)
        try:
            setup = PooledDb(self.pg_pool)
            if schema_version(setup) != STORE_SCHEMA_VERSION:
                with setup.session_lock("onward schema", self._timeout):
                    self._migrate(setup, None)
        except BaseException:
            close_pool(self.pg_pool)
            raise
        self.saver = postgres_saver(
            self.pg_pool,
            serde=checkpoint_serde(self.cipher),
            held=self.held,
            to_sql=self._event_statements,
            fences=self.fences,
        )
        _map_saver_errors(self.saver, Backend.POSTGRES, self.where, retry=self.pg_pool.retry)

    def _event_statements(
        self, thread_id: str, rows: Sequence[LogRow], refs: Sequence[tuple[str, str]]
    ) -> Statements:
        return self.events.statements(thread_id, rows, refs)

    def drop_held(self, thread_id: str) -> None:
        """After a drive: forget event rows of tasks whose writes were never saved (their
        events are logged when they run again, as ``savers`` promises)."""
        self.held.drop_thread(thread_id)

    def _migrate(self, db: Db, sqlite_conn: sqlite3.Connection | None) -> None:
        found = schema_version(db)
        if found > STORE_SCHEMA_VERSION:
            raise StoreError(
                f"{self.where} was written by a newer onward (store schema {found}, this onward "
                f"knows {STORE_SCHEMA_VERSION}); upgrade onward to use it"
            )
        if found == STORE_SCHEMA_VERSION:
            return
        if sqlite_conn is not None:
            sqlite_conn.execute("PRAGMA journal_mode=WAL")
            sqlite_conn.executescript(_SQLITE_SAVER_TABLES)
            SqliteSaver(sqlite_conn).setup()
            # Event ids are the rowid: max + 1, so they grow in every thread as with
            # AUTOINCREMENT (only a deleted run's ids may come again, in another thread),
            # without the sqlite_sequence row AUTOINCREMENT rewrites in every commit.
            # An older store keeps its table as it was made.
            serial = "INTEGER PRIMARY KEY"
        else:
            from psycopg.rows import dict_row

            # On the connection that holds the schema lock (PooledDb.session_lock).
            with db.raw.cursor(row_factory=dict_row) as setup_cursor:
                _setup_postgres_saver(setup_cursor)
            serial = "BIGSERIAL PRIMARY KEY"
        # A new SQLite store makes the tables of `onward serve` when one is first used
        # (_serve_schema); an older store has them, and they are brought up to date here.
        serve = db.postgres or found > 0
        script = _SCHEMA + LEASE_SCHEMA.replace("INTEGER PRIMARY KEY AUTOINCREMENT", serial)
        script += LEDGER_SCHEMA + BREAKER_SCHEMA
        script += THREAD_SCHEMA + ASSISTANT_SCHEMA if serve else ""
        script += _POSTGRES_ONLY if db.postgres else ""
        if sqlite_conn is not None:
            keyed = _KEYED_TABLES + (_KEYED_SERVE_TABLES if serve else ())
            sqlite_conn.executescript(_without_rowid(script, keyed))
            columns = {r[1] for r in sqlite_conn.execute("PRAGMA table_info(onward_events)")}
            if "dedupe" not in columns:  # a version-2..4 store
                sqlite_conn.execute("ALTER TABLE onward_events ADD COLUMN dedupe TEXT")
            columns = {r[1] for r in sqlite_conn.execute("PRAGMA table_info(onward_api_runs)")}
            for name, kind in (*RUN_COLUMNS_9, *RUN_COLUMNS_10):
                if serve and name not in columns:  # a version-7..9 store
                    sqlite_conn.execute(f"ALTER TABLE onward_api_runs ADD COLUMN {name} {kind}")
        else:
            db.script(script)
            for name, kind in (*RUN_COLUMNS_9, *RUN_COLUMNS_10):
                db.execute(f"ALTER TABLE onward_api_runs ADD COLUMN IF NOT EXISTS {name} {kind}")
        if serve:
            _migrate_11_run_lifecycle(db, sqlite_conn)
            _migrate_12_crons(db)
        _migrate_14_indexes(db)
        _migrate_15_fencing(db, sqlite_conn)
        if 0 < found < 8:  # requests move out of onward_runs
            db.execute(
                "INSERT INTO onward_requests SELECT thread_id, request FROM onward_runs "
                "WHERE request <> '' ON CONFLICT DO NOTHING"
            )
            db.execute("UPDATE onward_runs SET request = '' WHERE request <> ''")
        db.execute(
            "INSERT INTO onward_meta VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(STORE_SCHEMA_VERSION),),
        )
        if sqlite_conn is not None:
            sqlite_conn.commit()

    def _check_key(self) -> None:
        """A store remembers that it is encrypted (a value sealed with its key), so a
        missing or wrong key is an error at open, not garbage later."""
        with self.db.use() as db:
            row = db.execute("SELECT value FROM onward_meta WHERE key = 'key_check'").fetchone()
            if row is None and self.cipher is not None:
                db.execute(
                    "INSERT INTO onward_meta VALUES ('key_check', ?) ON CONFLICT (key) DO NOTHING",
                    (self.cipher.seal_text(KEY_CHECK),),
                )
        check_key(self.cipher, row[0] if row else None, self.where)

    def connect(self) -> Db:
        """A new connection to the same database (for work on other threads); on Postgres
        a :class:`PooledDb` on the process's pool (it borrows a connection per use)."""
        if self.backend is Backend.POSTGRES:
            return PooledDb(self.pg_pool)
        return Db.open(str(self.path), timeout=self._timeout)

    def serving(self) -> bool:
        """Whether this store has the tables of ``onward serve`` (a SQLite store makes them
        on first use): when not, no thread of it is an API thread. A read, never a write."""
        if not self._serve_ready:
            with self.db.use() as db:
                self._serve_ready = "onward_threads" in _tables(db)
        return self._serve_ready

    def _serve_connect(self) -> Db:
        """:meth:`connect` for the tables of ``onward serve``: the first one makes them on
        a SQLite store that has none yet (:func:`_serve_schema`)."""
        db = self.connect()
        if not self._serve_ready:
            with self._serve_lock:
                if not self._serve_ready:
                    _serve_schema(db)
                    self._serve_ready = True
        return db

    def _close_saver(self) -> None:
        if self.backend is Backend.SQLITE:
            self.conn.close()
        else:
            close_pool(self.pg_pool)

    def close(self) -> None:
        self.threads.close()
        self.assistants.close()
        self.crons.close()
        self.breakers.close()
        self.events.close()
        self.ledger.close()
        self.db.close()
        if isinstance(self.artifacts, TableArtifacts):
            self.artifacts._db.close()
        self._close_saver()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -------------------------------------------------------------

    def add_run(self, thread_id: str, objective: str, request: dict[str, Any]) -> None:
        now = utcnow().isoformat()
        row = request
        if self.request_blobs is not None:
            # Long strings (a big argument) as files, written before the row that names
            # them: a crash in between leaves only unused files (store/blobs.py).
            files = self.request_blobs
            lifted, found = blobs.lift(request, lambda text: files.put(thread_id, text))
            row = {**lifted, blobs.BLOBS: found} if found else request
        with self.db.use() as db, db.transaction():
            db.execute(
                "INSERT INTO onward_runs VALUES (?, ?, ?, ?, ?, '')",
                (thread_id, now, now, RunStatus.PLANNING.value, seal_text(self.cipher, objective)),
            )
            db.execute(
                "INSERT INTO onward_requests VALUES (?, ?)",
                (thread_id, self._seal_request(row)),
            )

    def _seal_request(self, request: dict[str, Any]) -> str:
        """A request's row: JSON, deflated on SQLite when it is long (a plan's steps repeat
        their keys; Postgres compresses long values itself), sealed when the store is."""
        text = json.dumps(request, ensure_ascii=False)
        if self.backend is Backend.SQLITE and len(text) >= _DEFLATE_REQUEST_CHARS:
            text = _DEFLATED + base64.b85encode(zlib.compress(text.encode(), 6)).decode()
        return seal_text(self.cipher, text)

    def _open_request(self, stored: str) -> dict[str, Any]:
        text = open_text(self.cipher, stored)
        if text.startswith(_DEFLATED):  # JSON objects start with "{": no request is mistaken
            try:
                text = zlib.decompress(base64.b85decode(text[len(_DEFLATED) :])).decode()
            except (ValueError, zlib.error) as exc:
                raise StoreCorruptError(
                    f"a run's stored request cannot be read in {self.where}: its compressed "
                    f"bytes are damaged ({exc}); restore the store from a backup"
                ) from exc
        value: dict[str, Any] = json.loads(text)
        return value

    def run_request(self, thread_id: str) -> dict[str, Any]:
        """The request a run was started with (its input state, holding the whole plan)."""
        with self.db.use() as db:
            row = db.execute(
                "SELECT request FROM onward_requests WHERE thread_id=?", (thread_id,)
            ).fetchone()
        if row is None:
            raise StoreError(f"run {thread_id} has no stored request in {self.where}")
        value = self._open_request(row[0])
        if blobs.SETTLED in value:
            raise StoreError(
                f"run {thread_id}'s request was settled after its first checkpoint, but the "
                f"run has no checkpoint with its state in {self.where}: the store is damaged"
            )
        found = value.pop(blobs.BLOBS, None)
        if found:
            if self.request_blobs is None:
                raise StoreError(f"run {thread_id}'s request names files, in {self.where}")
            files = self.request_blobs
            blobs.restore(value, found, lambda digest: files.get(thread_id, digest))
        return value

    def settle_request(self, thread_id: str) -> None:
        """Drop the long strings of the run's request (store/blobs.py). Call only once a
        checkpoint with the run's state is durable. SQLite: one stat when the request has
        no files; Postgres: one indexed read when the request is small or settled."""
        files = self.request_blobs
        if files is not None and not files.holds(thread_id):
            return
        with self.db.use() as db:
            row = db.execute(
                "SELECT request FROM onward_requests WHERE thread_id=? AND length(request) >= ?",
                (thread_id, 0 if files is not None else blobs.LONG_CHARS),
            ).fetchone()
            request = self._open_request(row[0]) if row else {}
            found: list[list[Any]] = []
            if blobs.BLOBS in request:
                found = request.pop(blobs.BLOBS)
                blobs.restore(request, found, lambda digest: "")
            elif files is None and blobs.SETTLED not in request:
                request, found = blobs.lift(request, lambda text: "")
            if found:
                settled = {**request, blobs.SETTLED: [path for path, _ in found]}
                db.execute(
                    "UPDATE onward_requests SET request=? WHERE thread_id=?",
                    (self._seal_request(settled), thread_id),
                )
        if files is not None:
            files.drop(thread_id)  # after the row no longer names them

    def set_run_status(self, thread_id: str, status: RunStatus) -> None:
        """Fenced by the thread's lease when this process drives it (store/leases.py)."""
        with self.db.use() as conn, fenced(conn, self.fences, thread_id) as db:
            db.execute(
                "UPDATE onward_runs SET status=?, updated_at=? WHERE thread_id=?",
                (status.value, utcnow().isoformat(), thread_id),
            )

    def get_run(self, thread_id: str) -> RunRow | None:
        with self.db.use() as db:
            row = db.execute("SELECT * FROM onward_runs WHERE thread_id=?", (thread_id,))
            found = row.fetchone()
        return self._row(found) if found else None

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        with self.db.use() as db:
            rows = db.execute(
                "SELECT * FROM onward_runs ORDER BY created_at DESC LIMIT ?", (limit,)
            ).fetchall()
        return [self._row(r) for r in rows]

    def unfinished_runs(self) -> list[RunRow]:
        """Runs that may still wait or go on (anything not done, failed or cancelled)."""
        finished = [s.value for s in RunStatus if s.finished]
        with self.db.use() as db:
            rows = db.execute(
                "SELECT * FROM onward_runs WHERE status NOT IN (?, ?, ?) ORDER BY created_at",
                finished,
            ).fetchall()
        return [self._row(r) for r in rows]

    def finished_runs(self) -> list[RunRow]:
        """Done, failed or cancelled runs, most recently updated first."""
        finished = [s.value for s in RunStatus if s.finished]
        with self.db.use() as db:
            rows = db.execute(
                "SELECT * FROM onward_runs WHERE status IN (?, ?, ?) ORDER BY updated_at DESC",
                finished,
            ).fetchall()
        return [self._row(r) for r in rows]

    def _row(self, r: tuple[Any, ...]) -> RunRow:
        return RunRow(
            thread_id=r[0],
            created_at=datetime.fromisoformat(r[1]),
            updated_at=datetime.fromisoformat(r[2]),
            status=RunStatus(r[3]),
            objective=open_text(self.cipher, r[4]),
        )

    # -- artifacts in use ---------------------------------------------------

    def use_artifact(self, sha256: str, thread_id: str) -> None:
        with self.db.use() as db:
            db.execute(
                "INSERT INTO onward_artifact_refs VALUES (?, ?) ON CONFLICT DO NOTHING",
                (thread_id, sha256),
            )

    def artifacts_of(self, thread_id: str) -> set[str]:
        with self.db.use() as db:
            rows = db.execute(
                "SELECT sha256 FROM onward_artifact_refs WHERE thread_id = ?", (thread_id,)
            ).fetchall()
        return {r[0] for r in rows}

    # -- leases -------------------------------------------------------------

    def release_lease(self, thread_id: str, owner: str) -> None:
        """Let go of ``owner``'s lease, even on a full disk: a failed release spends the
        SQLite reserve (store/reserve.py) and tries again. If it still fails, this process
        knows the drive ended, so its own next drive takes the run over at once (and once
        the process exits, any other on this host does: store/drivers.py)."""
        try:
            self.leases.release(thread_id, owner)
        except StoreError:
            if not (self.backend is Backend.SQLITE and reserve.spend(self.path)):
                drive_ended(owner)
                raise
            try:
                self.leases.release(thread_id, owner)
            except StoreError:
                drive_ended(owner)
                raise

    # -- the work queue -----------------------------------------------------

    def enqueue(self, thread_id: str, ready_at: float | None = None) -> None:
        """Make a run claimable by workers (now, or at ``ready_at`` epoch seconds)."""
        now = time.time()
        with self.db.use() as db:
            db.execute(
                "INSERT INTO onward_queue (thread_id, ready_at, enqueued_at) VALUES (?, ?, ?) "
                "ON CONFLICT (thread_id) DO UPDATE SET ready_at = excluded.ready_at, "
                "claimed_by = NULL, claimed_at = NULL",
                (thread_id, now if ready_at is None else ready_at, now),
            )

    def adopt_orphans(self, now: datetime) -> list[str]:
        """Queue unfinished runs whose driver died (its lease expired, never released), so
        workers resume them too. Runs already queued are left as they are."""
        finished = [st.value for st in RunStatus if st.finished]
        with self.db.use() as db:
            rows = db.execute(
                "SELECT l.thread_id, l.expires_at FROM onward_leases l "
                "JOIN onward_runs r ON r.thread_id = l.thread_id "
                "WHERE r.status NOT IN (?, ?, ?) "
                "AND l.thread_id NOT IN (SELECT thread_id FROM onward_queue)",
                finished,
            ).fetchall()
        orphans = [tid for tid, expires in rows if datetime.fromisoformat(expires) < now]
        for tid in orphans:
            with self.db.use() as db:
                db.execute(
                    "INSERT INTO onward_queue (thread_id, ready_at, enqueued_at) "
                    "VALUES (?, ?, ?) ON CONFLICT (thread_id) DO NOTHING",
                    (tid, time.time(), time.time()),
                )
            self.events.record(tid, EventKind.ADOPTED, {"lease_expired": True})
        return orphans

    def wake(self, thread_id: str) -> None:
        """A queued run has new work (a human answered): claimable now. No-op for runs
        that are not on the queue (driven by hand). Clears the claim, so a worker that
        claimed the run before the answer cannot park it again (see :meth:`requeue`)."""
        with self.db.use() as db:
            db.execute(
                "UPDATE onward_queue SET ready_at = ?, claimed_by = NULL, claimed_at = NULL, "
                "for_person = 0 WHERE thread_id = ?",
                (time.time(), thread_id),
            )

    def claim(self, owner: str, hold: float) -> str | None:
        """The oldest ready run, held for ``hold`` seconds (a worker that dies lets it go
        after that). Postgres: ``FOR UPDATE SKIP LOCKED``, so claiming workers never wait on
        each other; SQLite: one writer at a time."""
        now = time.time()
        skip = " FOR UPDATE SKIP LOCKED" if self.backend is Backend.POSTGRES else ""
        with self.db.use() as db, db.transaction(lock=None if skip else "queue"):
            row = db.execute(
                "SELECT thread_id FROM onward_queue WHERE ready_at <= ? "
                f"ORDER BY ready_at LIMIT 1{skip}",
                (now,),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE onward_queue SET ready_at = ?, claimed_by = ?, claimed_at = ?, "
                "for_person = 0 WHERE thread_id = ?",
                (now + hold, owner, now, row[0]),
            )
            self._claims[str(row[0])] = (owner, hold)
            return str(row[0])

    def _renew_claim(self, conn: Db, thread_id: str, _lease_owner: str) -> None:
        """With each heartbeat of a drive's lease: a claim of this store's worker on that
        run holds for another ``hold`` seconds. Else a step longer than the hold would
        let another worker claim the run mid-drive (it finds the lease live, calls the
        run busy and requeues it: the first worker's own requeue or park is then lost)."""
        claim = self._claims.get(thread_id)
        if claim is None:
            return
        claimer, hold = claim
        conn.execute(
            "UPDATE onward_queue SET ready_at = ? WHERE thread_id = ? AND claimed_by = ?",
            (time.time() + hold, thread_id, claimer),
        )

    def requeue(
        self, thread_id: str, ready_at: float | None, owner: str, *, for_person: bool = False
    ) -> bool:
        """After ``owner``'s drive: claimable again at ``ready_at`` (None: parked until
        woken); ``for_person``: only a person's deadline makes it ready. False when the
        claim is no longer ``owner``'s (an answer woke the run meanwhile: it stays ready)."""
        self._claims.pop(thread_id, None)
        with self.db.use() as db:
            cur = db.execute(
                "UPDATE onward_queue SET ready_at = ?, claimed_by = NULL, claimed_at = NULL, "
                "for_person = ? WHERE thread_id = ? AND claimed_by = ?",
                (ready_at, int(for_person), thread_id, owner),
            )
            return cur.rowcount == 1

    def dequeue(self, thread_id: str) -> None:
        self._claims.pop(thread_id, None)
        with self.db.use() as db:
            db.execute("DELETE FROM onward_queue WHERE thread_id = ?", (thread_id,))

    def pending_work(self) -> bool:
        """Some queued run is ready or will be without a person (runs that wait for an
        answer, or for a person's deadline, do not count)."""
        with self.db.use() as db:
            row = db.execute(
                "SELECT 1 FROM onward_queue WHERE ready_at IS NOT NULL AND for_person = 0 LIMIT 1"
            )
            return row.fetchone() is not None

    def queue(self) -> list[QueueRow]:
        with self.db.use() as db:
            rows = db.execute(
                "SELECT thread_id, ready_at, claimed_by FROM onward_queue ORDER BY enqueued_at"
            ).fetchall()
        return [QueueRow(r[0], r[1], r[2]) for r in rows]

    # -- retention ------------------------------------------------------------

    def delete_run(self, thread_id: str, *, keep_api: bool = False) -> tuple[int, set[str]]:
        """Every row of a run: checkpoints, events, ledger, lease, queue, references.
        Returns the rows deleted and the artifact bodies it referenced (pass them, for all
        the runs removed, to :meth:`delete_unused_bodies`). ``keep_api``: keep the API's
        thread and its run records (a rolled-back first run leaves its thread empty)."""
        shas = self.artifacts_of(thread_id)
        self.saver.delete_thread(thread_id)
        rows = 0
        with self.db.use() as db, db.transaction():
            present = _tables(db)
            for table in _THREAD_TABLES:
                if (keep_api and table in _API_TABLES) or table not in present:
                    continue  # kept, or a serve table this store never made
                cur = db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                rows += cur.rowcount
        if self.request_blobs is not None:
            self.request_blobs.drop(thread_id)
        return rows, shas

    def forget_drain_errors(self, thread_id: str) -> int:
        """Remove the error writes of the thread's newest checkpoint (a cancelled drive
        leaves one for the node it stopped, ``DrainRequested``): that node reads as not
        started, and runs when the thread goes on. Returns the writes removed."""
        flush = getattr(self.saver, "flush", None)
        if flush is not None:
            flush()
        writes = "writes" if self.backend is Backend.SQLITE else "checkpoint_writes"
        with self.db.use() as db, db.transaction():
            cur = db.execute(
                f"DELETE FROM {writes} WHERE thread_id = ? AND checkpoint_ns = '' "
                "AND channel = '__error__' AND checkpoint_id = (SELECT MAX(checkpoint_id) "
                "FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '')",
                (thread_id, thread_id),
            )
            return int(cur.rowcount or 0)

    def delete_checkpoints_after(self, thread_id: str, checkpoint_id: str) -> int:
        """Remove the thread's checkpoints (and their writes) newer than ``checkpoint_id``:
        an API run's rollback. Checkpoint ids are time-ordered UUIDs, so "newer" is a
        string comparison. Returns the checkpoints removed."""
        flush = getattr(self.saver, "flush", None)
        if flush is not None:
            flush()  # nothing the drive deferred may land after the delete
        writes = "writes" if self.backend is Backend.SQLITE else "checkpoint_writes"
        with self.db.use() as db, db.transaction():
            db.execute(
                f"DELETE FROM {writes} WHERE thread_id = ? AND checkpoint_id > ?",
                (thread_id, checkpoint_id),
            )
            cur = db.execute(
                "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id > ?",
                (thread_id, checkpoint_id),
            )
            return int(cur.rowcount)

    def delete_unused_bodies(self, candidates: set[str]) -> int:
        """Delete the bodies among ``candidates`` that no remaining run references; returns
        the bytes freed. One pass over the references (an index on sha256 would cost every
        step a write; prune is rare)."""
        if not candidates:
            return 0
        with self.db.use() as db:
            rows = db.execute("SELECT DISTINCT sha256 FROM onward_artifact_refs").fetchall()
        used = {r[0] for r in rows}
        return sum(self.artifacts.delete_body(sha) for sha in sorted(candidates - used))

    def size(self) -> int:
        """Bytes the database takes (SQLite: file plus WAL; Postgres: the database)."""
        if self.backend is Backend.POSTGRES:
            with self.db.use() as db:
                return int(db.execute("SELECT pg_database_size(current_database())").fetchone()[0])
        return sum(
            p.stat().st_size
            for p in (self.path, self.path.with_name(self.path.name + "-wal"))
            if p.exists()
        )

    def vacuum(self) -> None:
        """Give freed pages back: VACUUM (and truncate the WAL) on SQLite; VACUUM on Postgres
        (space is reused, the files shrink only at their ends)."""
        if self.backend is Backend.SQLITE:
            with translate_errors(Backend.SQLITE, self.where):
                self.conn.commit()
                self.conn.execute("VACUUM")
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return
        with self.db.use() as db:
            db.execute("VACUUM")
