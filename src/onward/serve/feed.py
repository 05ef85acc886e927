"""A drive's output, handed from its pool thread to the request that streams it.

The drive thread puts; the request awaits on the event loop, so a waiting or streaming
request holds no thread at all (``asyncio.to_thread(queue.get)`` would hold one of the
loop's few default-executor threads for the whole run).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

DONE = object()
"""Put last: the drive has ended."""


class Feed:
    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """``loop``: where the reader waits; None for a background run nobody reads."""
        self._loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, item: Any) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server stops
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    async def get(self) -> Any:
        return await self._queue.get()
