"""The store's schema history as data: numbered migrations in one ordered list.

Each :class:`Migration` is what one store schema version changed, as SQLite and as
Postgres statements. A store records the last version applied (``onward_meta``'s
``schema_version``); opening it applies every later migration in order, each in its own
transaction together with the new version number, so a crash leaves the store at the
last migration that committed (:meth:`onward.store.database.Store.migrate`). A new store
is every migration from 1: there is no second "create the current schema" path, and
``tests/store/test_store_migrations.py`` checks that replaying the list gives the schema the
release that wrote ``tests/store/golden/schema`` made.

Rules for a change: append a migration with the next number; never edit one that has
shipped (stores at or past it never run it again). Statements are plain DDL and DML run
one at a time (SQLite's ``executescript`` would commit mid-transaction), and each may run
on a store that already has what it makes: tables and indexes ``IF NOT EXISTS``, data
moves that skip what moved, and an ``ALTER TABLE … ADD COLUMN`` of a column that is
there is skipped by the store (:func:`added_column`). Releases before numbered
migrations did not migrate in one transaction per version, so a store one left half-way
has parts of versions it never recorded.

The checkpointer's own tables (LangGraph's ``checkpoints``, ``writes`` or
``checkpoint_blobs``…) are not here: LangGraph's savers create and migrate them, and the
backends run that setup before onward's migrations (store/sqlite.py, store/postgres.py).

Migrations marked ``serve`` touch only the tables of ``onward serve``. A SQLite store
makes those on first use (a store that never serves keeps none of their pages), by
applying the serve migrations in order then (:func:`serve_statements`); a SQLite store
without them skips these migrations when it is upgraded. Postgres applies every one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from onward.store.sql import Backend


@dataclass(frozen=True, slots=True)
class Migration:
    """What store schema ``number`` changed, on each backend."""

    number: int
    description: str
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]
    serve: bool = False
    """Only the tables of ``onward serve`` (see the module docstring)."""

    def statements(self, backend: Backend) -> tuple[str, ...]:
        return self.sqlite if backend is Backend.SQLITE else self.postgres


def _both(number: int, description: str, *statements: str, serve: bool = False) -> Migration:
    """A migration whose statements both backends speak."""
    return Migration(number, description, statements, statements, serve)


def _keyed(
    number: int, description: str, tables: Sequence[str], *more: str, serve: bool = False
) -> Migration:
    """A migration creating ``tables`` (``CREATE TABLE`` statements): ``WITHOUT ROWID`` on
    SQLite, where the primary key is then the table, not a second b-tree beside it. Only
    for tables of small rows (a row over about 1 KB spills to an overflow page)."""
    sqlite = tuple(f"{table} WITHOUT ROWID" for table in tables)
    return Migration(number, description, sqlite + more, (*tables, *more), serve)


_META = "CREATE TABLE IF NOT EXISTS onward_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_RUNS = """CREATE TABLE IF NOT EXISTS onward_runs (
    thread_id   TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    status      TEXT NOT NULL,
    objective   TEXT NOT NULL,
    request     TEXT NOT NULL
)"""
_LEASES = """CREATE TABLE IF NOT EXISTS onward_leases (
    thread_id    TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    acquired_at  TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL,
    expires_at   TEXT NOT NULL
)"""
_EVENTS = """CREATE TABLE IF NOT EXISTS onward_events (
    id        {id},
    thread_id TEXT NOT NULL,
    at        TEXT NOT NULL,
    kind      TEXT NOT NULL,
    detail    TEXT NOT NULL DEFAULT ''
)"""
_EVENTS_THREAD = "CREATE INDEX IF NOT EXISTS onward_events_thread ON onward_events (thread_id, id)"
_EFFECTS = """CREATE TABLE IF NOT EXISTS onward_effects (
    key          TEXT PRIMARY KEY,
    thread_id    TEXT NOT NULL,
    step_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    args         TEXT NOT NULL,
    status       TEXT NOT NULL,
    result       TEXT,
    started_at   TEXT NOT NULL,
    completed_at TEXT,
    calls        INTEGER NOT NULL DEFAULT 1,
    compensable  INTEGER NOT NULL DEFAULT 0
)"""
_BREAKERS = """CREATE TABLE IF NOT EXISTS onward_breakers (
    service     TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    outcomes    TEXT NOT NULL DEFAULT '',
    consecutive INTEGER NOT NULL DEFAULT 0,
    opened_at   TEXT,
    probe_at    TEXT,
    probe_owner TEXT,
    updated_at  TEXT NOT NULL
)"""
_QUEUE = """CREATE TABLE IF NOT EXISTS onward_queue (
    thread_id   TEXT PRIMARY KEY,
    ready_at    DOUBLE PRECISION,
    claimed_by  TEXT,
    claimed_at  DOUBLE PRECISION,
    enqueued_at DOUBLE PRECISION NOT NULL,
    for_person  INTEGER NOT NULL DEFAULT 0
)"""
_ARTIFACT_REFS = """CREATE TABLE IF NOT EXISTS onward_artifact_refs (
    thread_id TEXT NOT NULL,
    sha256    TEXT NOT NULL,
    PRIMARY KEY (thread_id, sha256)
)"""
_THREADS = """CREATE TABLE IF NOT EXISTS onward_threads (
    thread_id  TEXT PRIMARY KEY,
    owner      TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    metadata   TEXT NOT NULL DEFAULT '{}'
)"""
_API_RUNS = """CREATE TABLE IF NOT EXISTS onward_api_runs (
    run_id       TEXT PRIMARY KEY,
    thread_id    TEXT NOT NULL,
    assistant_id TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    status       TEXT NOT NULL,
    metadata     TEXT NOT NULL DEFAULT '{}'
)"""
_ASSISTANTS = """CREATE TABLE IF NOT EXISTS onward_assistants (
    assistant_id TEXT NOT NULL,
    version      INTEGER NOT NULL,
    graph_id     TEXT NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT,
    context      TEXT NOT NULL DEFAULT '{}',
    metadata     TEXT NOT NULL DEFAULT '{}',
    owner        TEXT,
    created_at   TEXT NOT NULL,
    latest       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (assistant_id, version)
)"""
_RUN_EVENTS = """CREATE TABLE IF NOT EXISTS onward_api_run_events (
    run_id    TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    thread_id TEXT NOT NULL,
    event     TEXT NOT NULL,
    data      TEXT,
    PRIMARY KEY (run_id, seq)
)"""
_CRONS = """CREATE TABLE IF NOT EXISTS onward_crons (
    cron_id          TEXT PRIMARY KEY,
    owner            TEXT NOT NULL,
    thread_id        TEXT,
    assistant_id     TEXT NOT NULL,
    schedule         TEXT NOT NULL,
    timezone         TEXT,
    payload          TEXT NOT NULL,
    metadata         TEXT NOT NULL DEFAULT '{}',
    on_run_completed TEXT,
    enabled          INTEGER NOT NULL DEFAULT 1,
    end_time         TEXT,
    next_run_date    TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
)"""
_THREAD_LOCKS = """CREATE TABLE IF NOT EXISTS onward_thread_locks (
    thread_id TEXT PRIMARY KEY,
    owner     TEXT NOT NULL,
    until     TEXT NOT NULL
)"""
_FENCE = """CREATE OR REPLACE FUNCTION onward_fence(threads text[], owners text[], epochs bigint[])
RETURNS void LANGUAGE plpgsql AS $fence$
BEGIN
    FOR i IN 1 .. coalesce(array_length(threads, 1), 0) LOOP
        PERFORM 1 FROM onward_leases
        WHERE thread_id = threads[i] AND owner = owners[i] AND epoch = epochs[i] FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the lease of run % is not this driver''s any more', threads[i]
                USING ERRCODE = 'OW001', DETAIL = threads[i];
        END IF;
    END LOOP;
