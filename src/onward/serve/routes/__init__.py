"""The server's routes, one router per resource; :data:`ROUTERS` in the order they match.

Order matters where paths overlap (``/threads/search`` before ``/threads/{thread_id}``
answers a wrong method with the first route's ``Allow``), so it is the order the routes
were always registered in.
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
    assistants.router,
    threads.router,
    state.router,
    runs.router,
    stateless.router,
    crons.router,
    store.router,
    page.router,
)

__all__ = ["ROUTERS"]
