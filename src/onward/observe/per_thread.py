"""What a node leaves behind on its own thread, collected for one write at its end.

A node runs on one thread. While it runs, the node wrapper (``graph/build.py``) collects
the progress events it emits and the artifact bodies it references, then writes both to
the event log in one transaction before the node's checkpoint writes commit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class PerThread(Generic[T]):
    """A list per thread, active only inside :meth:`collecting`."""

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def collecting(self) -> Iterator[list[T]]:
        previous = getattr(self._local, "items", None)
        self._local.items = []
        try:
            yield self._local.items
        finally:
            self._local.items = previous

    def add(self, item: T) -> bool:
        """Keep ``item`` for the collector of this thread; False when none is active."""
        items: list[T] | None = getattr(self._local, "items", None)
        if items is None:
            return False
        items.append(item)
        return True
