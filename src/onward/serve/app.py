"""``onward serve``: the LangGraph Server API over onward's own store, plus a web page.

LangChain's clients (``langgraph_sdk``, ``RemoteGraph``, agent-chat-ui) talk to it as to a
LangGraph Server: assistants (one, ``onward``), threads, thread state and history, and
runs streamed over server-sent events. Underneath, a thread is an onward run: a run's
input is an onward start request (``{"goal": ..., "plan": {...}}``) or chat messages
(the last human message is the goal); interrupts are onward's approval questions in the
human-in-the-loop batched shape; ``command.resume`` answers them. Every drive holds the
run's lease, on SQLite or Postgres, as a CLI drive does.

Drives run on their own threads with their own :class:`~onward.Onward` client, and feed
the response through a queue: a client that disconnects does not stop the run.

This module assembles the app (middleware, error handlers, lifespan, routers); each
resource's routes are in :mod:`onward.serve.routes`, and what they share reaches them as
FastAPI dependencies (:mod:`onward.serve.context`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from langchain_core.language_models import BaseChatModel
from pydantic import ValidationError

from onward.client import Onward
from onward.errors import OnwardError, validation_message
from onward.model.state import Budget
from onward.policies.run import RunPolicy
from onward.serve import auth
from onward.serve.assistants import Catalog, graph_schemas, load_config
from onward.serve.clients import sharing
from onward.serve.context import Serving
from onward.serve.control import Control
from onward.serve.crons import Scheduler
from onward.serve.items import Items
from onward.serve.limits import BodyLimit, RunPool, ServeLimits
from onward.serve.recovery import Recovery
from onward.serve.redact import Redact, Redactor
from onward.serve.replay import keeper
from onward.serve.routes import ROUTERS, info
from onward.settings import settings
from onward.tools.registry import tool_modules_from_env


def create_app(
    db: str | None = None,
    *,
    workdir: str | Path | None = None,
    tool_modules: Sequence[str] = (),
    model: BaseChatModel | Literal["env"] | None = "env",
    cors_origins: Sequence[str] | None = None,
    policy: RunPolicy | None = None,
    budget: Budget | None = None,
    limits: ServeLimits | None = None,
    open_docs: bool = False,
    recover: bool = True,
    config: str | Path | None = None,
    clock: Callable[[], datetime] | None = None,
) -> FastAPI:
    """The ASGI app. ``workdir``: where runs started through the API work (default cwd);
    their tools may only use paths inside it. ``cors_origins``: browser origins allowed
    to call the API from other sites ($ONWARD_CORS_ORIGINS, comma-separated; none by
    default: a page on another site must not drive runs on this machine).

    ``policy`` and ``budget``: the rules every API run follows (a start request may only
    tighten them). ``limits``: request size, run slots, runs per user (default from
    $ONWARD_MAX_BODY, $ONWARD_RUN_SLOTS, $ONWARD_USER_RUNS). ``open_docs``: serve
    ``/docs`` and ``/openapi.json`` without a token (with tokens configured they need one).
    ``recover``: finish runs whose driver died (a crashed server) once their lease expires;
    False leaves them to ``onward worker`` processes. ``config``: a serve configuration
    file defining the assistants (:mod:`onward.serve.assistants`); without one the server
    offers one, ``onward``, with ``policy`` and ``budget``. ``clock``: the time crons are
    scheduled by (a test's fake clock; the wall clock by default)."""
    api_tokens = auth.tokens_from_env()
    limits = limits or ServeLimits.from_env()
    if cors_origins is None:
        cors_origins = list(settings().cors_origins)
    catalog = Catalog(load_config(config) if config else [], policy, budget)
    clients = sharing(
        lambda first: Onward(db, tool_modules=tool_modules, model=model, graph_of=first)
    )
    plain = sharing(lambda first: Onward(db, tool_modules=tool_modules, model=None, graph_of=first))
    catalog.factory = lambda mcp, own_model: sharing(  # an assistant's own models, MCP servers
        lambda first: Onward(
            db, tool_modules=[*tool_modules, *mcp], model=own_model, graph_of=first
        )
    )
    with clients.use() as probe:  # open the store now: a bad URL or key fails at start-up
        graph_json = probe.graph.get_graph().to_json()
        schemas = graph_schemas(probe)
        catalog.sync(probe.store)
        items = Items(probe.store.url, probe.store.backend, probe.store.cipher)
    pool = RunPool(limits)
    root = Path(workdir or Path.cwd()).absolute()
    shown = [
        *tool_modules,
        *tool_modules_from_env(),
        *(r for d in catalog.definitions for r in d.mcp),
    ]
    redactor = Redactor(root, shown) if api_tokens else None
    docs_open = open_docs or not api_tokens
    app = FastAPI(
        title="onward",
        version="1",
        docs_url="/docs" if docs_open else None,
        redoc_url="/redoc" if docs_open else None,
        openapi_url="/openapi.json" if docs_open else None,
        lifespan=_lifespan,
    )
    app.state.serving = Serving(
        clients=clients,
        pool=pool,
        tokens=api_tokens,
        root=root,
        policy=(policy or RunPolicy()).model_copy(update={"confine_paths": True}),
        budget=budget or Budget(),
        graph_json=graph_json,
        catalog=catalog,
        control=Control(keep=keeper(clients)),
        plain_clients=plain,
        schemas=schemas,
        redact=redactor,
    )
    app.state.recovery = Recovery(app.state.serving, enabled=recover)
    app.state.items = items
    app.state.crons = Scheduler(app.state.serving, clock)
    app.add_middleware(BodyLimit, limit=limits.max_body)
    if redactor is not None:  # token holders never see the server's paths
        app.add_middleware(Redact, redactor=redactor)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=[
                "content-location",
                "location",
                "x-pagination-total",
                "x-pagination-next",
            ],
        )
    app.exception_handler(ValidationError)(_invalid)
    app.exception_handler(RequestValidationError)(_invalid_request)
    app.exception_handler(ValueError)(_malformed)
    app.exception_handler(TypeError)(_malformed)
    app.exception_handler(OnwardError)(_onward_error)
    if not docs_open:
        app.include_router(info.schema)
    for router in ROUTERS:
        app.include_router(router)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    serving: Serving = app.state.serving
    recovery: Recovery = app.state.recovery
    recovery.start()
    crons: Scheduler = app.state.crons
    crons.start()
    yield
    await crons.stop()
    # Drives stop at their next node (the last superstep is saved); a restarted server
    # or a worker goes on from there.
    recovery.stop()
    serving.control.stopping = True
    serving.clients.drain()
    serving.plain_clients.drain()
    for own in serving.catalog.pools():
        own.drain()
    serving.pool.close()
    serving.clients.close()
    serving.plain_clients.close()
    for own in serving.catalog.pools():
        own.close()
    app.state.items.close()


# -- errors: each a JSON ``detail`` that says what was wrong -------------------------------


def _invalid(request: Request, exc: ValidationError) -> JSONResponse:
    return JSONResponse({"detail": f"invalid request: {validation_message(exc)}"}, status_code=422)


def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(request)"
        problem = f"{where}: {e['msg']}"
        if tuple(e["loc"]) == ("body",):
            problem += " (send a JSON object with Content-Type: application/json)"
        problems.append(problem)
    return JSONResponse({"detail": f"invalid request: {'; '.join(problems)}"}, 422)


def _malformed(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": f"malformed request ({type(exc).__name__}: {exc})"}, status_code=422
    )


def _onward_error(request: Request, exc: OnwardError) -> JSONResponse:
    headers = {}
    if exc.retry_after is not None:  # e.g. a full request limit, a locked store
        headers["Retry-After"] = str(exc.retry_after)
    return JSONResponse(
        {"detail": str(exc), "error": type(exc).__name__},
        status_code=exc.http_status,
        headers=headers,
    )
