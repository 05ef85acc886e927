"""Assistants: onward serves one, ``onward`` (by graph id or its derived assistant id)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from onward.serve.context import Ctx, Who
from onward.serve.requests import MAX_PAGE, a_string, an_object, count
from onward.serve.strict import StrictRoute
from onward.serve.views import check_assistant
from onward.serve.wire import GRAPH_ID, assistant

router = APIRouter(route_class=StrictRoute)


def matching(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The page of assistants a search body asks for."""
    wanted = a_string(body, "graph_id")
    meta = an_object(body, "metadata")
    offset, limit = count(body, "offset", 0), count(body, "limit", 10, most=MAX_PAGE)
    a = assistant()
    if (wanted and wanted != GRAPH_ID) or any(a["metadata"].get(k) != v for k, v in meta.items()):
        return []
    return [a][offset:][:limit]


@router.post("/assistants/search")
def assistants_search(who: Who, body: dict[str, Any] | None = None) -> Any:
    return matching(body or {})


@router.post("/assistants/count")
def assistants_count(who: Who, body: dict[str, Any] | None = None) -> int:
    return len(matching(body or {}))


@router.get("/assistants/{assistant_id}")
def assistant_get(assistant_id: str, who: Who) -> Any:
    check_assistant(assistant_id)
    return assistant()


@router.get("/assistants/{assistant_id}/graph")
def assistant_graph(assistant_id: str, ctx: Ctx, who: Who) -> Any:
    check_assistant(assistant_id)
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
