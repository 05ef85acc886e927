"""What the server is: liveness, versions (LangGraph Server's ``/info``), and the API's
schema behind a token."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from fastapi import APIRouter, Request

from onward.serve.context import Who
from onward.serve.strict import StrictRoute

router = APIRouter(route_class=StrictRoute)


@router.get("/ok")
def ok() -> dict[str, bool]:
    return {"ok": True}


@router.get("/info")
def info() -> dict[str, Any]:
    return {
        "version": version("onward"),
        "langgraph_py_version": version("langgraph"),
        "flags": {"assistants": True, "crons": True, "langsmith": False},
        "host": {"kind": "onward", "project_id": None, "revision_id": None},
    }


schema = APIRouter(route_class=StrictRoute)
"""``/openapi.json`` for token holders: included when the docs are not open to all."""


@schema.get("/openapi.json", include_in_schema=False)
def openapi(request: Request, who: Who) -> Any:
    return request.app.openapi()
