"""Assistants: the operator's (``onward serve --config``) and those users made, each
versioned; their graph, schemas and (no) subgraphs. A user may create, change and delete
only their own assistants, and only stricter than the server's default
(:meth:`~onward.serve.assistants.Catalog.user_context`)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse, Response

from onward.errors import ForbiddenError, UsageError, refuse_unknown
from onward.serve.assistants import MAX_NAME, Assistant
from onward.serve.context import Ctx, Serving, Who
from onward.serve.requests import MAX_PAGE, a_string, an_object, count, kind
from onward.serve.strict import StrictRoute
from onward.serve.wire import GRAPH_ID

router = APIRouter(route_class=StrictRoute)
CREATE_FIELDS = (
    "assistant_id",
    "graph_id",
    "config",
    "context",
    "metadata",
    "if_exists",
    "name",
    "description",
)
SEARCH_FIELDS = (
    "graph_id",
    "metadata",
    "name",
    "limit",
    "offset",
    "sort_by",
    "sort_order",
    "select",
)


def _resolve(ctx: Serving, ref: str, who: str) -> Assistant:
    with ctx.clients.use() as ow:
        return ctx.catalog.resolve(ow.store, ref, who, bool(ctx.tokens))


def matching(ctx: Serving, body: dict[str, Any], who: str) -> list[dict[str, Any]]:
    """The assistants a search body asks for (all its filters applied)."""
    refuse_unknown(body, SEARCH_FIELDS, "assistant search")
    wanted = a_string(body, "graph_id")
    name = a_string(body, "name")
    meta = an_object(body, "metadata")
    a_string(body, "sort_by", ("assistant_id", "graph_id", "name", "created_at", "updated_at"))
    descending = a_string(body, "sort_order", ("asc", "desc")) == "desc"
    offset, limit = count(body, "offset", 0), count(body, "limit", 10, most=MAX_PAGE)
    with ctx.clients.use() as ow:
        found = [a.json() for a in ctx.catalog.visible(ow.store, who, bool(ctx.tokens))]
    out = [
        a
        for a in found
        if (not wanted or a["graph_id"] == wanted)
        and (not name or name.lower() in a["name"].lower())
        and all(a["metadata"].get(k) == v for k, v in meta.items())
    ]
    key = body.get("sort_by") or "created_at"
    out.sort(key=lambda a: (str(a[key]), a["assistant_id"]), reverse=descending)
    return out[offset:][:limit]


@router.post("/assistants/search")
def assistants_search(ctx: Ctx, who: Who, body: dict[str, Any] | None = None) -> Any:
    """A page of assistants, with the pagination headers threads search sends (the SDK's
    ``response_format="object"`` reads ``X-Pagination-Next``)."""
    body = body or {}
    found = matching(ctx, {**body, "offset": 0, "limit": MAX_PAGE}, who)
    offset, limit = count(body, "offset", 0), count(body, "limit", 10, most=MAX_PAGE)
    headers = {"X-Pagination-Total": str(len(found))}
    if offset + limit < len(found):
        headers["X-Pagination-Next"] = str(offset + limit)
    return JSONResponse(found[offset:][:limit], headers=headers)


@router.post("/assistants/count")
def assistants_count(ctx: Ctx, who: Who, body: dict[str, Any] | None = None) -> int:
    body = {**(body or {}), "limit": MAX_PAGE}
    return len(matching(ctx, body, who))


def _check_config(body: dict[str, Any]) -> None:
    config = body.get("config")
    if config in (None, {}):
        return
    if not isinstance(config, dict) or set(config) - {"configurable"} or config.get("configurable"):
        raise UsageError(
            "an onward assistant's settings are its context (policy, budget, model_plans); "
            "config must be empty"
        )


def _text(body: dict[str, Any], name: str) -> str | None:
    value = a_string(body, name)
    if value is not None and len(value) > MAX_NAME * 10:
        raise UsageError(f"{name} is too long (at most {MAX_NAME * 10} characters)")
    return value


@router.post("/assistants")
def assistant_create(body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    refuse_unknown(body, CREATE_FIELDS, "assistant")
    graph_id = a_string(body, "graph_id") or ""
    if graph_id != GRAPH_ID:
        raise HTTPException(404, f"graph {graph_id!r} not found; onward serves one, {GRAPH_ID!r}")
    _check_config(body)
    if_exists = a_string(body, "if_exists", ("raise", "do_nothing")) or "raise"
    aid = a_string(body, "assistant_id") or str(uuid.uuid4())
    try:
        uuid.UUID(aid)
    except ValueError:
        raise UsageError(f"assistant_id {aid[:40]!r} is not a UUID") from None
    context = ctx.catalog.user_context(body.get("context"))
    name = _text(body, "name") or "Untitled"
    description = _text(body, "description")
    metadata = an_object(body, "metadata")
    with ctx.clients.use() as ow:
        existing = ow.store.assistants.get(aid)
        if existing is not None:
            mine = existing.owner == who or (not ctx.tokens and existing.owner is not None)
            if if_exists == "do_nothing" and mine:
                return Assistant.of(existing).json()
            if not mine and ctx.tokens and existing.owner is not None:
                # Someone else's: as if it did not exist, but the id is taken.
                raise HTTPException(409, f"assistant_id {aid} is taken; leave it out")
            raise HTTPException(409, f"Assistant {aid} already exists")
        row = ow.store.assistants.add_version(
            aid,
            graph_id=GRAPH_ID,
            name=name,
            description=description,
            context=context,
            metadata=metadata,
            owner=who,
        )
    return Assistant.of(row).json()


def _own(ctx: Serving, assistant_id: str, who: str) -> Assistant:
    """An assistant the caller may change: their own (the operator's are read-only)."""
    found = _resolve(ctx, assistant_id, who)
    if found.row.owner is None:
        raise ForbiddenError(
            f"assistant {found.row.name!r} is defined by the server's configuration; "
            "only its operator changes it (onward serve --config)"
        )
    return found


@router.patch("/assistants/{assistant_id}")
def assistant_patch(assistant_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    refuse_unknown(
        body,
        ("graph_id", "config", "context", "metadata", "name", "description"),
        "assistant update",
    )
    graph_id = a_string(body, "graph_id")
    if graph_id not in (None, GRAPH_ID):
        raise HTTPException(404, f"graph {graph_id!r} not found; onward serves one, {GRAPH_ID!r}")
    _check_config(body)
    current = _own(ctx, assistant_id, who)
    row = current.row
    context = ctx.catalog.user_context(body["context"]) if "context" in body else row.context
    metadata = {**row.metadata, **an_object(body, "metadata")}
    with ctx.clients.use() as ow:
        new = ow.store.assistants.add_version(
            row.assistant_id,
            graph_id=GRAPH_ID,
            name=_text(body, "name") or row.name,
            description=_text(body, "description") if "description" in body else row.description,
            context=context,
            metadata=metadata,
            owner=row.owner,
        )
    return Assistant.of(new).json()


@router.delete("/assistants/{assistant_id}", status_code=204)
def assistant_delete(assistant_id: str, ctx: Ctx, who: Who) -> Response:
    found = _own(ctx, assistant_id, who)
    with ctx.clients.use() as ow:
        ow.store.assistants.delete(found.assistant_id)
    return Response(status_code=204)


@router.post("/assistants/{assistant_id}/versions")
def assistant_versions(
    assistant_id: str, ctx: Ctx, who: Who, body: dict[str, Any] | None = None
) -> Any:
    body = body or {}
    refuse_unknown(body, ("metadata", "limit", "offset"), "assistant versions")
    meta = an_object(body, "metadata")
    offset, limit = count(body, "offset", 0), count(body, "limit", 10, most=MAX_PAGE)
    found = _resolve(ctx, assistant_id, who)
    with ctx.clients.use() as ow:
        rows = ow.store.assistants.versions(found.assistant_id)
    docs = [Assistant.of(r).json() for r in rows]
    docs = [d for d in docs if all(d["metadata"].get(k) == v for k, v in meta.items())]
    return docs[offset:][:limit]


@router.post("/assistants/{assistant_id}/latest")
def assistant_set_latest(assistant_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    refuse_unknown(body, ("version",), "set latest")
    version = body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError(f"version must be a whole number from 1, not {kind(version)}")
    found = _own(ctx, assistant_id, who)
    with ctx.clients.use() as ow:
        if not ow.store.assistants.set_latest(found.assistant_id, version):
            raise HTTPException(404, f"Assistant {assistant_id} has no version {version}")
        row = ow.store.assistants.get(found.assistant_id)
    assert row is not None
    return Assistant.of(row).json()


@router.get("/assistants/{assistant_id}")
def assistant_get(assistant_id: str, ctx: Ctx, who: Who) -> Any:
    return _resolve(ctx, assistant_id, who).json()


@router.get("/assistants/{assistant_id}/graph")
def assistant_graph(assistant_id: str, ctx: Ctx, who: Who, xray: str | None = None) -> Any:
    _resolve(ctx, assistant_id, who)
    nodes = []
    for node in ctx.graph_json["nodes"]:
        data = node.get("data")
        if isinstance(data, dict):
            node = {**node, "data": {k: v for k, v in data.items() if k != "id"}}
        nodes.append(node)
    edges = [
        {k: v for k, v in e.items() if k in ("source", "target", "data", "conditional")}
        for e in ctx.graph_json["edges"]
    ]
    return {"nodes": nodes, "edges": edges}


@router.get("/assistants/{assistant_id}/schemas")
def assistant_schemas(assistant_id: str, ctx: Ctx, who: Who) -> Any:
    _resolve(ctx, assistant_id, who)
    return ctx.schemas


@router.get("/assistants/{assistant_id}/subgraphs")
def assistant_subgraphs(assistant_id: str, ctx: Ctx, who: Who, recurse: str | None = None) -> Any:
    _resolve(ctx, assistant_id, who)
    return {}  # onward's graph has no subgraphs


@router.get("/assistants/{assistant_id}/subgraphs/{namespace}")
def assistant_subgraph(assistant_id: str, namespace: str, ctx: Ctx, who: Who) -> Any:
    _resolve(ctx, assistant_id, who)
    raise HTTPException(404, f"subgraph {namespace!r} not found: onward's graph has none")
