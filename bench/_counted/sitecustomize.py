"""Counters for ``bench/serve_writes.py``, loaded into an ``onward serve`` process through
``PYTHONPATH`` (Python imports ``sitecustomize`` at start-up). Active only when
``SERVE_WRITES_OUT`` names the file to write at SIGTERM; SIGUSR1 clears the counts (after
a warm-up).

- Postgres: each ``psycopg`` cursor's ``execute`` and ``executemany`` (one call each, an
  ``executemany`` of several rows counted once), by the statement's first words.
- SQLite: each take of onward's write lock of the file (``onward.store.writelock``; a
  thread taking it again while it holds it is not counted) and how long it was held.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from typing import Any

OUT = os.environ.get("SERVE_WRITES_OUT")


def _install() -> None:
    lock = threading.Lock()
    statements: Counter[str] = Counter()
    takes = [0]
    held = [0.0]

    def norm(query: Any) -> str:
        text = query if isinstance(query, str) else str(query)
        return " ".join(text.split())[:70]

    try:
        import psycopg
    except ImportError:
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None:
        real_execute, real_many = psycopg.Cursor.execute, psycopg.Cursor.executemany

        def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                statements[norm(query)] += 1
            return real_execute(self, query, *args, **kwargs)

        def executemany(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                statements[norm(query)] += 1
            return real_many(self, query, *args, **kwargs)

        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]

    import onward.store.writelock as writelock

    depth = threading.local()

    class Timed:
        def __init__(self, real: threading.RLock) -> None:
            self.real = real

        def acquire(self, timeout: float = -1) -> bool:
            mine = self.real.acquire(timeout=timeout)
            if mine:
                if getattr(depth, "n", 0) == 0:
                    depth.since = time.perf_counter()
                    with lock:
                        takes[0] += 1
                depth.n = getattr(depth, "n", 0) + 1
            return mine

        def release(self) -> None:
            depth.n -= 1
            if depth.n == 0:
                spent = time.perf_counter() - depth.since
                with lock:
                    held[0] += spent
            self.real.release()

    real_lock_of = writelock._lock_of
    wrapped: dict[int, Timed] = {}

    def lock_of(path: str) -> Any:
        real = real_lock_of(path)
        with lock:
            return wrapped.setdefault(id(real), Timed(real))

    writelock._lock_of = lock_of  # type: ignore[assignment]

    def clear(*_: Any) -> None:
        with lock:
            statements.clear()
            takes[0], held[0] = 0, 0.0

    def dump(*_: Any) -> None:
        with lock, open(str(OUT), "w") as out:
            json.dump({"statements": statements, "takes": takes[0], "held": held[0]}, out)
        os._exit(0)

    signal.signal(signal.SIGUSR1, clear)
    signal.signal(signal.SIGTERM, dump)


if OUT:
    _install()
