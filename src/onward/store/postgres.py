"""The Postgres store: every table, artifact bodies included, in one database (schema).

What differs from SQLite (:mod:`onward.store.database` holds the rest): connections are
borrowed from the process's pool (store/connection.py), which waits out an outage; the
schema lock is a session advisory lock, taken only when the schema is not this onward's
yet; the checkpointer is LangGraph's PostgresSaver (``checkpointing.savers``); artifact
bodies live in ``onward_artifacts`` so workers on other machines read them; claiming
work skips rows other workers hold (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from onward.checkpointing.savers import postgres_saver
from onward.checkpointing.serde import checkpoint_serde
from onward.store.artifacts import ArtifactStore
from onward.store.connection import PgPool, PooledDb, SharedConnection, close_pool, open_pool
from onward.store.database import STORE_SCHEMA_VERSION, THREAD_TABLES, Store, _map_saver_errors
from onward.store.sql import Backend, Db
from onward.store.tables import schema_version
from onward.store.threadlocks import RowLocks


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


class PostgresStore(Store):
    """A store in a Postgres database (``postgresql://…``; the URL's search_path picks
    the schema)."""

    backend = Backend.POSTGRES
    WRITES_TABLE = "checkpoint_writes"
    CLAIM_LOCKING = " FOR UPDATE SKIP LOCKED"
    CLAIM_LOCK = None

    def _open(self) -> None:
        """On the process's pool, as every connection of the store: a server that is down
        is waited for, up to ONWARD_PG_OUTAGE. The schema lock is taken only when the
        schema is not this onward's yet (a worker's slots open a store each, at once)."""
        self.pg_pool: PgPool = open_pool(self.url, self._timeout)
        self.request_blobs = None
        try:
            setup = PooledDb(self.pg_pool)
            if schema_version(setup) != STORE_SCHEMA_VERSION:
                with setup.session_lock("onward schema", self._timeout):
                    self.migrate(setup)
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

    def _setup_checkpointer(self, db: Db) -> None:
        from psycopg.rows import dict_row

        # On the connection that holds the schema lock (PooledDb.session_lock).
        with db.raw.cursor(row_factory=dict_row) as cursor:
            _setup_postgres_saver(cursor)

    def serving_known(self) -> bool:
        """The migrations make the serve tables with the rest."""
        return True

    def _make_serve_tables(self, db: Db) -> None:
        """Made with the rest, by the migrations."""

    def _present_tables(self, db: Db) -> Collection[str]:
        return THREAD_TABLES

    def _columns(self, db: Db, table: str) -> Collection[str]:
        rows = db.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        ).fetchall()
        return {r[0] for r in rows}

    def connect(self) -> Db:
        """A :class:`PooledDb` on the process's pool (it borrows a connection per use)."""
        return PooledDb(self.pg_pool)

    def _artifact_store(self) -> ArtifactStore:
        return TableArtifacts(
            SharedConnection(self.connect), cipher=self.cipher, on_put=self.use_artifact
        )

    def _thread_locks(self) -> RowLocks:
        return RowLocks(SharedConnection(self._serve_connect))

    def _close_artifacts(self) -> None:
        if isinstance(self.artifacts, TableArtifacts):
            self.artifacts._db.close()

    def _close_saver(self) -> None:
        close_pool(self.pg_pool)

    def size(self) -> int:
        """The database's size (every schema in it)."""
        with self.db.use() as db:
            return int(db.execute("SELECT pg_database_size(current_database())").fetchone()[0])

    def vacuum(self) -> None:
        """VACUUM: space is reused; the files shrink only at their ends."""
        with self.db.use() as db:
            db.execute("VACUUM")
