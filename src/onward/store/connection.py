"""One connection per store component, shared by the threads that use it.

Nodes run on several threads and log, claim effects or consult breakers after every
step; a connection per call cost more than the statement. Calls take turns on the
lock. A connection the server dropped (a Postgres restart) is replaced on next use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from onward.errors import StoreError
from onward.store.sql import Db


class SharedConnection:
    def __init__(self, connect: Callable[[], Db]) -> None:
        self._connect = connect
        self._conn: Db | None = None
        self._lock = threading.Lock()

    @contextmanager
    def use(self) -> Iterator[Db]:
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
            try:
                yield self._conn
            except StoreError:
                if self._conn.postgres and self._conn.raw.closed:
                    self._conn = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
