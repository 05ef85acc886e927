"""Crons (``/runs/crons``, ``/threads/{id}/runs/crons``): create, read, search, count,
update, delete; run by the server's scheduler (:mod:`onward.serve.crons`). A cron belongs
to its creator: another user's cron is 404, as if it did not exist."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from onward.errors import RequestLimitError, UsageError, refuse_unknown
from onward.serve.context import Ctx, Serving, Who
from onward.serve.crons import MAX_CRONS, Scheduler, cron_doc, new_cron, updated_cron
from onward.serve.requests import MAX_PAGE, a_string, an_object, count
from onward.serve.strict import StrictRoute
from onward.serve.views import visible
from onward.store.crons import CronRow

router = APIRouter(route_class=StrictRoute)
SORTS = ("cron_id", "assistant_id", "thread_id", "next_run_date", "end_time")
SORTS_TOO = ("created_at", "updated_at")
SEARCH = ("sort_by", "sort_order", "select")


def _scheduler(request: Request) -> Scheduler:
    found: Scheduler = request.app.state.crons
    return found


def _create(
    ctx: Serving, request: Request, body: dict[str, Any], who: str, thread_id: str | None
) -> Any:
    now = _scheduler(request).clock()
    with ctx.clients.use() as ow:
        if thread_id is not None:
            visible(ow, thread_id, who, ctx.tokens)  # another user's thread: 404
        if ow.store.crons.count_of(who) >= MAX_CRONS:
            raise RequestLimitError(
                f"{who} has {MAX_CRONS} crons, the most this server keeps per user; "
                "delete one first",
                http_status=429,
            )
    row = new_cron(ctx, body, who, thread_id, now)
    with ctx.clients.use() as ow:
        ow.store.crons.add(row)
    return cron_doc(row)


@router.post("/runs/crons")
def cron_create(body: dict[str, Any], request: Request, ctx: Ctx, who: Who) -> Any:
    """A stateless cron: each firing runs on a new thread."""
    return _create(ctx, request, body, who, None)


@router.post("/threads/{thread_id}/runs/crons")
def cron_create_for_thread(
    thread_id: str, body: dict[str, Any], request: Request, ctx: Ctx, who: Who
) -> Any:
    return _create(ctx, request, body, who, thread_id)


def _mine(ctx: Serving, cron_id: str, who: str) -> CronRow:
    with ctx.clients.use() as ow:
        row = ow.store.crons.get(cron_id)
    if row is None or (ctx.tokens and row.owner != who):
        raise HTTPException(404, f"Cron {cron_id[:64]} not found")
    return row


def _filtered(ctx: Serving, who: str, body: dict[str, Any]) -> list[CronRow]:
    assistant_id = a_string(body, "assistant_id")
    thread_id = a_string(body, "thread_id")
    metadata = an_object(body, "metadata")
    enabled = body.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise UsageError("enabled must be true or false")
    with ctx.clients.use() as ow:
        rows = ow.store.crons.of(who if ctx.tokens else None)
    return [
        r
        for r in rows
        if (assistant_id is None or r.assistant_id == assistant_id)
        and (thread_id is None or r.thread_id == thread_id)
        and (enabled is None or r.enabled == enabled)
        and all(r.metadata.get(k) == v for k, v in metadata.items())
    ]


@router.post("/runs/crons/search")
def cron_search(ctx: Ctx, who: Who, body: dict[str, Any] | None = None) -> Any:
    body = body or {}
    refuse_unknown(
        body,
        (*("assistant_id", "thread_id", "enabled", "metadata", "limit", "offset"), *SEARCH),
        "cron search",
    )
    offset, limit = count(body, "offset", 0), count(body, "limit", 10, most=MAX_PAGE)
    sort_by = a_string(body, "sort_by", SORTS + SORTS_TOO) or "created_at"
    descending = a_string(body, "sort_order", ("asc", "desc")) == "desc"
    select = body.get("select")
    docs = [cron_doc(r) for r in _filtered(ctx, who, body)]
    if select is not None:
        if not isinstance(select, list) or not all(isinstance(s, str) for s in select):
            raise UsageError("select must be a list of cron field names")
        unknown = sorted(set(select) - set(docs[0] if docs else cron_fields()))
        if unknown:
            raise UsageError(f"select: unknown cron field(s) {', '.join(unknown)[:200]}")
    docs.sort(key=lambda d: (d[sort_by] is None, d[sort_by] or ""), reverse=descending)
    page = docs[offset : offset + limit]
    if select:
        page = [{k: d[k] for k in select} for d in page]
    headers = {"X-Pagination-Total": str(len(docs))}
    if offset + limit < len(docs):
        headers["X-Pagination-Next"] = str(offset + limit)
    return JSONResponse(page, headers=headers)


def cron_fields() -> tuple[str, ...]:
    return (
        *("cron_id", "assistant_id", "thread_id", "on_run_completed", "end_time", "schedule"),
        *("timezone", "created_at", "updated_at", "payload", "user_id", "next_run_date"),
        *("metadata", "enabled"),
    )


@router.post("/runs/crons/count")
def cron_count(ctx: Ctx, who: Who, body: dict[str, Any] | None = None) -> int:
    body = body or {}
    refuse_unknown(body, ("assistant_id", "thread_id", "metadata", "enabled"), "cron count")
    return len(_filtered(ctx, who, body))


@router.get("/runs/crons/{cron_id}")
def cron_get(cron_id: str, ctx: Ctx, who: Who) -> Any:
    return cron_doc(_mine(ctx, cron_id, who))


@router.patch("/runs/crons/{cron_id}")
def cron_update(cron_id: str, body: dict[str, Any], request: Request, ctx: Ctx, who: Who) -> Any:
    row = _mine(ctx, cron_id, who)
    new = updated_cron(ctx, row, body, _scheduler(request).clock())
    with ctx.clients.use() as ow:
        ow.store.crons.replace(new)
    return cron_doc(new)


@router.delete("/runs/crons/{cron_id}", status_code=204)
def cron_delete(cron_id: str, ctx: Ctx, who: Who) -> Response:
    _mine(ctx, cron_id, who)
    with ctx.clients.use() as ow:
        ow.store.crons.delete(cron_id)
    return Response(status_code=204)
