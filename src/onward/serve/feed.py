"""A run's output, handed from its drive's pool thread to whoever streams or joins it.

The drive thread puts; readers await on the event loop, so a waiting or streaming request
holds no thread at all (``asyncio.to_thread(queue.get)`` would hold one of the loop's few
default-executor threads for the whole run). Every item gets a sequence number, its SSE
event id: the feed keeps what it was given, so a reader that dropped its stream (or a
reloaded page) joins again and gets what it missed after the last id it saw
(``Last-Event-ID``), and several readers can follow one run.

A feed with a ``keep`` callback hands it every item, numbered, before any reader sees
it: the server keeps them in the store, so an id a client saw is never lost with the
process, and a run driven again after a restart goes on numbering after them (``start``).
A writer thread does the keeping, a batch per store transaction, so the drive that puts
never waits for the store; it waits a while for the next item (:data:`WRITER_IDLE`) and
ends at the feed's end. It keeps at most one batch per :data:`KEEP_EVERY`: the first item
after a pause and the feed's end go at once, the items of a run's busy stretch (a
superstep a millisecond) wait for the next batch, so a long run costs the store a few
transactions a second, not one per superstep beside the saver's. While the database is
away the keeping waits for it (readers get the items once they are kept); a drive that
gave up on the database tells its feed to stop keeping (:meth:`Feed.unkept`), so the
stream's last items reach its readers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from onward.serve.states import StateAt

DONE = object()
"""Put last: the drive has ended."""
KEEP_ITEMS = 256
"""Values chunks older than the newest ones keep their number and their checkpoint
(:class:`~onward.serve.states.StateAt`), not the graph's chunk: a long run streams one
per superstep. A reader that resumes (or lags) past them gets each made from its
checkpoint; a values chunk without one keeps its number only. Every other item is kept."""

WRITER_IDLE = 1.0
"""Seconds a feed's writer waits for the next item before its thread ends: one thread
keeps a run's items, not one started per batch."""

KEEP_EVERY = 0.05
"""Least seconds from one kept batch to the next (the first item after a pause, and the
feed's end, are kept at once): what a reader sees of a busy run comes at most this late."""

Keep = Callable[[list[tuple[int, tuple[str, Any]]]], None]
"""Where a feed's items also go, numbered, in batches (the store), before readers see
them."""


