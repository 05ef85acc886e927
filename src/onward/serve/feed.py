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
One writer thread (:class:`Writer`) does the keeping for every feed of the process, so
the drive that puts never waits for the store; it ends when no feed has had anything to
keep for :data:`WRITER_IDLE`. A feed's items go in batches, at most one per
:data:`KEEP_EVERY`: the first item after a pause and the feed's end go at once, the items
of a run's busy stretch (a superstep a millisecond) wait for the next batch, so a long
run costs the store a few statements a second, not one per superstep beside the saver's.
The batches of the feeds that are due at once are kept in one call (their keeps'
:attr:`RunKeep.together`): runs in flight together cost the store one statement for their
events, not one each, and while one call waits for the store, what the other runs put
gathers for the next. While the database is away the keeping waits for it (readers get
the items once they are kept); a drive that gave up on the database tells its feed to
stop keeping (:meth:`Feed.unkept`), so the stream's last items reach its readers at once
(unless the writer holds a batch of that feed, which they follow).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from onward.serve.states import StateAt

log = logging.getLogger(__name__)

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

Batch = list[tuple[int, tuple[str, Any]]]
"""A feed's items, numbered."""
Keep = Callable[[Batch], None]
"""Where a feed's items also go, numbered, in batches (the store), before readers see
them."""
Together = Callable[[list[tuple[Hashable, Batch]]], None]
"""Keeps the batches of several feeds at once, each with its feed's :attr:`RunKeep.key`."""


