"""Routes that read what a client sends strictly: bodies through
:func:`~onward.serve.requests.parse_body`, and no NUL character in a path or a query.

Every router of the server declares ``route_class=StrictRoute``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute

from onward.errors import UsageError
from onward.serve.requests import parse_body


class StrictRequest(Request):
    """A request whose JSON body is read by :func:`~onward.serve.requests.parse_body`
    (FastAPI reads a body through ``json()``): what it refuses is a 422 that says why."""

    async def json(self) -> Any:
        if not hasattr(self, "_parsed"):
            try:
                self._parsed = parse_body(await self.body())
            except UsageError as exc:
                raise HTTPException(422, str(exc)) from None
        return self._parsed


class StrictRoute(APIRoute):
    """Reads bodies with :class:`StrictRequest`; a NUL character in the path or the query
    is a 422 (no id holds one, and not every store can even look one up)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            params = [*request.path_params.items(), *request.query_params.multi_items()]
            for name, value in params:
                if "\x00" in str(name) + str(value):
                    raise HTTPException(422, f"{name}: a NUL character (%00) is no valid value")
            return await handler(StrictRequest(request.scope, request.receive))

        return strict
