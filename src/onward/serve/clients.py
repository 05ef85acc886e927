"""The server's :class:`~onward.Onward` clients: one per thread at a time, made as needed.

A client holds store connections and a compiled graph, so the server keeps the ones it
made and hands a free one to each request or drive; stopping drains and closes them all.
The one freed last goes out first: the clients a busy moment made beyond the usual
concurrency rest, instead of each taking its turn and opening, on its first request of
every kind, the connections and the graph that kind needs.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from onward.checkpointing.values import CheckpointValues
from onward.client import Onward

SHARED = 16
"""Clients :meth:`Clients.shared` spreads its callers over."""


def sharing(make: Callable[[Onward | None], Onward]) -> Clients:
    """A pool whose clients run one compiled graph: ``make(first)`` makes a client that
    runs ``first``'s graph (``Onward(graph_of=first)``; None: the pool's first client,
    which compiles it). A concurrent run holds a client for its length, so a busy moment
    makes as many: each compiling the graph again cost several milliseconds of CPU."""
    pool = Clients(lambda: make(pool.first()))
    return pool


class Clients:
    """A pool of :class:`Onward` clients (each one is used by one thread at a time)."""

    def __init__(self, factory: Callable[[], Onward]) -> None:
        self._factory = factory
        self._free: deque[Onward] = deque()  # append and pop are atomic
        self._all: list[Onward] = []
        self._lock = threading.Lock()
        self._kept: tuple[CheckpointValues | None] | None = None
        self._shared: dict[int, Onward] = {}

    @contextmanager
    def use(self) -> Iterator[Onward]:
        try:
            client = self._free.pop()  # the one freed last
        except IndexError:
            client = self._factory()
            with self._lock:
                self._all.append(client)
        try:
            yield client
        finally:
            self._free.append(client)

    def shared(self, key: str = "") -> Onward:
        """One of :data:`SHARED` clients (by ``key``), made once and never handed out by
        :meth:`use`, for what only calls its store (whose calls are safe from any thread:
        SQLite's connections take turns on a lock, Postgres borrows from the pool): the
        feeds keeping their runs' events. Every feed taking a client of the pool for each
        batch made the pool grow to a client (a compiled graph, its connections) per
        concurrent run; one client for all made each feed's first event wait for the
        others' batches on SQLite."""
        slot = hash(key) % SHARED
        with self._lock:
            found = self._shared.get(slot)
            if found is None:
                found = self._shared[slot] = self._factory()
                self._all.append(found)
            return found

    def first(self) -> Onward | None:
        """The first client this pool made (None before any). Without the pool's lock:
        :meth:`shared` makes a client holding it (a list's first item is read whole)."""
        made = self._all
        return made[0] if made else None

    def made(self) -> list[Onward]:
        """The clients made so far."""
        with self._lock:
            return list(self._all)

    def kept_known(self) -> bool:
        """Whether :meth:`kept` answers without opening a client (it did once)."""
        return self._kept is not None

    def kept(self) -> CheckpointValues | None:
        """The values the clients' store keeps per checkpoint (onward.serve.encoded)."""
        if self._kept is None:
            with self.use() as ow:
                found = getattr(ow.store.saver, "values", None)
                self._kept = (found if isinstance(found, CheckpointValues) else None,)
        return self._kept[0]

    def drain(self) -> None:
        """Ask every drive to stop before its next node."""
        with self._lock:
            for client in self._all:
                client.deps.draining.set()

    def close(self) -> None:
        with self._lock:
            for client in self._all:
                client.close()
            self._all.clear()
            self._shared.clear()
