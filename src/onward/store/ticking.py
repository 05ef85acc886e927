"""One timer thread per process and store for what every drive does now and then.

A drive renews its lease every heartbeat interval, and looks every second whether someone
asked through the store to cancel its run (an API thread's drive: every quarter second).
Each drive had a thread of its own for these (a heartbeat thread, a cancel watcher): a
worker started and joined one or two threads per run, and each look at the store for a
cancel was a statement per drive. Here one daemon thread per store URL runs them all
(:class:`Ticker`): a drive registers its jobs when it begins and takes them back when
it ends; the looks for cancels of every drive on one store are one statement a second
(:class:`CancelLooks`).

A job runs on the ticker's thread: a slow one (a statement waiting out an outage) delays
the others of the same store, which would wait on the same server anyway; another store's
jobs run on that store's ticker. A job's end (:meth:`Job.stop`) waits for a run of it in
progress, so nothing of a drive's runs after the drive took its jobs back. The thread
ends once it has had nothing to do for :data:`LINGER` seconds, and starts again with the
next job.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable

log = logging.getLogger("onward.store")

THREAD_NAME = "onward-heartbeat"
"""The name of every ticker's thread: the process's heartbeat (its leases' and its looks
for cancels; tests tell reads on a timer from a request's own by it)."""

LINGER = 5.0
"""Seconds a ticker's thread waits for a new job before it ends."""


class Job:
    """A job on a :class:`Ticker`: ``run()`` every ``every`` seconds until it returns False
    or :meth:`stop` is called."""

    def __init__(self, run: Callable[[], bool], every: float) -> None:
        self.run, self.every = run, every
        self.stopped = False
        self._running = threading.Lock()

    def stop(self) -> None:
        """No run after this returns (one in progress is waited for)."""
        self.stopped = True
        with self._running:
            pass

    def _tick(self) -> bool:
        """Run once; whether to run again."""
        with self._running:
            if self.stopped:
                return False
            try:
                again = self.run()
            except Exception:  # a job's own error must not end the others
                log.debug("a periodic job failed", exc_info=True)
                again = True
            return again and not self.stopped


class Ticker:
    """A daemon thread running :class:`Job` s at their times."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Job]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def every(self, seconds: float, run: Callable[[], bool]) -> Job:
        """``run()`` every ``seconds`` (the first in ``seconds``) until it returns False or
        the returned job is stopped."""
        job = Job(run, seconds)
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._order), job))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return job

    def _loop(self) -> None:
        while True:
            with self._cond:
                job = self._next()
                if job is None:
                    self._thread = None
                    return
            if job._tick():
                with self._cond:
                    due = time.monotonic() + job.every
                    heapq.heappush(self._heap, (due, next(self._order), job))

    def _next(self) -> Job | None:
        """The next job due (waiting for it); None after :data:`LINGER` s with none."""
        idle_since: float | None = None
        while True:
            while self._heap and self._heap[0][2].stopped:
                heapq.heappop(self._heap)
            now = time.monotonic()
            if self._heap:
                idle_since = None
                due = self._heap[0][0]
                if due <= now:
                    return heapq.heappop(self._heap)[2]
                self._cond.wait(due - now)
                continue
            idle_since = now if idle_since is None else idle_since
            if now - idle_since >= LINGER:
                return None
            self._cond.wait(LINGER - (now - idle_since))


_TICKERS: dict[str, Ticker] = {}
_TICKERS_LOCK = threading.Lock()


def ticker(key: str) -> Ticker:
    """The process's ticker for ``key`` (a store URL)."""
    with _TICKERS_LOCK:
        found = _TICKERS.get(key)
        if found is None:
            found = _TICKERS[key] = Ticker(THREAD_NAME)
        return found


Find = Callable[[Collection[str]], Iterable[str]]
"""Of the threads given, those with a cancel request (a store's read)."""


class CancelLooks:
    """The looks for cancel requests of every drive on one store URL in this process: one
    read (the threads with a request, of all those watched) every ``every`` seconds while
    any drive watches. A drive :meth:`watch` es its thread with its store's read (the
    read of any drive still watching is used: its store is open) and reads
    :meth:`asked`."""

    def __init__(self, ticker: Ticker, every: float) -> None:
        self._ticker, self._every = ticker, every
        self._lock = threading.Lock()
        self._watched: dict[str, tuple[int, Find]] = {}
        self._asked: set[str] = set()
        self._job: Job | None = None

    def watch(self, thread_id: str, find: Find) -> None:
        with self._lock:
            count = self._watched.get(thread_id, (0, find))[0]
            self._watched[thread_id] = (count + 1, find)
            self._asked.discard(thread_id)
            if self._job is None:
                self._job = self._ticker.every(self._every, self._look)

    def unwatch(self, thread_id: str) -> None:
        with self._lock:
            count, find = self._watched.get(thread_id, (1, None))
            if count > 1 and find is not None:
                self._watched[thread_id] = (count - 1, find)
                return
            self._watched.pop(thread_id, None)
            self._asked.discard(thread_id)

    def asked(self, thread_id: str) -> bool:
        """A cancel of the thread was found since it was watched."""
        with self._lock:
            return thread_id in self._asked

    def _look(self) -> bool:
        with self._lock:
            threads = list(self._watched)
            if not threads:
                self._job = None
                return False
            find = self._watched[threads[0]][1]
        found = set(find(threads))
        with self._lock:
            self._asked |= found & set(self._watched)
        return True


_LOOKS: dict[str, CancelLooks] = {}


def cancel_looks(key: str, every: float) -> CancelLooks:
    """The process's looks for cancels of the drives on store ``key`` (its URL)."""
    with _TICKERS_LOCK:
        found = _LOOKS.get(key)
    if found is None:
        made = CancelLooks(ticker(key), every)
        with _TICKERS_LOCK:
            found = _LOOKS.setdefault(key, made)
    return found
