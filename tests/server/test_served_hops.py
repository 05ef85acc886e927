"""What a served run costs beyond the run itself, held by counts (issue 39).

* FastAPI runs a plain ``def`` dependency on a worker thread: the server's dependencies
  (the serving context, the caller, the store's items) read no store, so each is a
  coroutine, and a request makes no worker-thread hop for them.
* Feeds keep their runs' events through a few shared clients: a client of the pool per
  kept batch made the pool grow to a client (a compiled graph, its connections) per
  concurrent run.
* A pool's clients run one compiled graph (each with its own store's saver): a run
  holds a client for its length, so a busy moment makes a client per concurrent run, and
  compiling the graph was most of what making one cost.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Match

from onward import Onward
from onward.serve.clients import SHARED, Clients, sharing
from onward.serve.replay import keeper
from onward.serve.routes import ROUTERS, info


def _dependencies(dependant: Any) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _dependencies(sub)


def _coroutine(call: Any) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one (FastAPI's security
    schemes), as FastAPI tells them."""
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(type(call).__call__)


def test_every_dependency_of_every_route_is_a_coroutine() -> None:
    routers = [*ROUTERS, info.schema]
    routes = [r for router in routers for r in router.routes if isinstance(r, APIRoute)]
    assert len(routes) > 50
    calls = {call for r in routes for call in _dependencies(r.dependant)}
    assert calls  # the context, the caller, the items
    sync = sorted(getattr(c, "__qualname__", repr(c)) for c in calls if not _coroutine(c))
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


def test_a_pool_compiles_the_graph_once_and_each_client_saves_through_its_own_store(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onward.client import facade

    compiled: list[Any] = []
    real = facade.compile_graph

    def compile_graph(*args: Any, **kwargs: Any) -> Any:
        compiled.append(real(*args, **kwargs))
        return compiled[-1]

    monkeypatch.setattr(facade, "compile_graph", compile_graph)
    pool = sharing(lambda first: Onward(db_url, model=None, graph_of=first))
    try:
        # A feed's shared client, made first (under the pool's lock), compiles it.
        made = threading.Thread(target=pool.shared, args=("feed",), daemon=True)
        made.start()
        made.join(60)
        assert not made.is_alive(), "making the pool's first client waits for itself"
        with ExitStack() as held:  # five clients at once: the pool makes five
            clients = [held.enter_context(pool.use()) for _ in range(5)]
            assert len({id(ow) for ow in clients}) == 5
            for ow in clients:
                assert ow.graph.checkpointer is ow.store.saver
            assert len(compiled) == 1
            first, last = clients[0], clients[-1]
            assert last.graph.nodes.keys() == first.graph.nodes.keys()
            plan = {"steps": [{"id": "a", "tool": "noop", "args": {"value": 1}}]}
            view = last.run("one step", plan=plan)  # driven on a client that did not compile
            assert view.status.value == "done"
            assert first.get(view.thread_id).status.value == "done"
    finally:
        pool.close()


def _router_name(router: Any) -> str:
    return str(router.routes[0].endpoint.__module__).rsplit(".", 1)[-1]


def test_routers_that_answer_a_common_request_keep_their_order_and_hot_ones_come_first() -> None:
    """A request is matched against the routes in :data:`ROUTERS`' order: the first that
    fits answers it, or, if only its path fits, the first such route's ``Allow`` comes back
    with the 405. So the routers are free to move where no request (any method, each
    route's path with its parameters set to every literal segment) fits two of them; where
    one does, they keep the order they always had. The routers a chat client calls on
    every run come first."""
    order = [_router_name(r) for r in ROUTERS]
    routes = [(_router_name(r), rt) for r in ROUTERS for rt in r.routes if isinstance(rt, APIRoute)]
    literals = {seg for _, rt in routes for seg in rt.path.split("/") if seg and "{" not in seg}
    requests = {
        (method, re.sub(r"\{[^}]+\}", fill, route.path))
        for _, route in routes
        for fill in ["p", *literals]
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
    }
    shared = {
        tuple(sorted(fitting, key=order.index))
        for method, path in requests
        if len(fitting := _routers_fitting(routes, method, path)) > 1
    }
    assert shared == {("threads", "state"), ("runs", "crons")}
    assert order[1:4] == ["threads", "runs", "state"]


def _routers_fitting(routes: list[tuple[str, APIRoute]], method: str, path: str) -> set[str]:
    """The routers with a route that answers the request; if none does, those with a route
    whose path fits (one of them answers the 405)."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    fits = [(name, route.matches(scope)[0]) for name, route in routes]
    return {n for n, match in fits if match is Match.FULL} or {
        n for n, match in fits if match is not Match.NONE
    }
