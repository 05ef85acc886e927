"""A thread's state: now, at a checkpoint, its history, and a client's edit of it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from onward.errors import ForbiddenError, UsageError, refuse_unknown
from onward.graph.schedule import GATE
from onward.observe.kinds import EventKind
from onward.serve.context import Ctx, Serving, Who
from onward.serve.intake import checkpoint_in, known_checkpoint
from onward.serve.owners import client_update
from onward.serve.requests import MAX_PAGE, an_object, count, kind
from onward.serve.strict import StrictRoute
from onward.serve.views import (
    at_checkpoint,
    driven,
    history_answer,
    state_answer,
    visible,
)

router = APIRouter(route_class=StrictRoute)


@router.get("/threads/{thread_id}/state")
def state_get(thread_id: str, ctx: Ctx, who: Who) -> Any:
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        return state_answer(ow, thread_id, None)


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
def state_get_at(thread_id: str, checkpoint_id: str, ctx: Ctx, who: Who) -> Any:
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        return state_answer(ow, thread_id, checkpoint_id)


@router.post("/threads/{thread_id}/state/checkpoint")
def state_post_checkpoint(thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    checkpoint_id = checkpoint_in(body)
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        return state_answer(ow, thread_id, checkpoint_id)


@router.post("/threads/{thread_id}/state")
def state_update(thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    """A client's edit: only client-owned fields, validated like a plan revision
    (:func:`onward.serve.owners.client_update`); applied as the schedule node, so the run
    goes on from there (at a past checkpoint: a new branch of the thread)."""
    refuse_unknown(body, ("values", "as_node", "checkpoint_id", "checkpoint"), "state update")
    as_node = body.get("as_node")
    if as_node not in (None, GATE):
        raise ForbiddenError(
            f"as_node {as_node!r}: a client's edit is applied as the {GATE!r} node (leave "
            "as_node out); nodes' own updates are onward's"
        )
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        if ow.store.get_run(thread_id) is None:
            raise HTTPException(400, f"Thread {thread_id} has no run yet: start one first")
        if driven(ow, thread_id, has_run=True):
            raise HTTPException(409, f"Thread {thread_id} has a run in progress")
        checkpoint_id = checkpoint_in(body)
        known_checkpoint(ow, thread_id, checkpoint_id)
        state, _next = ow.state_at(thread_id, checkpoint_id)
        if state.goal is None:
            raise UsageError(
                "that checkpoint holds no run state yet (the run's input); edit a later one"
            )
        writes = client_update(state, body.get("values"), ow.registry)
        config = at_checkpoint(ow, thread_id, checkpoint_id)
        new = ow.graph.update_state(config, writes, as_node=GATE)
        ow.store.events.record(
            thread_id,
            EventKind.STATE_UPDATED,
            {"by": who, "checkpoint_id": checkpoint_id, "fields": sorted(writes)},
        )
        return {"checkpoint": {k: v for k, v in new["configurable"].items()}}


@router.post("/threads/{thread_id}/history")
def history_post(thread_id: str, ctx: Ctx, who: Who, body: dict[str, Any] | None = None) -> Any:
    return history(ctx, thread_id, body or {}, who)


@router.get("/threads/{thread_id}/history")
def history_get(
    thread_id: str, ctx: Ctx, who: Who, limit: int = 10, before: str | None = None
) -> Any:
    return history(ctx, thread_id, {"limit": limit, "before": before}, who)


def history(ctx: Serving, thread_id: str, body: dict[str, Any], who: str) -> Any:
    limit = count(body, "limit", 10, most=MAX_PAGE)
    metadata = an_object(body, "metadata") or None
    before = body.get("before")
    if isinstance(before, dict):
        before = before.get("checkpoint_id")
    if before is not None and not isinstance(before, str):
        raise UsageError(
            f"before must be a checkpoint id or {{checkpoint_id: ...}}, not {kind(before)}"
        )
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        if ow.store.get_run(thread_id) is None:
            return []
        before_config = (
            {"configurable": {"thread_id": thread_id, "checkpoint_id": before}} if before else None
        )
        snaps = ow.graph.get_state_history(
            ow._config(thread_id),
            limit=limit,
            before=before_config,  # type: ignore[arg-type]
            filter=metadata,
        )
        return history_answer(ow, snaps)
