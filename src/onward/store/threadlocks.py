"""Thread locks: one request at a time decides what to do with a thread (start its run,
queue it behind the running one, or replace that one), across every process of a store.

``onward serve --processes N``, or several servers on one store, each keep their own
requests apart with a lock in memory; without one in the store, two runs sent to one
thread at the same moment through two processes both found it free. The lock is held for
the decision only (a few statements), never for a drive: a thread's **lease** is what
keeps its drive to one driver.

* **SQLite** (one host): a byte-range lock of a file beside the database
  (``<db>.threads.lock``, POSIX ``lockf``, one byte per thread at a hashed offset; the
  file stays empty); the kernel lets it go when its process dies, and a taker waits
  without polling. No write to the database: its write lock is what every writer queues
  for.
* **Postgres**: a row of ``onward_thread_locks`` (migration 16), taken with one upsert
  that only replaces a hold past its time, let go with one delete. A holder whose process
  died on this host loses it at once (store/drivers.py), and one whose delete failed (the
  database gone) to a taker in its own process; any other after :data:`LOCK_HOLD`. A
  taker looks again every :data:`LOCK_POLL` seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from pathlib import Path

from onward.errors import StoreError
from onward.model.clock import utcnow
from onward.store.connection import SharedConnection
from onward.store.drivers import drive_ended, gone_here, new_driver_id
from onward.store.sql import Db

log = logging.getLogger("onward.store")

LOCK_HOLD = timedelta(seconds=90)
"""How long a Postgres thread lock holds when its holder neither lets go nor is known
dead: longer than a decision may wait for a run to stop (60 s)."""
LOCK_POLL = 0.02
"""Seconds between looks at a Postgres thread lock another holds."""

ThreadLocks = Callable[[str], AbstractContextManager[None]]
"""thread id → its lock, held for the ``with`` block."""

_TAKE = (
    "INSERT INTO onward_thread_locks VALUES (?, ?, ?) ON CONFLICT (thread_id) DO UPDATE "
    "SET owner = excluded.owner, until = excluded.until WHERE onward_thread_locks.until < ?"
)
_LET_GO = "DELETE FROM onward_thread_locks WHERE thread_id = ? AND owner = ?"


class KeyedLocks:
    """A lock in memory per key, kept only while someone holds or waits for it (a server
    keeps none for every thread it ever saw)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held: dict[Hashable, _Held] = {}

    @contextmanager
    def __call__(self, key: Hashable) -> Iterator[None]:
        with self._guard:
            held = self._held.get(key)
            if held is None:
                held = self._held[key] = _Held()
            held.users += 1
        try:
            with held.lock:
                yield
        finally:
            with self._guard:
                held.users -= 1
                if held.users == 0:
                    del self._held[key]

    def __len__(self) -> int:
        """How many keys are held or waited for now."""
        return len(self._held)


class _Held:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class FileLocks:
    """A SQLite store's thread locks: one byte of ``path`` per thread (at an offset from
    a hash of its id) for the processes, and a lock in memory per offset for this
    process's threads (POSIX locks are a process's). Closing any descriptor of the file
    drops a process's locks: so there is one of these per file in a process
    (:func:`file_locks`), its descriptor open for the process's life."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._offsets = KeyedLocks()

    @contextmanager
    def __call__(self, thread_id: str) -> Iterator[None]:
        offset = _offset(thread_id)
        with self._offsets(offset):
            fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, offset)
            try:
                yield
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, offset)


def _offset(thread_id: str) -> int:
    """Where the thread's byte is: 62 bits of a hash of its id, so no request can pick a
    thread id whose lock is another's (a crafted collision would make it wait on theirs)."""
    digest = hashlib.blake2b(thread_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest) >> 2


_FILES: dict[str, FileLocks] = {}
_FILES_LOCK = threading.Lock()


def file_locks(path: Path) -> FileLocks:
    """The process's :class:`FileLocks` of ``path``."""
    key = os.path.realpath(path)
    with _FILES_LOCK:
        found = _FILES.get(key)
        if found is None:
            found = _FILES[key] = FileLocks(Path(key))
        return found


# A forked child holds none of its parent's locks: it takes its own.
os.register_at_fork(after_in_child=_FILES.clear)


class RowLocks:
    """A Postgres store's thread locks: rows of ``onward_thread_locks``."""

    def __init__(self, db: SharedConnection) -> None:
        self._db = db

    @contextmanager
    def __call__(self, thread_id: str) -> Iterator[None]:
        owner = new_driver_id()
        while not self._take(thread_id, owner):
            time.sleep(LOCK_POLL)
        try:
            yield
        finally:
            self._let_go(thread_id, owner)

    def _let_go(self, thread_id: str, owner: str) -> None:
        """Delete the row; if the database cannot (gone past ``ONWARD_PG_OUTAGE``), the
        decision stands: this process's next taker takes the row at once (it knows its
        holder ended), another process's once its hold runs out."""
        try:
            with self._db.use() as db:
                db.execute(_LET_GO, (thread_id, owner))
        except StoreError as exc:
            drive_ended(owner)
            log.warning("the lock of thread %s stays until it is taken again: %s", thread_id, exc)

    def _take(self, thread_id: str, owner: str) -> bool:
        """True: ``owner`` holds the thread's lock now; False: a live holder has it."""
        with self._db.use() as db:
            for _ in range(3):  # again after its holder let go or was found dead
                if _took(db, thread_id, owner):
                    return True
                row = db.execute(
                    "SELECT owner FROM onward_thread_locks WHERE thread_id = ?", (thread_id,)
                ).fetchone()
                if row is not None and gone_here(row[0]) is None:
                    return False
                if row is not None:  # its process died
                    db.execute(_LET_GO, (thread_id, row[0]))
        return False


def _took(db: Db, thread_id: str, owner: str) -> bool:
    now = utcnow()
    until = (now + LOCK_HOLD).isoformat()
    return bool(db.execute(_TAKE, (thread_id, owner, until, now.isoformat())).rowcount)