END
$fence$"""
"""Fencing on Postgres (store/leases.py): a saver's commit calls it inside its one
statement; it locks each lease row ``FOR SHARE`` and raises ``OW001`` with the thread id
as its detail when the row is not the drive's."""


def _add_columns(table: str, *columns: str) -> tuple[str, ...]:
    return tuple(f"ALTER TABLE {table} ADD COLUMN {column}" for column in columns)


def _drop_indexes(*names: str) -> tuple[str, ...]:
    return tuple(f"DROP INDEX IF EXISTS {name}" for name in names)


def _attempt_index(after_kind: str) -> str:
    return (
        "CREATE UNIQUE INDEX IF NOT EXISTS onward_events_attempt "
        f"ON onward_events (thread_id, {after_kind}, kind) WHERE dedupe IS NOT NULL"
    )


_UNKEYED_KIND = (
    "CREATE INDEX IF NOT EXISTS onward_events_unkeyed_kind "
    "ON onward_events (thread_id, kind, id) WHERE dedupe IS NULL"
)
_OLD_EVENT_INDEXES = _drop_indexes(
    "onward_events_kind_once", "onward_events_kind", "onward_events_once"
)
_SAVER_THREAD_INDEXES = _drop_indexes(
    "checkpoints_thread_id_idx", "checkpoint_blobs_thread_id_idx", "checkpoint_writes_thread_id_idx"
)
"""The second index on thread_id LangGraph's PostgresSaver adds beside each table's primary
key (which begins with thread_id): a WAL record per row, and no lookup the key does not
serve. A new store never makes them (store/postgres.py)."""