@dataclass(frozen=True)
class RunKeep:
    """A feed's keep that the writer may join with other feeds' in one call: feeds whose
    keeps share ``together`` and are due at once are kept by one call of it."""

    key: Hashable
    """What ``together`` is given with this feed's batch (its run and thread)."""
    together: Together

    def __call__(self, batch: Batch) -> None:
        self.together([(self.key, batch)])


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
        self._closed = False
        self._writing = False
        """The writer has this feed in hand: what is put waits its turn behind it."""
        self._in_flight = False
        """The writer took a batch of this feed and has not published it yet."""
        self._due = 0.0
        """When the feed's next batch may be kept (the first after a pause: at once)."""
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
        the stream ends at once instead of waiting for it); what waits for its batch goes
        now, unless the writer holds a batch of this feed (it follows that one)."""
        with self._pending_lock:
            self._keep = None
            direct = not self._in_flight
            batch: list[Any] = []
            if direct:
                batch, self._pending, self._writing = self._pending, [], False
        if direct:
            self._publish(batch)
        else:
            WRITER.ready(self)

    def put(self, item: Any) -> None:
        """Hand an item to the readers (with ``keep``: once it is kept, by the writer
        thread, so the drive never waits for the store)."""
        with self._pending_lock:
            if self._closed:
                return
            self._put += item is not DONE
            self._closed = item is DONE
            # Without keeping, and none of what came before still waiting to be kept.
            direct = self._keep is None and not self._writing
            if not direct:
                self._pending.append(item)
                self._writing = True
        if direct:
            self._publish([item])
        else:
            WRITER.ready(self)

    def kept_all(self, timeout: float) -> bool:
        """Wait until every item put so far is kept and readable (the writer keeps what
        waits for its batch at once): before a run's record says it ended, so a reader
        of the store that sees the end has every event (onward.serve.replay)."""
        with self._pending_lock:
            target = self._start + self._put
            hurry = self._hurry = bool(self._pending)
        if hurry:
            WRITER.ready(self)
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

    def _take(self, now: float) -> tuple[list[Any], Keep | None] | float | None:
        """For the writer: this feed's batch and its keep when it is due; else the
        seconds until it is; None when nothing waits (the writer lets go of the feed)."""
        with self._pending_lock:
            if not self._pending:
                self._writing = False
                return None
            urgent = self._closed or self._hurry or self._keep is None
            if not urgent and now < self._due:
                return self._due - now
            batch, self._pending = self._pending, []
            keep, self._hurry = self._keep, False
            self._in_flight = True
            if keep is not None and any(item is not DONE for item in batch):
                self._due = now + KEEP_EVERY
            return batch, keep

    def _taken_published(self, batch: list[Any]) -> None:
        """For the writer: publish what it took (kept, or not to be kept)."""
        self._publish(batch)
        with self._pending_lock:
            self._in_flight = False

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


class Writer:
    """The thread that keeps the items of every feed of the process, in batches: at most
    one per feed per :data:`KEEP_EVERY`, the batches due at once together."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._ready: dict[int, Feed] = {}
        """The feeds with something to keep (or that may have), by id."""
        self._told = 0
        """Counts :meth:`ready` calls: a call while the writer looked is not slept through."""
        self._thread: threading.Thread | None = None

    def ready(self, feed: Feed) -> None:
        """``feed`` has something to keep, or is due sooner (its end, a hurry)."""
        with self._lock:
            self._ready[id(feed)] = feed
            self._told += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="onward-feed")
                self._thread.daemon = True
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._ready:
                    self._wake.wait(WRITER_IDLE)
                if not self._ready:
                    self._thread = None
                    return
                feeds, told = list(self._ready.values()), self._told
            try:
                taken, soonest = self._due(feeds)
                if taken:
                    _keep_and_publish(taken)
                    continue
            except Exception:  # every feed's writer: one feed's fault must not end it
                log.exception("a stream feed's batch could not be kept or handed over")
                time.sleep(KEEP_EVERY)  # not a busy loop if it comes again
                continue
            with self._lock:
                if self._told == told:  # nothing new since the look: wait for the soonest
                    self._wake.wait(soonest)

    def _due(self, feeds: list[Feed]) -> tuple[list[tuple[Feed, list[Any], Keep | None]], float]:
        """The batches of the feeds that are due; the seconds until the next one is."""
        now = time.monotonic()
        taken: list[tuple[Feed, list[Any], Keep | None]] = []
        soonest = WRITER_IDLE
        for feed in feeds:
            try:
                got = feed._take(now)
            except Exception:  # this feed's fault: the others go on (it, at its next put)
                log.exception("a stream feed's items could not be taken to be kept")
                with self._lock:
                    self._ready.pop(id(feed), None)
                continue
            if got is None:
                with self._lock:
                    if not feed._writing:  # (a put since sets it again, and says so)
                        self._ready.pop(id(feed), None)
            elif isinstance(got, float):
                soonest = min(soonest, got)
            else:
                taken.append((feed, *got))
        return taken, soonest


def _keep_and_publish(taken: list[tuple[Feed, list[Any], Keep | None]]) -> None:
    """Keep the batches (those of keeps that share a ``together`` in one call of it),
    then publish them; a store hiccup costs the copy only."""
    joined: dict[int, tuple[Together, list[tuple[Hashable, Batch]]]] = {}
    alone: list[tuple[Keep, Batch]] = []
    for feed, batch, keep in taken:
        items = [item for item in batch if item is not DONE]
        if not items or keep is None:
            continue
        first = feed.last + 1  # only the writer publishes a kept feed: the numbers hold
        numbered = [(first + i, item) for i, item in enumerate(items)]
        if isinstance(keep, RunKeep):
            joined.setdefault(id(keep.together), (keep.together, []))[1].append(
                (keep.key, numbered)
            )
        else:
            alone.append((keep, numbered))
    for together, parts in joined.values():
        with contextlib.suppress(Exception):
            together(parts)
    for keep, numbered in alone:
        with contextlib.suppress(Exception):
            keep(numbered)
    for feed, batch, _keep in taken:
        try:
            feed._taken_published(batch)
        except Exception:  # this feed's readers: the others' get theirs
            log.exception("a stream feed's kept items could not be handed over")


WRITER = Writer()
"""The process's feed writer."""