class Feed:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        start: int = 0,
        keep: Keep | None = None,
    ) -> None:
        """``loop`` is accepted for callers that name where they read; readers may wait
        on any loop. ``start``: the number before this feed's first item (a run driven
        again goes on after the ids its earlier drive gave out)."""
        self._items: list[tuple[str, Any] | None] = []
        self._start = start
        self._keep = keep
        self._done = False
        self._lock = threading.Lock()
        self._grew = threading.Condition(self._lock)
        self._hurry = False
        self._pending: list[Any] = []
        self._pending_lock = threading.Lock()
        self._more = threading.Condition(self._pending_lock)
        self._closed = False
        self._writer: threading.Thread | None = None
        self._published = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._read = 0
        self._put = 0

    @property
    def done(self) -> bool:
        return self._done

    @property
    def start(self) -> int:
        return self._start

    @property
    def last(self) -> int:
        """The number of the newest item put so far."""
        with self._lock:
            return self._start + len(self._items)

    @property
    def next_number(self) -> int:
        """The number the next item put gets (its SSE event id)."""
        with self._pending_lock:
            return self._start + self._put + 1

    def unkept(self) -> None:
        """Items put from now on go to the readers without being kept (the store is gone:
        the stream ends at once instead of waiting for it)."""
        with self._pending_lock:
            self._keep = None
            self._more.notify()  # what waits for its batch goes now

    def put(self, item: Any) -> None:
        """Hand an item to the readers (with ``keep``: once it is kept, by the feed's
        writer thread, so the drive never waits for the store)."""
        with self._pending_lock:
            if self._closed:
                return
            self._put += item is not DONE
            self._closed = item is DONE
            # Without keeping, and none of what came before still waiting to be kept.
            direct = self._keep is None and self._writer is None
            if not direct:
                self._pending.append(item)
                if self._writer is None:  # none waiting: one starts (and ends when idle)
                    self._writer = threading.Thread(target=self._write, name="onward-feed")
                    self._writer.daemon = True
                    self._writer.start()
                elif len(self._pending) == 1 or item is DONE:
                    self._more.notify()  # it waits for an item, or for the end
        if direct:
            self._publish([item])

    def kept_all(self, timeout: float) -> bool:
        """Wait until every item put so far is kept and readable (the writer keeps what
        waits for its batch at once): before a run's record says it ended, so a reader
        of the store that sees the end has every event (onward.serve.replay)."""
        with self._pending_lock:
            target = self._start + self._put
            if self._pending:
                self._hurry = True
                self._more.notify()
        deadline = time.monotonic() + timeout
        with self._grew:
            while self._start + len(self._items) < target and not self._done:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._grew.wait(left)
        return True

    def wait_done(self, timeout: float) -> bool:
        """Wait until :data:`DONE` reached the readers (what was put before is readable)."""
        return self._published.wait(timeout)

    def _write(self) -> None:
        """Keep what was put, in batches (one store transaction each, at most one per
        :data:`KEEP_EVERY`), then publish it."""
        due = 0.0  # when the next batch may be kept
        while True:
            with self._more:
                if not self._pending and not self._closed:
                    self._more.wait(WRITER_IDLE)  # the drive's next item, mostly
                while self._pending and not (self._closed or self._hurry or self._keep is None):
                    left = due - time.monotonic()
                    if left <= 0:
                        break
                    self._more.wait(left)  # more items join this batch; the end ends it
                if not self._pending:
                    self._writer = None
                    return
                batch, self._pending = self._pending, []
                keep, self._hurry = self._keep, False
            items = [it for it in batch if it is not DONE]
            if items and keep is not None:
                due = time.monotonic() + KEEP_EVERY
                first = self.last + 1  # only this thread publishes: the numbers hold
                with contextlib.suppress(Exception):  # a store hiccup costs the copy only
                    keep([(first + i, it) for i, it in enumerate(items)])
            self._publish(batch)

    def _publish(self, batch: list[Any]) -> None:
        with self._lock:
            for item in batch:
                if self._done:
                    break
                if item is DONE:
                    self._done = True
                    self._published.set()
                    continue
                self._items.append(item)
                self._forget(len(self._items) - KEEP_ITEMS - 1)
            waiters, self._waiters = self._waiters, []
            self._grew.notify_all()
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server stops
                loop.call_soon_threadsafe(event.set)

    def _forget(self, old: int) -> None:
        """Drop the chunk of the values item at index ``old`` (under the lock)."""
        item = self._items[old] if old >= 0 else None
        if item is None or item[0] != "values":
            return
        data = item[1]
        kept = data.dropped() if isinstance(data, StateAt) else None
        self._items[old] = ("values", kept) if kept is not None else None

    def items(self, after: int = 0) -> list[tuple[int, tuple[str, Any]]]:
        """What was put so far after the item numbered ``after`` (numbers start at
        ``start + 1``)."""
        skip = max(0, after - self._start)
        with self._lock:
            items = enumerate(self._items[skip:])
            return [(self._start + skip + i + 1, it) for i, it in items if it is not None]

    async def follow(self, after: int = 0) -> AsyncIterator[tuple[int, tuple[str, Any]]]:
        """Every item after number ``after``, as it comes, until the drive ends."""
        async for batch in self.follow_batches(after):
            for item in batch:
                yield item

    async def follow_batches(
        self, after: int = 0
    ) -> AsyncIterator[list[tuple[int, tuple[str, Any]]]]:
        """:meth:`follow`, the items that are there together in one list (a stream sends
        them in one write)."""
        loop = asyncio.get_running_loop()
        seen = max(0, after - self._start)
        while True:
            event = asyncio.Event()
            with self._lock:
                fresh = self._items[seen:]
                finished = self._done
                if not fresh and not finished:
                    self._waiters.append((loop, event))
            if fresh:
                first, seen = seen, seen + len(fresh)
                batch = [
                    (self._start + first + i + 1, it)
                    for i, it in enumerate(fresh)
                    if it is not None
                ]
                if batch:
                    yield batch
            elif finished:
                return
            else:
                await event.wait()

    async def get(self) -> Any:
        """The next item not read by :meth:`get` yet, or :data:`DONE` (one reader)."""
        loop = asyncio.get_running_loop()
        while True:
            event = asyncio.Event()
            with self._lock:
                while self._read < len(self._items):
                    self._read += 1
                    item = self._items[self._read - 1]
                    if item is not None:
                        return item
                if self._done:
                    return DONE
                self._waiters.append((loop, event))
            await event.wait()
