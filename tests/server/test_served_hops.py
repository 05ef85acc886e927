"""What a served run costs beyond the run itself, held by counts (issue 39).

* FastAPI runs a plain ``def`` dependency on a worker thread: the server's dependencies
  (the serving context, the caller, the store's items) read no store, so each is a
  coroutine, and a request makes no worker-thread hop for them.
* Feeds keep their runs' events through one shared client: a client of the pool per
  kept batch made the pool grow to a client (a compiled graph, its connections) per
  concurrent run.
* A streamed values event of a small state is made on the event loop, not on a worker
  thread and back (the JSON costs about what the hop did); a large one, or one read
  from its checkpoint, still goes to a worker thread.
"""

from __future__ import annotations

import asyncio
import inspect
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute

from onward import Onward
from onward.serve import states
from onward.serve.clients import Clients
from onward.serve.replay import keeper
from onward.serve.routes import ROUTERS, info
from onward.serve.states import StateAt
from tests.support.serve_long import noop_chain


def _dependencies(dependant: Any) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _dependencies(sub)


def test_every_dependency_of_every_route_is_a_coroutine() -> None:
    routers = [*ROUTERS, info.schema]
    routes = [r for router in routers for r in router.routes if isinstance(r, APIRoute)]
    assert len(routes) > 50
    calls = {call for r in routes for call in _dependencies(r.dependant)}
    assert calls  # the context, the caller, the items
    sync = sorted(
        getattr(c, "__qualname__", repr(c)) for c in calls if not inspect.iscoroutinefunction(c)
    )
    assert sync == [], f"dependencies run on a worker thread per request: {sync}"


def test_feeds_keep_events_through_one_shared_client(tmp_path: Path) -> None:
    made: list[Onward] = []

    def factory() -> Onward:
        made.append(Onward(f"sqlite:///{tmp_path / 'keep.db'}"))
        return made[-1]

    clients = Clients(factory)
    try:
        keep = keeper(clients)
        for run in range(5):
            keep(f"run-{run}", "thread")([(1, ("metadata", {"run_id": f"run-{run}"}))])
            keep(f"run-{run}", "thread")([(2, ("updates", {"s": run}))])
        assert len(made) == 1  # one client for every feed, not one per batch
        assert clients.made() == made
        with clients.use() as ow:  # the pool hands out other clients
            assert ow is not made[0]
            assert [e.seq for e in ow.store.threads.events("run-3", 0)] == [1, 2]
    finally:
        clients.close()


@pytest.fixture
def streamed() -> Iterator[tuple[Clients, list[Any]]]:
    """A pool of clients and a 3-step run's values chunks, as a drive streams them."""
    with tempfile.TemporaryDirectory() as tmp:
        clients = Clients(lambda: Onward(f"sqlite:///{tmp}/o.db"))
        try:
            with clients.use() as ow:
                plan = noop_chain(3)["plan"]
                thread_id = ow.start("three", plan=plan)
                chunks = [
                    StateAt(thread_id, data)
                    for mode, data in ow.stream_modes(thread_id, ["values"])
                    if mode == "values"
                ]
            yield clients, chunks
        finally:
            clients.close()


def test_a_small_live_state_is_made_without_a_worker_thread(
    streamed: tuple[Clients, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    clients, chunks = streamed
    clients.kept()  # known once a server has answered anything
    hops: list[Any] = []
    real = asyncio.to_thread

    async def counted(fn: Any, *args: Any) -> Any:
        hops.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    one = states.resolver(clients)

    async def made() -> list[Any]:
        return [await one(chunk) for chunk in chunks]

    small = asyncio.run(made())
    assert hops == []
    assert small == [states.resolve(clients, c) for c in chunks]  # the same bytes

    monkeypatch.setattr(states, "INLINE_STEPS", 2)  # a plan of 3 steps is large now
    large = asyncio.run(made())
    assert len(hops) == len(chunks)
    assert large == small
