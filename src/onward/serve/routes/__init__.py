"""The server's routes, one router per resource; :data:`ROUTERS` in the order they match.

A request is matched against the routes in this order until one fits, so the resources a
chat client calls on every run come first: ``threads`` (``POST /threads``), ``runs``
(streaming a run, then reading it back), ``state`` (opening a thread). Within a router,
order matters where paths overlap (``/threads/search`` before ``/threads/{thread_id}``
answers a wrong method with the first route's ``Allow``). Across routers, only two pairs
answer a common request, ``threads`` before ``state`` and ``runs`` before ``crons``, and
they keep that order; the others may move without changing any answer
(tests/server/test_served_hops.py).
"""

from fastapi import APIRouter

from onward.serve.routes import (
    assistants,
    crons,
    info,
    page,
    runs,
    state,
    stateless,
    store,
    threads,
)

ROUTERS: tuple[APIRouter, ...] = (
    info.router,
    threads.router,
    runs.router,
    state.router,
    stateless.router,
    assistants.router,
    crons.router,
    store.router,
    page.router,
)

__all__ = ["ROUTERS"]
