"""The store's own tables without its checkpointer: runs, leases and events, for the
commands that only read them (``onward list``, ``onward timeline``, an empty ``onward
inbox``).

Importing this loads neither LangGraph, LangChain nor pydantic (tests/cli/test_startup.py
checks), so those commands start in about the time Typer and Rich take; the run state's
models cost half a second of imports on their own. Only a store that is set up is read
this way: a missing file, another schema version, or an encrypted store without its key
check yet is opened by :class:`~onward.store.database.Store` first, which creates,
upgrades or refuses it exactly as every other command does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from onward.errors import StoreError, UnknownThreadError
from onward.observe.events import EventLog
from onward.settings import settings
from onward.store.encryption import Cipher, check_key, open_text
from onward.store.leases import LeasePolicy, Leases
from onward.store.migrations import SCHEMA_VERSION
from onward.store.sql import Backend, Db, backend_of, sqlite_path

if TYPE_CHECKING:
    from onward.observe.rows import TimelineRow
    from onward.observe.timeline import TimelineEvent

__all__ = ["FINISHED", "SCHEMA_VERSION", "RunEntry", "Tables", "schema_version"]

FINISHED = ("done", "failed", "cancelled")
"""The ``RunStatus`` values whose ``finished`` is true (a test keeps them equal)."""


@dataclass(frozen=True, slots=True)
class RunEntry:
    """A row of ``onward_runs``; ``status`` is the ``RunStatus`` value, as stored."""

    thread_id: str
    created_at: datetime
    updated_at: datetime
    status: str
    objective: str


class Tables:
    """Reads of one set-up store. Use as a context manager, or call :meth:`close`."""

    def __init__(self, url: str, target: str, db: Db, cipher: Cipher | None) -> None:
        self.url, self.db, self.cipher = url, db, cipher
        self._target = target
        self._timeout = settings().busy_timeout.total_seconds()
        self.leases = Leases(self.connect, LeasePolicy.from_env())
        self.events = EventLog(self.connect, cipher)

    @classmethod
    def open(cls, url: str | None = None) -> Tables:
        """The tables of ``url`` (default: $ONWARD_DB, else the default SQLite file)."""
        url = url or settings().db
        tables = cls._ready(url)
        if tables is None:
            from onward.store.database import Store

            Store(url).close()  # create, upgrade, or refuse (newer schema, wrong key)
            tables = cls._ready(url)
            if tables is None:
                raise StoreError(f"the store {url} could not be set up for reading")
        return tables

    @classmethod
    def _ready(cls, url: str) -> Tables | None:
        """The tables, or None when :class:`Store` must open the store first."""
        backend = backend_of(url)
        target = url
        if backend is Backend.SQLITE:
            path = sqlite_path(url).expanduser().absolute()
            if not path.is_file():
                return None  # Store creates it (or says what is wrong with the path)
            target = str(path)
        cipher = Cipher.from_env()
        db = Db.open(target, timeout=settings().busy_timeout.total_seconds())
        try:
            if schema_version(db) != SCHEMA_VERSION:
                db.close()
                return None
            sealed = db.execute("SELECT value FROM onward_meta WHERE key = 'key_check'").fetchone()
            if sealed is None and cipher is not None:
                db.close()
                return None  # Store records the key check
            check_key(cipher, sealed[0] if sealed else None, db.where)
        except BaseException:
            db.close()
            raise
        return cls(url, target, db, cipher)

    def connect(self) -> Db:
        return Db.open(self._target, timeout=self._timeout)

    def close(self) -> None:
        self.leases.close()
        self.events.close()
        self.db.close()

    def __enter__(self) -> Tables:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -------------------------------------------------------------

    def run(self, thread_id: str) -> RunEntry:
        """The run's row; an unknown thread is the same error every command gives."""
        row = self.db.execute("SELECT * FROM onward_runs WHERE thread_id=?", (thread_id,))
        found = row.fetchone()
        if found is None:
            raise UnknownThreadError(thread_id, self.url)
        return self._entry(found)

    def list_runs(self, limit: int = 100) -> list[RunEntry]:
        """Newest first, as :meth:`Store.list_runs`."""
        rows = self.db.execute(
            "SELECT * FROM onward_runs ORDER BY created_at DESC LIMIT ?", (limit,)
        ).fetchall()
        return [self._entry(r) for r in rows]

    def unfinished_runs(self) -> list[RunEntry]:
        """Runs that may still wait or go on, oldest first, as :meth:`Store.unfinished_runs`."""
        rows = self.db.execute(
            "SELECT * FROM onward_runs WHERE status NOT IN (?, ?, ?) ORDER BY created_at",
            FINISHED,
        ).fetchall()
        return [self._entry(r) for r in rows]

    def stalled_threads(self) -> set[str]:
        """Unfinished runs whose driver hangs or is gone (:meth:`Leases.stopped`), as
        :meth:`Onward.stalled_threads`."""
        finished = {
            r[0]
            for r in self.db.execute(
                "SELECT thread_id FROM onward_runs WHERE status IN (?, ?, ?)", FINISHED
            ).fetchall()
        }
        return {
            tid
            for tid, lease in self.leases.all().items()
            if tid not in finished and self.leases.stopped(lease)
        }

    def _entry(self, r: Sequence[Any]) -> RunEntry:
        return RunEntry(
            thread_id=r[0],
            created_at=datetime.fromisoformat(r[1]),
            updated_at=datetime.fromisoformat(r[2]),
            status=r[3],
            objective=open_text(self.cipher, r[4]),
        )

    # -- events -----------------------------------------------------------

    def timeline(
        self, thread_id: str, *, step: str | None = None, kinds: Sequence[str] = ()
    ) -> list[TimelineEvent]:
        """The run's event log, as :meth:`Onward.timeline`."""
        from onward.observe.timeline import timeline

        self.run(thread_id)
        return timeline(self.events.list(thread_id), step=step, kinds=set(kinds) or None)

    def timeline_rows(
        self, thread_id: str, *, step: str | None = None, kinds: Sequence[str] = ()
    ) -> list[TimelineRow]:
        """:meth:`timeline` as plain rows (no pydantic: ``onward timeline`` prints these)."""
        from onward.observe.rows import timeline_rows

        self.run(thread_id)
        return timeline_rows(self.events.list(thread_id), step=step, kinds=set(kinds) or None)


def schema_version(db: Db) -> int:
    """The store's schema version; 0 for a database onward never set up."""
    if db.postgres:
        exists = db.execute("SELECT to_regclass('onward_meta')").fetchone()[0] is not None
    else:
        exists = (
            db.execute("SELECT name FROM sqlite_master WHERE name='onward_meta'").fetchone()
            is not None
        )
    if not exists:
        return 0
    row = db.execute("SELECT value FROM onward_meta WHERE key='schema_version'").fetchone()
    return int(row[0]) if row else 0
