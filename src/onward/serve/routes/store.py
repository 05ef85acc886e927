"""LangGraph Server's store API (``/store/items``, ``/store/namespaces``), each user's own
(:mod:`onward.serve.items`): a namespace is always the caller's, so no token holder can
read, list or overwrite another user's items."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from onward.errors import UsageError, refuse_unknown
from onward.serve.context import Who
from onward.serve.items import Items
from onward.serve.strict import StrictRoute

router = APIRouter(route_class=StrictRoute)
NO_INDEX = (
    "onward's store has no semantic index (no embeddings are configured); leave {field} "
    "out and search with a namespace prefix and a filter"
)


async def items_of(request: Request) -> Items:
    """``async``: no worker thread per request for what reads no store."""
    found: Items = request.app.state.items
    return found


Store = Annotated[Items, Depends(items_of)]


def _no_ttl(body: dict[str, Any]) -> None:
    if body.get("ttl") is not None:
        raise UsageError("ttl is not supported by onward's store: items are kept until deleted")


@router.put("/store/items", status_code=204)
def put_item(body: dict[str, Any], items: Store, who: Who) -> Response:
    refuse_unknown(body, ("namespace", "key", "value", "index", "ttl"), "store put")
    if body.get("index") not in (None, False):
        raise UsageError(NO_INDEX.format(field="index"))
    _no_ttl(body)
    namespace = items.namespace(body.get("namespace"), "namespace")
    items.put(who, namespace, items.key(body.get("key")), items.value(body.get("value")))
    return Response(status_code=204)


@router.get("/store/items")
def get_item(
    items: Store,
    who: Who,
    key: str | None = None,
    namespace: str | None = None,
    refresh_ttl: str | None = None,
) -> Any:
    """The item, or null (LangGraph Server answers 200 with null for a missing item).
    ``refresh_ttl`` changes nothing: onward's items never expire."""
    if refresh_ttl not in (None, "true", "false", "True", "False"):
        raise UsageError("refresh_ttl must be true or false")
    labels = namespace.split(".") if namespace else []  # sent dot-joined in the query
    found = items.get(who, items.namespace(labels, "namespace"), items.key(key))
    return JSONResponse(found)


@router.delete("/store/items", status_code=204)
def delete_item(body: dict[str, Any], items: Store, who: Who) -> Response:
    refuse_unknown(body, ("namespace", "key"), "store delete")
    namespace = items.namespace(body.get("namespace"), "namespace")
    items.delete(who, namespace, items.key(body.get("key")))
    return Response(status_code=204)


@router.post("/store/items/search")
def search_items(items: Store, who: Who, body: dict[str, Any] | None = None) -> Any:
    body = body or {}
    fields = ("namespace_prefix", "filter", "limit", "offset", "query", "refresh_ttl")
    refuse_unknown(body, fields, "store search")
    if body.get("query") not in (None, ""):
        raise UsageError(NO_INDEX.format(field="query"))
    found = items.search(
        who,
        items.namespace(body.get("namespace_prefix"), "namespace_prefix", empty=True),
        items.filter(body.get("filter")),
        items.limit(body.get("limit"), 10),
        items.page(body.get("offset"), "offset", 0),
    )
    return {"items": found}


@router.post("/store/namespaces")
def list_namespaces(items: Store, who: Who, body: dict[str, Any] | None = None) -> Any:
    body = body or {}
    refuse_unknown(body, ("prefix", "suffix", "max_depth", "limit", "offset"), "store namespaces")
    depth = body.get("max_depth")
    if depth is not None:
        depth = items.page(depth, "max_depth", 0)
        if not 1 <= depth <= items.limits.max_depth:
            raise UsageError(f"max_depth must be from 1 to {items.limits.max_depth}")
    suffix = items.namespace(body.get("suffix"), "suffix", empty=True)
    found = items.namespaces(
        who,
        items.namespace(body.get("prefix"), "prefix", empty=True),
        suffix or None,
        depth,
        items.limit(body.get("limit"), 100),
        items.page(body.get("offset"), "offset", 0),
    )
    return {"namespaces": found}
