"""The runs this server has in hand: driving, starting, or queued behind a busy thread.

Each has a :class:`~onward.serve.feed.Feed` (its output, kept for joins and resumed
streams) and, while it is driven, the client its drive uses. Cancelling a driven run sets
that client's drain flag: the drive stops before its next node starts (the last superstep
is saved, no effect is cut in half: a step that already runs finishes, its result is
kept and verified), as when the server stops. A run another process drives is cancelled
through the store instead (:mod:`onward.client.stopping`). The feeds of finished runs
are kept for a while (the newest :data:`KEEP_FEEDS`), so a client that lost its stream
can still read it to the end (and from the store after that: :mod:`~onward.serve.replay`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from onward.serve.feed import Feed, Keep
from onward.store.runs import CancelAction
from onward.store.threadlocks import KeyedLocks

__all__ = ["Active", "CancelAction", "Control"]

if TYPE_CHECKING:
    from onward.client import Onward

KEEP_FEEDS = 256
"""Feeds of finished runs kept in memory for joins (oldest dropped first)."""


@dataclass
class Active:
    run_id: str
    thread_id: str
    feed: Feed
    queued: bool = False
    client: Onward | None = None
    cancel: CancelAction | None = None
    stopped: threading.Event = field(default_factory=threading.Event)


KeepEvents = Callable[[str, str], Keep]
"""(run id, thread id) → where that run's feed keeps its items (the store)."""


class Control:
    def __init__(self, keep: KeepEvents | None = None) -> None:
        """``keep``: feeds hand their items to it too (the store), so streams can be
        joined again after a restart or through another server on the same store."""
        self._keep = keep
        self._lock = threading.RLock()
        self._active: dict[str, Active] = {}
        self._feeds: OrderedDict[str, Feed] = OrderedDict()
        self._threads = KeyedLocks()
        self.stopping = False

    @contextmanager
    def thread_lock(self, thread_id: str) -> Iterator[None]:
        """Held while a request decides what to do with a thread (start, queue, replace
        its run), so two requests cannot both find it free. The lock lives while someone
        holds or waits for it: the server keeps none per thread it ever saw."""
        with self._threads(thread_id):
            yield

    def sizes(self) -> dict[str, int]:
        """How many runs, feeds and thread locks the server holds now."""
        with self._lock:
            return {
                "active": len(self._active),
                "feeds": len(self._feeds),
                "thread_locks": len(self._threads),
            }

    def open(
        self,
        run_id: str,
        thread_id: str,
        *,
        queued: bool = False,
        start: int = 0,
        attempt: int = 1,
    ) -> Active:
        """A run the server takes on (queued: waiting for its thread); its feed starts
        with the stream's ``metadata`` event. ``start``: the last event id an earlier
        drive of the run gave out (``attempt``: this drive's number, as LangGraph
        Server's metadata counts them)."""
        keep = self._keep(run_id, thread_id) if self._keep is not None else None
        feed = Feed(start=start, keep=keep)
        meta = {"run_id": run_id, "thread_id": thread_id, "attempt": attempt}
        feed.put(("metadata", meta))
        active = Active(run_id, thread_id, feed, queued=queued)
        with self._lock:
            self._active[run_id] = active
            self._feeds[run_id] = feed
            self._trim()
        return active

    def _trim(self) -> None:
        """Drop the oldest finished runs' feeds past :data:`KEEP_FEEDS` (under the lock)."""
        while len(self._feeds) > KEEP_FEEDS + len(self._active):
            oldest = next(iter(self._feeds))
            if oldest in self._active:
                self._feeds.move_to_end(oldest)
                continue
            del self._feeds[oldest]

    def get(self, run_id: str) -> Active | None:
        with self._lock:
            return self._active.get(run_id)

    def feed(self, run_id: str) -> Feed | None:
        with self._lock:
            return self._feeds.get(run_id)

    def on_thread(self, thread_id: str) -> list[Active]:
        """The thread's runs in hand, in the order they were taken on."""
        with self._lock:
            return [a for a in self._active.values() if a.thread_id == thread_id]

    def all(self) -> list[Active]:
        with self._lock:
            return list(self._active.values())

    def attach(self, run_id: str, client: Onward) -> bool:
        """The run's drive begins on ``client``; False when it was cancelled before."""
        with self._lock:
            active = self._active.get(run_id)
            if active is None or active.cancel is not None:
                return False
            active.queued = False
            active.client = client
            return True

    def cancel(self, run_id: str, action: CancelAction) -> Active | None:
        """Ask a run to stop (its drive stops before its next node); None when the server
        has no such run in hand."""
        with self._lock:
            active = self._active.get(run_id)
            if active is None:
                return None
            if active.cancel is None or action is CancelAction.ROLLBACK:
                active.cancel = action
            if active.client is not None:
                active.client.deps.cancelling.set()  # produced steps are still verified
                active.client.deps.draining.set()
            return active

    def close(self, run_id: str) -> Active | None:
        """The run is over here (drive ended, queued run cancelled or failed to start)."""
        with self._lock:
            active = self._active.pop(run_id, None)
            self._trim()
        if active is None:
            return None
        if active.client is not None and not self.stopping:
            active.client.deps.draining.clear()  # the client serves other runs next
            active.client.deps.cancelling.clear()
        active.stopped.set()
        return active
