"""What a served run costs beyond the run itself, held by counts (issue 39).

* FastAPI runs a plain ``def`` dependency on a worker thread: the server's dependencies
  (the serving context, the caller, the store's items) read no store, so each is a
  coroutine, and a request makes no worker-thread hop for them.
* Feeds keep their runs' events through a few shared clients: a client of the pool per
  kept batch made the pool grow to a client (a compiled graph, its connections) per
  concurrent run.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi.routing import APIRoute

from onward import Onward
from onward.serve.clients import SHARED, Clients
from onward.serve.replay import keeper
from onward.serve.routes import ROUTERS, info


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


def test_feeds_keep_events_through_a_few_shared_clients(tmp_path: Path) -> None:
    made: list[Onward] = []

    def factory() -> Onward:
        made.append(Onward(f"sqlite:///{tmp_path / 'keep.db'}"))
        return made[-1]

    clients = Clients(factory)
    try:
        keep = keeper(clients)
        for run in range(20):
            keep(f"run-{run}", "thread")([(1, ("metadata", {"run_id": f"run-{run}"}))])
            keep(f"run-{run}", "thread")([(2, ("updates", {"s": run}))])
        assert 1 <= len(made) <= SHARED  # a few clients for every feed, not one per batch
        assert clients.made() == made
        shared = list(made)
        with clients.use() as ow:  # the pool hands out other clients
            assert ow not in shared
            assert [e.seq for e in ow.store.threads.events("run-3", 0)] == [1, 2]
    finally:
        clients.close()
