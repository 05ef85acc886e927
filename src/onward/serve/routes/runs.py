"""Runs on a thread: streamed over server-sent events, waited for, or left to go on in the
background; and the thread's run records."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from onward.serve.context import Ctx, Who
from onward.serve.drives import launch, modes_of
from onward.serve.feed import DONE, Feed
from onward.serve.strict import StrictRoute
from onward.serve.views import run_json, visible

router = APIRouter(route_class=StrictRoute)


def _location(thread_id: str, run_id: str) -> dict[str, str]:
    return {"Content-Location": f"/threads/{thread_id}/runs/{run_id}"}


@router.post("/threads/{thread_id}/runs/stream")
async def runs_stream(
    thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who
) -> EventSourceResponse:
    loop = asyncio.get_running_loop()
    run_id, out = await run_in_threadpool(launch, ctx, thread_id, body, who, modes_of(body), loop)
    return EventSourceResponse(events(run_id, out), headers=_location(thread_id, run_id), ping=15)


async def events(run_id: str, out: Feed) -> AsyncIterator[dict[str, str]]:
    yield {"event": "metadata", "data": json.dumps({"run_id": run_id, "attempt": 1})}
    while True:
        item = await out.get()
        if item is DONE:
            return
        event, data = item
        yield {"event": event, "data": json.dumps(data, ensure_ascii=False)}


@router.post("/threads/{thread_id}/runs/wait")
async def runs_wait(thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    loop = asyncio.get_running_loop()
    run_id, out = await run_in_threadpool(launch, ctx, thread_id, body, who, ["values"], loop)
    last: Any = {}
    while True:
        item = await out.get()
        if item is DONE:
            break
        event, data = item
        if event == "error":
            last = {"__error__": data}
            break
        last = data
    return JSONResponse(last, headers=_location(thread_id, run_id))


@router.post("/threads/{thread_id}/runs")
def runs_create(thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    """A background run: returns at once; the run goes on in the server."""
    run_id, _out = launch(ctx, thread_id, body, who, [], None)
    with ctx.clients.use() as ow:
        return run_json(next(r for r in ow.store.threads.runs(thread_id) if r.run_id == run_id))


@router.get("/threads/{thread_id}/runs")
def runs_list(thread_id: str, ctx: Ctx, who: Who) -> Any:
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        return [run_json(r) for r in ow.store.threads.runs(thread_id)]


@router.get("/threads/{thread_id}/runs/{run_id}")
def runs_get(thread_id: str, run_id: str, ctx: Ctx, who: Who) -> Any:
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        for r in ow.store.threads.runs(thread_id):
            if r.run_id == run_id:
                return run_json(r)
    raise HTTPException(404, f"Run {run_id} not found")
