"""LangGraph Server's store API (``/store/items``, ``/store/namespaces``): not offered by
onward yet. Each route answers 404 saying so (a client is never told it stored something
that was not stored)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from onward.serve.context import Who
from onward.serve.strict import StrictRoute

router = APIRouter(route_class=StrictRoute)
WHY = (
    "onward does not support the store API (/store/items, /store/namespaces) yet: a run's "
    "data lives in its thread's state and artifacts"
)


@router.put("/store/items")
@router.get("/store/items")
@router.delete("/store/items")
@router.post("/store/items/search")
@router.post("/store/namespaces")
def store_api(who: Who) -> Any:
    raise HTTPException(404, WHY)
