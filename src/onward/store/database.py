"""The store: one URL → LangGraph checkpointer + onward's own tables + artifact store.

``sqlite:///.onward/onward.db`` (the embedded default) or ``postgresql://…``. Both
backends hold the same tables behind the same interface: runs, the effect ledger,
leases, events, breakers, the work queue and artifact references; Postgres keeps the
artifact bodies in a table too, so workers on other machines read them.

:class:`Store` holds what both backends share; ``Store(url)`` opens a
:class:`~onward.store.sqlite.SqliteStore` or a :class:`~onward.store.postgres.PostgresStore`,
which supply what differs (opening, connections, the checkpointer, file or table artifacts,
size and vacuum). The schema is the ordered list of numbered migrations in
:mod:`onward.store.migrations`, applied past the store's recorded version once, under a
lock — an exclusive file lock beside a SQLite file, an advisory lock on Postgres — so
processes starting on a fresh store at once do not race.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from langgraph.checkpoint.base import BaseCheckpointSaver

from onward.checkpointing.savers import HeldRows, Statements
from onward.effects.ledger import Ledger
from onward.errors import StoreError
from onward.model.state import RunStatus, utcnow
from onward.observe.events import EventLog, LogRow
from onward.observe.kinds import EventKind
from onward.settings import DEFAULT_DB, settings
from onward.store import blobs, ticking
from onward.store.artifacts import ArtifactStore
from onward.store.assistants import Assistants
from onward.store.breakers import Breakers
from onward.store.connection import SharedConnection
from onward.store.crons import Crons
from onward.store.drivers import drive_ended
from onward.store.encryption import KEY_CHECK, Cipher, check_key, open_text, seal_text
from onward.store.leases import Fences, LeasePolicy, Leases, fenced_write
from onward.store.migrations import (
    RECORD_VERSION,
    SCHEMA_VERSION,
    Migration,
    added_column,
    pending,
)
from onward.store.runs import Threads
from onward.store.sql import (
    Backend,
    Db,
    Statement,
    backend_of,
    one_row_each,
    redact,
    sqlite_path,
    store_error,
    translate_errors,
)
from onward.store.tables import schema_version
from onward.store.threadlocks import FileLocks, RowLocks

__all__ = [
    "DEFAULT_URL",
    "STORE_SCHEMA_VERSION",
    "Claimed",
    "QueueRow",
    "RunRow",
    "Store",
    "sqlite_path",
]

DEFAULT_URL = DEFAULT_DB
STORE_SCHEMA_VERSION = SCHEMA_VERSION
"""The schema this onward writes; its history is :data:`onward.store.migrations.MIGRATIONS`."""

THREAD_TABLES = (
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


CANCEL_LOOK = 1.0
"""Seconds between the looks for cancels asked through the event log of the runs this
process drives (one statement for all of them: :meth:`Store.cancels_requested`)."""


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


class Store:
    """An open store. Use as a context manager, or call :meth:`close`.

    ``Store(url)`` gives the backend's subclass for ``url``; the subclasses supply the
    methods that raise :class:`NotImplementedError` here and the class attributes below
    (there is no branch on the backend in this class)."""

    backend: ClassVar[Backend]
    saver: BaseCheckpointSaver[Any]
    artifacts: ArtifactStore
    request_blobs: blobs.RequestBlobs | None
    """Long strings of a run's request as files beside the store (SQLite only)."""
    WRITES_TABLE: ClassVar[str]
    """The checkpointer's table of pending writes."""
    CLAIM_LOCKING: ClassVar[str]
    """What :meth:`claim`'s SELECT appends to lock the row it picks."""
    CLAIM_LOCK: ClassVar[str | None]
    """The lock :meth:`claim`'s transaction takes (SQLite: the whole database)."""

    def __new__(cls, url: str | None = None, *, busy_timeout: float | None = None) -> Store:
        if cls is Store:
            cls = _backend_class(backend_of(url or default_url()))
        return super().__new__(cls)

    def __init__(self, url: str | None = None, *, busy_timeout: float | None = None) -> None:
        self.url = url or default_url()
        self.cipher = Cipher.from_env()
        self._timeout = (
            busy_timeout if busy_timeout is not None else settings().busy_timeout.total_seconds()
        )
        self.where = redact(self.url)
        self.held = HeldRows()
        """Event rows of finished tasks, saved with their writes (see ``savers``)."""
        self.fences = Fences()
        """The leases this process's drives hold: the saver and ledger fence by them."""
        self._open()
        self.db = SharedConnection(self.connect)
        try:
            self._check_key()
        except BaseException:
            self._close_saver()
            raise
        self.artifacts = self._artifact_store()
        self.ticker = ticking.ticker(self.url)
        """The process's timer thread for this store's drives (store/ticking.py)."""
        self.leases = Leases(
            self.connect, LeasePolicy.from_env(), fences=self.fences, ticker=self.ticker
        )
        self.cancel_looks = ticking.cancel_looks(self.url, CANCEL_LOOK)
        """Drives of this store watch here for cancels asked through the event log (with
        :meth:`cancels_requested`; one look for every store of this URL in the process)."""
        self._short_requests: set[str] = set()
        """Runs whose request :meth:`run_request` read shorter than ``LONG_CHARS`` (Postgres):
        :meth:`settle_request` need not read it again."""
        self._claims: dict[str, tuple[str, float]] = {}
        """Queue claims this store's worker holds: thread id → (claimer, hold seconds)."""
        self.leases.renewal = self._claim_renewal
        self.ledger = Ledger(self.connect, self.cipher, self.fences)
        self.events = EventLog(self.connect, self.cipher, self.fences)
        self.breakers = Breakers(self.connect, self.events, utcnow)
        self._serve_ready = False
        self._serve_lock = threading.Lock()
        self.threads = Threads(self._serve_connect)
        self.thread_locks = self._thread_locks()
        """A thread's lock, held while a request decides what to do with it (across the
        processes of this store: store/threadlocks.py)."""
        self.assistants = Assistants(self._serve_connect)
        self.crons = Crons(self._serve_connect, self.cipher)

    # -- what each backend supplies ------------------------------------------

    def _open(self) -> None:
        """Connect, bring the schema up to date (:meth:`migrate`), set :attr:`saver`."""
        raise NotImplementedError

    def connect(self) -> Db:
        """A connection to the store's database for work on other threads."""
        raise NotImplementedError

    def _artifact_store(self) -> ArtifactStore:
        """Where artifact bodies go (files beside a SQLite store, a Postgres table)."""
        raise NotImplementedError

    def _close_saver(self) -> None:
        """Close the checkpointer's connection (or the process's pool)."""
        raise NotImplementedError

    def _thread_locks(self) -> FileLocks | RowLocks:
        """Thread locks (a file beside a SQLite store, a Postgres table)."""
        raise NotImplementedError

    def _setup_checkpointer(self, db: Db) -> None:
        """Create or upgrade LangGraph's checkpointer tables (before onward's migrations)."""
        raise NotImplementedError

    def _present_tables(self, db: Db) -> Collection[str]:
        """Which of :data:`THREAD_TABLES` the store has (SQLite makes serve's on first use)."""
        raise NotImplementedError

    def size(self) -> int:
        """Bytes the database takes."""
        raise NotImplementedError

    def vacuum(self) -> None:
        """Give freed pages back."""
        raise NotImplementedError

    def _close_artifacts(self) -> None:
        """Close what :meth:`_artifact_store` opened."""
        raise NotImplementedError

    def _columns(self, db: Db, table: str) -> Collection[str]:
        """The names of ``table``'s columns."""
        raise NotImplementedError

    def _applies(self, db: Db, migration: Migration) -> bool:
        """Whether ``migration`` changes this store (every one, unless a backend says)."""
        return True

    def _make_serve_tables(self, db: Db) -> None:
        """Make the tables of ``onward serve`` if the store has none yet."""
        raise NotImplementedError

    def _seal_text(self, text: str) -> str:
        """A request's JSON as stored, before sealing (a backend may compress it)."""
        return text

    def _release_failed(self, thread_id: str, owner: str) -> bool:
        """After a failed lease release: True when a retry may now succeed."""
        return False

    # -- room on a full disk (store/reserve.py) ---------------------------

    def free_reserve(self) -> None:
        """Free the room kept for a full disk (a SQLite store's reserve file)."""

    def fold_back_wal(self) -> None:
        """Copy committed pages back into the database if it has room (SQLite's WAL)."""

    def keep_reserve(self) -> None:
        """Keep room for a full disk again, if there is as much to spare."""

    def room_to_vacuum(self) -> bool:
        """Whether VACUUM has room for the database's new copy."""
        return True

    # -- opening ----------------------------------------------------------

    def migrate(self, db: Db) -> None:
        """Apply the migrations past the store's schema version, each in a transaction with
        its number recorded. Call holding the backend's schema lock. A store written by a
        newer onward is refused, never downgraded."""
        found = schema_version(db)
        if found > STORE_SCHEMA_VERSION:
            raise StoreError(
                f"{self.where} was written by a newer onward (store schema {found}, this onward "
                f"knows {STORE_SCHEMA_VERSION}); upgrade onward to use it"
            )
        todo = pending(found)
        if not todo:
            return
        self._setup_checkpointer(db)
        for migration in todo:
            with db.transaction():
                if self._applies(db, migration):
                    for statement in migration.statements(self.backend):
                        self._migrate_statement(db, statement)
                db.execute(RECORD_VERSION, (str(migration.number),))

    def _migrate_statement(self, db: Db, statement: str) -> None:
        """Run one migration statement; a column it adds that is already there is skipped
        (an older release migrated without a transaction per version, so a store it left
        half-way may have columns of a version it never recorded)."""
        added = added_column(statement)
        if added is None or added[1] not in self._columns(db, added[0]):
            db.execute(statement)

    def _event_statements(
        self, thread_id: str, rows: Sequence[LogRow], refs: Sequence[tuple[str, str]]
    ) -> Statements:
        return self.events.statements(thread_id, rows, refs)

    def drop_held(self, thread_id: str) -> None:
        """After a drive: forget event rows of tasks whose writes were never saved (their
        events are logged when they run again, as ``savers`` promises)."""
        self.held.drop_thread(thread_id)
        self._short_requests.discard(thread_id)

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

    def serving(self) -> bool:
        """Whether this store has the tables of ``onward serve`` (a SQLite store makes them
        on first use): when not, no thread of it is an API thread. A read, never a write."""
        if not self._serve_ready:
            with self.db.use() as db:
                self._serve_ready = "onward_threads" in self._present_tables(db)
        return self._serve_ready

    def _serve_connect(self) -> Db:
        """:meth:`connect` for the tables of ``onward serve``: the first one makes them on
        a store that has none yet (:meth:`_make_serve_tables`)."""
        db = self.connect()
        if not self._serve_ready:
            with self._serve_lock:
                if not self._serve_ready:
                    self._make_serve_tables(db)
                    self._serve_ready = True
        return db

    def close(self) -> None:
        self.leases.close()
        self.threads.close()
        self.assistants.close()
        self.crons.close()
        self.breakers.close()
        self.events.close()
        self.ledger.close()
        self.db.close()
        self._close_artifacts()
        self._close_saver()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -------------------------------------------------------------

    def add_run(
        self,
        thread_id: str,
        objective: str,
        request: dict[str, Any],
        *,
        events: Sequence[LogRow] = (),
    ) -> None:
        """A new run's record and request, and ``events`` (its start), in one transaction."""
        now = utcnow().isoformat()
        row = request
        if self.request_blobs is not None:
            # Long strings (a big argument) as files, written before the row that names
            # them: a crash in between leaves only unused files (store/blobs.py).
            files = self.request_blobs
            lifted, found = blobs.lift(request, lambda text: files.put(thread_id, text))
            row = {**lifted, blobs.BLOBS: found} if found else request
        statements: list[Statement] = [
            (
                "INSERT INTO onward_runs VALUES (?, ?, ?, ?, ?, '')",
                (thread_id, now, now, RunStatus.PLANNING.value, seal_text(self.cipher, objective)),
            ),
            ("INSERT INTO onward_requests VALUES (?, ?)", (thread_id, self._seal_request(row))),
            *one_row_each(self.events.statements(thread_id, events)),
        ]
        with self.db.use() as db:
            db.write_all(statements)

    def _seal_request(self, request: dict[str, Any]) -> str:
        """A request's row: JSON, deflated on SQLite when it is long (a plan's steps repeat
        their keys; Postgres compresses long values itself), sealed when the store is."""
        return seal_text(self.cipher, self._seal_text(json.dumps(request, ensure_ascii=False)))

    def _open_request(self, stored: str) -> dict[str, Any]:
        text = blobs.inflate(open_text(self.cipher, stored), self.where)
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
        if self.request_blobs is None and len(row[0]) < blobs.LONG_CHARS:
            self._short_requests.add(thread_id)  # settle_request has nothing to do
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
        if thread_id in self._short_requests:  # read short by this process: nothing to lift
            self._short_requests.discard(thread_id)
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
        with self.db.use() as db:
            fenced_write(
                db,
                self.fences,
                thread_id,
                "UPDATE onward_runs SET status=?, updated_at=? WHERE thread_id=?",
                (status.value, utcnow().isoformat(), thread_id),
            )

    def cancels_requested(self, thread_ids: Collection[str]) -> set[str]:
        """Of these runs, those with a cancel request in the event log (``onward cancel``
        of a run another process drives): one statement, by the index of the kinds of rows
        without a dedupe key, as ``EventLog.list`` reads them."""
        if not thread_ids:
            return set()
        marks = ", ".join("?" for _ in thread_ids)
        with self.db.use() as db:
            rows = db.execute(
                f"SELECT DISTINCT thread_id FROM onward_events WHERE thread_id IN ({marks}) "
                "AND kind IN (?) AND dedupe IS NULL",
                (*thread_ids, str(EventKind.CANCEL_REQUESTED)),
            ).fetchall()
        return {str(r[0]) for r in rows}

    def make_durable_with_status(
        self, thread_id: str, status: RunStatus, *, dequeue: bool = False
    ) -> None:
        """What the saver deferred, then the run's status: one commit, fenced by the lease
        this process's drive holds (a drive's end: its last checkpoints and how it ended),
        not a commit and a fenced write after it. ``dequeue``: the run is off the work
        queue in the same commit (a worker's drive that finished it: :meth:`holds_claim`
        is then False)."""
        also: list[tuple[str, list[tuple[Any, ...]]]] = [
            (
                "UPDATE onward_runs SET status=?, updated_at=? WHERE thread_id=?",
                [(status.value, utcnow().isoformat(), thread_id)],
            )
        ]
        if dequeue:
            also.append(("DELETE FROM onward_queue WHERE thread_id = ?", [(thread_id,)]))
        if not self.held.make_durable_with(thread_id, [], also):
            self.held.make_durable()
            self.set_run_status(thread_id, status)
            if dequeue:
                self.dequeue(thread_id)
        if dequeue:
            self._claims.pop(thread_id, None)

    def holds_claim(self, thread_id: str) -> bool:
        """This store's worker claimed the run and has not put it back or off the queue."""
        return thread_id in self._claims

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
            if not self._release_failed(thread_id, owner):
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
            db.execute(*self.waking(thread_id))

    @staticmethod
    def waking(thread_id: str) -> Statement:
        """:meth:`wake` as a statement, for a caller's transaction."""
        return (
            "UPDATE onward_queue SET ready_at = ?, claimed_by = NULL, claimed_at = NULL, "
            "for_person = 0 WHERE thread_id = ?",
            (time.time(), thread_id),
        )

    def claim(self, owner: str, hold: float) -> str | None:
        """The oldest ready run, held for ``hold`` seconds (a worker that dies lets it go
        after that). Postgres: ``FOR UPDATE SKIP LOCKED``, so claiming workers never wait on
        each other; SQLite: one writer at a time."""
        claimed = self.claim_run(owner, hold)
        return claimed.thread_id if claimed is not None else None

    def claim_run(self, owner: str, hold: float) -> Claimed | None:
        """:meth:`claim`, with what the claimed run's drive reads first (:class:`Claimed`),
        in the claim's one statement: a worker's claim costs one round trip, and its drive
        need not read the run's record, its cancel requests or its API thread again."""
        now = time.time()
        # An API thread's run: known without a read where the serve tables are known to be
        # there (always on Postgres), else left to the drive (None).
        api = _API_THREAD_OF_QUEUED if self._serve_ready or self.serving_known() else "NULL"
        with self.db.use() as db, self._claiming(db):
            row = db.execute(
                "UPDATE onward_queue SET ready_at = ?, claimed_by = ?, claimed_at = ?, "
                "for_person = 0 WHERE thread_id = (SELECT thread_id FROM onward_queue "
                f"WHERE ready_at <= ? ORDER BY ready_at LIMIT 1{self.CLAIM_LOCKING}) "
                f"RETURNING thread_id, {_RUN_OF_QUEUED}, {_CANCEL_OF_QUEUED}, {api}",
                (now + hold, owner, now, now, str(EventKind.CANCEL_REQUESTED)),
            ).fetchone()
        if row is None:
            return None
        thread_id = str(row[0])
        self._claims[thread_id] = (owner, hold)
        return Claimed(
            thread_id,
            self._row(row[:5]) if row[1] is not None else None,
            cancel_asked=bool(row[5]),
            api_thread=None if row[6] is None else bool(row[6]),
        )

    def serving_known(self) -> bool:
        """Whether the serve tables are there without asking the database (a backend that
        always makes them)."""
        return False

    def _claiming(self, db: Db) -> AbstractContextManager[Any]:
        """What a claim's statement runs in: SQLite's transaction that takes the write lock
        first (:attr:`CLAIM_LOCK`); on Postgres the statement alone (its row lock)."""
        return db.transaction(lock=self.CLAIM_LOCK) if self.CLAIM_LOCK else nullcontext()

    def _claim_renewal(self, thread_id: str) -> Statement | None:
        """What goes with each acquire and heartbeat of a drive's lease: a claim of this
        store's worker on that run holds for another ``hold`` seconds. Else a step longer
        than the hold, or a drive slow to take its lease, would let another worker claim
        the run mid-drive (it finds the lease live, calls the run busy and requeues it:
        the first worker's own requeue or park is then lost)."""
        claim = self._claims.get(thread_id)
        if claim is None:
            return None
        claimer, hold = claim
        return (
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
            present = self._present_tables(db)
            for table in THREAD_TABLES:
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
        writes = self.WRITES_TABLE
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
        writes = self.WRITES_TABLE
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


@dataclass(frozen=True, slots=True)
class Claimed:
    """A run a worker claimed (:meth:`Store.claim_run`), and what its claim read of it."""

    thread_id: str
    run: RunRow | None
    """Its record (None: the store has none)."""
    cancel_asked: bool
    """Someone asked through the event log to cancel it (``onward cancel`` of a driven run)."""
    api_thread: bool | None
    """It is a thread of ``onward serve`` (None: not known without another read)."""


_CANCEL_OF_QUEUED = (
    "EXISTS (SELECT 1 FROM onward_events e WHERE e.thread_id = onward_queue.thread_id "
    "AND e.kind IN (?) AND e.dedupe IS NULL)"
)
"""Whether a claimed run has a cancel request (as ``EventLog.list`` finds them: by the
index of the kinds of rows without a dedupe key)."""
_API_THREAD_OF_QUEUED = (
    "EXISTS (SELECT 1 FROM onward_threads t WHERE t.thread_id = onward_queue.thread_id)"
)
_RUN_OF_QUEUED = ", ".join(
    f"(SELECT r.{column} FROM onward_runs r WHERE r.thread_id = onward_queue.thread_id)"
    for column in ("created_at", "updated_at", "status", "objective")
)
"""The claimed run's record in a claim's RETURNING (its ``thread_id`` first): a
:class:`RunRow` (NULLs when the store has no record of the run)."""


def _backend_class(backend: Backend) -> type[Store]:
    """The :class:`Store` subclass of ``backend`` (imported on first use: a SQLite store
    never loads psycopg)."""
    if backend is Backend.SQLITE:
        from onward.store.sqlite import SqliteStore

        return SqliteStore
    from onward.store.postgres import PostgresStore

    return PostgresStore
