"""The SQLite store: one file, its WAL, artifact and request files beside it.

What differs from Postgres (:mod:`onward.store.database` holds the rest): the schema lock
is an exclusive file lock beside the database; the checkpointer is onward's
:class:`~onward.checkpointing.savers.OnwardSqliteSaver` on the store's own connection;
artifact bodies and a request's long strings are files; claiming work locks the whole
database; the tables of ``onward serve`` are made when one is first used; a failed lease
release on a full disk spends the reserve (store/reserve.py) and tries again.
"""

from __future__ import annotations

import fcntl
import sqlite3
from collections.abc import Collection

from langgraph.checkpoint.sqlite import SqliteSaver

from onward.checkpointing.savers import OnwardSqliteSaver
from onward.checkpointing.serde import checkpoint_serde
from onward.errors import StoreError
from onward.store import blobs, reserve
from onward.store.artifacts import ArtifactStore
from onward.store.database import Store, _map_saver_errors
from onward.store.migrations import Migration, serve_statements
from onward.store.sql import (
    Backend,
    Db,
    sqlite_path,
    sqlite_synchronous,
    translate_errors,
    wal_checkpoints,
)
from onward.store.threadlocks import FileLocks, file_locks

_WRITES = """
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
"""SqliteSaver's table of pending writes, made before its own setup does: ``WITHOUT
ROWID``, so the key is the table (a store made before keeps its rowid table)."""


class SqliteStore(Store):
    """A store in one SQLite file (``sqlite:///path``)."""

    backend = Backend.SQLITE
    WRITES_TABLE = "writes"
    CLAIM_LOCKING = ""
    CLAIM_LOCK = "queue"
    saver: OnwardSqliteSaver

    def _open(self) -> None:
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
                self._set_up(conn)
            except BaseException:
                conn.close()
                raise
        reserve.keep(self.path)  # room to release a lease on a full disk
        self.conn = conn
        self.request_blobs = blobs.RequestBlobs(self.path.parent / "requests", self.cipher)
        self.saver = OnwardSqliteSaver(
            conn,
            serde=checkpoint_serde(self.cipher),
            held=self.held,
            to_sql=self._event_statements,
            fences=self.fences,
        )
        self.saver.is_setup = True  # created under the lock of _set_up
        _map_saver_errors(self.saver, Backend.SQLITE, self.where)

    def _set_up(self, conn: sqlite3.Connection) -> None:
        """Migrate under an exclusive lock on a file beside the database, then set the
        connection's durability and WAL checkpoints."""
        # Read first: on a file that is not SQLite this fails before anything is written.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self.migrate(Db(conn, Backend.SQLITE, self.where))
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        conn.execute(f"PRAGMA synchronous={sqlite_synchronous()}")
        wal_checkpoints(conn)

    def _setup_checkpointer(self, db: Db) -> None:
        conn: sqlite3.Connection = db.raw
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_WRITES)
        SqliteSaver(conn).setup()

    def _applies(self, db: Db, migration: Migration) -> bool:
        """A serve migration changes only a store that has the serve tables: one without
        makes them, as they are by then, when it first serves (:meth:`_make_serve_tables`)."""
        return not migration.serve or "onward_threads" in self._present_tables(db)

    def _make_serve_tables(self, db: Db) -> None:
        """The serve migrations' statements, in one transaction that locks the database
        (so two processes serving a store at once make them once). A store that never
        serves keeps none of their empty pages."""
        if "onward_threads" in self._present_tables(db):
            return  # made before (a read: every client's first use asks)
        with db.transaction(lock="serve"):
            if "onward_threads" not in self._present_tables(db):
                for statement in serve_statements(Backend.SQLITE):
                    db.execute(statement)

    def _present_tables(self, db: Db) -> Collection[str]:
        rows = db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'").fetchall()
        return {r[0] for r in rows}

    def _columns(self, db: Db, table: str) -> Collection[str]:
        return {r[1] for r in db.execute(f"PRAGMA table_info({table})").fetchall()}

    def connect(self) -> Db:
        return Db.open(str(self.path), timeout=self._timeout)

    def _artifact_store(self) -> ArtifactStore:
        return ArtifactStore(
            self.path.parent / "artifacts", cipher=self.cipher, on_put=self.use_artifact
        )

    def _thread_locks(self) -> FileLocks:
        return file_locks(self.path.with_name(self.path.name + ".threads.lock"))

    def _close_artifacts(self) -> None:
        """Files: nothing to close."""

    def _close_saver(self) -> None:
        self.conn.close()

    def _seal_text(self, text: str) -> str:
        return blobs.deflate(text)

    def free_reserve(self) -> None:
        reserve.spend(self.path)

    def fold_back_wal(self) -> None:
        reserve.fold_back(self.conn)

    def keep_reserve(self) -> None:
        reserve.keep(self.path)

    def room_to_vacuum(self) -> bool:
        return reserve.room_for(self.path, self.size())

    def _release_failed(self, thread_id: str, owner: str) -> bool:
        """Spend the reserve (store/reserve.py): the release may fit now."""
        return reserve.spend(self.path)

    def size(self) -> int:
        """The file plus its WAL."""
        return sum(
            p.stat().st_size
            for p in (self.path, self.path.with_name(self.path.name + "-wal"))
            if p.exists()
        )

    def vacuum(self) -> None:
        """VACUUM, and truncate the WAL."""
        with translate_errors(Backend.SQLITE, self.where):
            self.conn.commit()
            self.conn.execute("VACUUM")
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
