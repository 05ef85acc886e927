"""A run's output, handed from its drive's pool thread to whoever streams or joins it.

The drive thread puts; readers await on the event loop, so a waiting or streaming request
holds no thread at all (``asyncio.to_thread(queue.get)`` would hold one of the loop's few
default-executor threads for the whole run). Every item gets a sequence number, its SSE
event id: the feed keeps what it was given, so a reader that dropped its stream (or a
reloaded page) joins again and gets what it missed after the last id it saw
(``Last-Event-ID``), and several readers can follow one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

DONE = object()
"""Put last: the drive has ended."""
KEEP_ITEMS = 256
"""Values chunks a feed keeps whole past the newest ones keep their number but not their
data: a long run streams one per superstep, each the whole state. A reader that resumes
(or lags) past them gets the newer values, which is what a values stream needs; every
other item is kept."""


class Feed:
    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """``loop`` is accepted for callers that name where they read; readers may wait
        on any loop."""
        self._items: list[tuple[str, Any] | None] = []
        self._done = False
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._read = 0

    @property
    def done(self) -> bool:
        return self._done

    def put(self, item: Any) -> None:
        with self._lock:
            if self._done:
                return
            if item is DONE:
                self._done = True
            else:
                self._items.append(item)
                old = len(self._items) - KEEP_ITEMS - 1
                if old >= 0 and (self._items[old] or ("",))[0] == "values":
                    self._items[old] = None
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server stops
                loop.call_soon_threadsafe(event.set)

    def items(self, after: int = 0) -> list[tuple[int, tuple[str, Any]]]:
        """What was put so far after the item numbered ``after`` (numbers start at 1)."""
        with self._lock:
            items = enumerate(self._items[after:])
            return [(after + i + 1, item) for i, item in items if item is not None]

    async def follow(self, after: int = 0) -> AsyncIterator[tuple[int, tuple[str, Any]]]:
        """Every item after number ``after``, as it comes, until the drive ends."""
        loop = asyncio.get_running_loop()
        seen = after
        while True:
            event = asyncio.Event()
            with self._lock:
                fresh = [(seen + i + 1, it) for i, it in enumerate(self._items[seen:])]
                finished = self._done
                if not fresh and not finished:
                    self._waiters.append((loop, event))
            for number, item in fresh:
                seen = number
                if item is not None:
                    yield number, item
            if finished and not fresh:
                return
            if not fresh:
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
