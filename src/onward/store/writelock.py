"""The writers of one SQLite file in this process take the process's write lock of that
file before SQLite's own.

SQLite lets one writer in at a time. A writer that finds the file locked sleeps in
SQLite's busy handler (1, 2, 5, 10, … 100 ms) and looks again, however soon the lock was
let go: at 50 served users a third of the server's sleeps were there, drives holding a run
slot asleep while nobody held the file. A writer that waits on this lock instead is woken
as soon as the one before it is done.

The wait is bounded (:data:`WRITE_WAIT`): past it the writer goes on to SQLite's own
waiting, as before, so a lock held across a wait for something else can never deadlock.
SQLite's locks stay what keeps the file consistent, and what orders the writers of other
processes.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

WRITE_WAIT = 0.25
"""Longest a writer waits for the lock (seconds) before it goes on to SQLite's own wait."""

_WRITES = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE|WITH)\b", re.IGNORECASE)

_LOCKS: dict[str, threading.RLock] = {}
"""The lock of each file, by its real path."""
_BY_PATH: dict[str, threading.RLock] = {}
"""The same locks by the paths writers gave (a real path costs a ``lstat`` per part)."""
_LOCKS_LOCK = threading.Lock()


def writes(sql: str) -> bool:
    """The statement may write (a ``WITH`` may: it is counted as one)."""
    return _WRITES.match(sql) is not None


def _lock_of(path: str) -> threading.RLock:
    found = _BY_PATH.get(path)
    if found is not None:
        return found
    key = os.path.realpath(path)  # a path's components looked up: once per path given
    with _LOCKS_LOCK:
        found = _LOCKS.get(key)
        if found is None:
            found = _LOCKS[key] = threading.RLock()
        _BY_PATH[path] = found
        return found


@contextmanager
def writing(path: str | None) -> Iterator[None]:
    """Hold this process's write lock of the SQLite file at ``path`` (None: a database in
    memory, no lock); a thread that holds it may take it again."""
    if path is None:
        yield
        return
    lock = _lock_of(path)
    mine = lock.acquire(timeout=WRITE_WAIT)
    try:
        yield
    finally:
        if mine:
            lock.release()
