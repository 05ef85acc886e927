"""What a node leaves behind on its own thread, collected for one write at its end.

A node runs on one thread. While it runs, the node wrapper (``graph/build.py``) collects
the progress events it emits and the artifact bodies it references, then writes both to
the event log in one transaction before the node's checkpoint writes commit.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class PerThread(Generic[T]):
    """A list per thread, active only inside :meth:`collecting`."""

    def __init__(self) -> None:
        self._local = threading.local()

    def collecting(self) -> Collecting[T]:
        return Collecting(self._local)

    def add(self, item: T) -> bool:
        """Keep ``item`` for the collector of this thread; False when none is active."""
        items: list[T] | None = getattr(self._local, "items", None)
        if items is None:
            return False
        items.append(item)
        return True


class Collecting(Generic[T]):
    """:meth:`PerThread.collecting`: a new list for this thread while inside, the previous
    one (or none) after. A class rather than a ``@contextmanager`` generator: every node
    enters two (events, artifact references), and the generator's machinery cost more
    than the collecting."""

    __slots__ = ("_local", "_previous")
    _previous: list[T] | None

    def __init__(self, local: threading.local) -> None:
        self._local = local

    def __enter__(self) -> list[T]:
        self._previous = getattr(self._local, "items", None)
        items: list[T] = []
        self._local.items = items
        return items

    def __exit__(self, *_: object) -> None:  # restored on an error too, never suppressed
        self._local.items = self._previous
