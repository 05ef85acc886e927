"""What every route shares, and who a request acts as: FastAPI dependencies.

:func:`~onward.serve.app.create_app` builds one :class:`Serving` and keeps it on
``app.state``; a route asks for it as ``ctx: Ctx`` and for the caller as ``who: Who``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from onward.model.state import Budget
from onward.policies.run import RunPolicy
from onward.serve import auth
from onward.serve.clients import Clients
from onward.serve.limits import RunPool

if TYPE_CHECKING:
    from onward.serve.assistants import Catalog
    from onward.serve.control import Control


@dataclass(frozen=True)
class Serving:
    clients: Clients
    pool: RunPool
    tokens: dict[str, str]
    """API tokens → users; empty: an open server where everyone is ``local``."""
    root: Path
    """Where API runs work; their tools may only use paths inside it."""
    policy: RunPolicy
    budget: Budget
    """The rules every API run follows (a start request may only tighten them)."""
    graph_json: dict[str, Any]
    """The compiled graph's drawing, read once at start-up."""
    catalog: Catalog
    """The assistants the server offers (their rules replace ``policy`` and ``budget``
    for the runs that pick them)."""
    control: Control
    """The runs in hand: driving, queued; their feeds."""
    plain_clients: Clients
    """Clients without a chat model, for assistants whose goals only templates plan."""
    schemas: dict[str, Any]
    """The graph's input, output, state and context JSON schemas (read once)."""
    redact: Callable[[bytes], bytes] | None = None
    """With tokens: hides the server's paths in what leaves it (:mod:`onward.serve.redact`)."""


async def serving(request: Request) -> Serving:
    """``async``, as :func:`user`: FastAPI runs a plain ``def`` dependency on a worker
    thread, a hop each per request for what reads no store."""
    found: Serving = request.app.state.serving
    return found


Ctx = Annotated[Serving, Depends(serving)]


_BEARER = HTTPBearer(auto_error=False)
_API_KEY = APIKeyHeader(name="x-api-key", auto_error=False)
"""FastAPI's own readers of the two ways a client sends its token (each reads the header
itself, where header parameters went through FastAPI's validation on every request), and
the OpenAPI document names them as its security schemes."""


async def user(
    ctx: Ctx,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    api_key: Annotated[str | None, Depends(_API_KEY)],
) -> str:
    found = auth.user_for(ctx.tokens, bearer.credentials if bearer else None, api_key)
    if found is None:
        raise HTTPException(401, "missing or unknown token: send Authorization: Bearer TOKEN")
    return found


Who = Annotated[str, Depends(user)]