MIGRATIONS: tuple[Migration, ...] = (
    _keyed(
        1,
        "runs",
        (_META, _RUNS),
        "CREATE INDEX IF NOT EXISTS onward_runs_created ON onward_runs (created_at)",
    ),
    Migration(
        2,
        "leases and the event log; SQLite event ids are the rowid (max + 1, no "
        "sqlite_sequence row rewritten by every commit)",
        (f"{_LEASES} WITHOUT ROWID", _EVENTS.format(id="INTEGER PRIMARY KEY"), _EVENTS_THREAD),
        (_LEASES, _EVENTS.format(id="BIGSERIAL PRIMARY KEY"), _EVENTS_THREAD),
    ),
    _both(
        3,
        "the effect ledger",
        _EFFECTS,
        "CREATE INDEX IF NOT EXISTS onward_effects_thread ON onward_effects (thread_id, step_id)",
    ),
    _keyed(4, "circuit breakers", (_BREAKERS,)),
    _both(
        5,
        "event dedupe keys (a progress event is logged once per attempt)",
        *_add_columns("onward_events", "dedupe TEXT"),
        "CREATE UNIQUE INDEX IF NOT EXISTS onward_events_once "
        "ON onward_events (thread_id, dedupe) WHERE dedupe IS NOT NULL",
    ),
    Migration(
        6,
        "the work queue; artifact references (and, on Postgres, artifact bodies)",
        (
            f"{_QUEUE} WITHOUT ROWID",
            "CREATE INDEX IF NOT EXISTS onward_queue_ready ON onward_queue (ready_at)",
            f"{_ARTIFACT_REFS} WITHOUT ROWID",
        ),
        (
            _QUEUE,
            "CREATE INDEX IF NOT EXISTS onward_queue_ready ON onward_queue (ready_at)",
            _ARTIFACT_REFS,
            "CREATE TABLE IF NOT EXISTS onward_artifacts "
            "(sha256 TEXT PRIMARY KEY, body BYTEA NOT NULL)",
        ),
    ),
    Migration(
        7,
        "API threads and runs (onward serve)",
        (f"{_THREADS} WITHOUT ROWID", _API_RUNS),
        (_THREADS, _API_RUNS),
        serve=True,
    ),
    _keyed(
        8,
        "a run's request in its own table (a status change no longer rewrites the whole "
        "plan); events indexed by kind (a resume finds a long run's suspensions)",
        (
            "CREATE TABLE IF NOT EXISTS onward_requests "
            "(thread_id TEXT PRIMARY KEY, request TEXT NOT NULL)",
        ),
        "INSERT INTO onward_requests SELECT thread_id, request FROM onward_runs "
        "WHERE request <> '' ON CONFLICT DO NOTHING",
        "UPDATE onward_runs SET request = '' WHERE request <> ''",
        "CREATE INDEX IF NOT EXISTS onward_events_kind ON onward_events (thread_id, kind, id)",
    ),
    _both(
        9,
        "an API run keeps its interrupt_before and the checkpoint it started from",
        *_add_columns(
            "onward_api_runs", "pause_before TEXT NOT NULL DEFAULT '[]'", "from_checkpoint TEXT"
        ),
        serve=True,
    ),
    _keyed(
        10,
        "API runs queue behind a busy thread (their request and multitask strategy); "
        "assistants and their versions",
        (_ASSISTANTS,),
        *_add_columns(
            "onward_api_runs", "request TEXT", "multitask_strategy TEXT NOT NULL DEFAULT 'enqueue'"
        ),
        serve=True,
    ),
    _both(
        11,
        "API runs keep their stream events, interrupt_after, webhook, stream modes and a "
        "cancel asked of a run another process drives",
        *_add_columns(
            "onward_api_runs",
            "pause_after TEXT NOT NULL DEFAULT '[]'",
            "webhook TEXT",
            "stream_mode TEXT NOT NULL DEFAULT '[]'",
            "cancel TEXT",
        ),
        _RUN_EVENTS,
        "CREATE INDEX IF NOT EXISTS onward_api_run_events_thread "
        "ON onward_api_run_events (thread_id)",
        serve=True,
    ),
    _keyed(
        12,
        "crons of onward serve",
        (_CRONS,),
        "CREATE INDEX IF NOT EXISTS onward_crons_due ON onward_crons (enabled, next_run_date)",
        serve=True,
    ),
    _both(
        13,
        "one index of events by (thread, kind, dedupe key) instead of two",
        "CREATE UNIQUE INDEX IF NOT EXISTS onward_events_kind_once "
        "ON onward_events (thread_id, kind, dedupe)",
        *_drop_indexes("onward_events_kind", "onward_events_once"),
    ),
    Migration(
        14,
        "event indexes in the order events are written (a step attempt's keyed events side "
        "by side; kind lookups over unkeyed rows); no second thread_id index on "
        "PostgresSaver's tables",
        (
            _attempt_index("substr(dedupe, instr(dedupe, ':') + 1)"),
            _UNKEYED_KIND,
            *_OLD_EVENT_INDEXES,
        ),
        (
            _attempt_index("(substr(dedupe, strpos(dedupe, ':') + 1))"),
            _UNKEYED_KIND,
            *_OLD_EVENT_INDEXES,
            *_SAVER_THREAD_INDEXES,
        ),
    ),
    Migration(
        15,
        "leases carry a fencing epoch (older leases get 0); Postgres gets the epoch counter "
        "and onward_fence",
        _add_columns("onward_leases", "epoch BIGINT NOT NULL DEFAULT 0"),
        (
            *_add_columns("onward_leases", "epoch BIGINT NOT NULL DEFAULT 0"),
            "CREATE SEQUENCE IF NOT EXISTS onward_lease_epochs",
            _FENCE,
        ),
    ),
    Migration(
        16,
        "thread locks of onward serve on Postgres: held by one request (of any server "
        "process) while it decides whether a thread's run starts or waits (a SQLite "
        "store's are byte-range locks of a file beside it: store/threadlocks.py)",
        (),
        (_THREAD_LOCKS,),
        serve=True,
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].number
"""The schema this onward writes: the last migration's number."""


def pending(found: int) -> tuple[Migration, ...]:
    """The migrations a store at schema ``found`` has not applied, in order."""
    return tuple(m for m in MIGRATIONS if m.number > found)


def serve_statements(backend: Backend) -> tuple[str, ...]:
    """Every statement of the serve migrations, in order: the tables of ``onward serve``
    as a store at :data:`SCHEMA_VERSION` makes them when it first needs them."""
    return tuple(s for m in MIGRATIONS if m.serve for s in m.statements(backend))


_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)")


def added_column(statement: str) -> tuple[str, str] | None:
    """(table, column) when ``statement`` adds a column."""
    found = _ADD_COLUMN.match(statement)
    return (found[1], found[2]) if found else None


RECORD_VERSION = (
    "INSERT INTO onward_meta VALUES ('schema_version', ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
"""Run in each migration's transaction with its number."""
