"""One SQLite connection per store component, shared by the threads that use it.

Nodes run on several threads and log, claim effects or consult breakers after every
step; a connection per call cost more than the statement. Calls take turns on the
lock; a transaction a failed call left open is rolled back, so the next caller starts
clean.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class SharedConnection:
    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def use(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
