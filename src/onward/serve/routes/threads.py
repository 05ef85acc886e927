"""Threads: create, search, read, tag with metadata, delete. A thread made through the API
belongs to its creator; with tokens configured, nobody else sees it."""

from __future__ import annotations

import json
import uuid
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse, Response

from onward.client import lifecycle
from onward.errors import ForbiddenError, UnknownThreadError, UsageError, refuse_unknown
from onward.observe.kinds import EventKind
from onward.serve.context import Ctx, Serving, Who
from onward.serve.control import CancelAction
from onward.serve.drives import cancel_queued
from onward.serve.intake import checkpoint_in
from onward.serve.requests import MAX_PAGE, a_string, an_object, count, new_thread_id, strings
from onward.serve.strict import StrictRoute
from onward.serve.views import (
    as_json,
    at_checkpoint,
    driven,
    not_found,
    thread_json,
    visible,
)
from onward.serve.wire import ASSISTANT_ID, GRAPH_ID
from onward.store.runs import ThreadRow

router = APIRouter(route_class=StrictRoute)


@router.post("/threads")
def thread_create(ctx: Ctx, who: Who, body: dict[str, Any] | None = None) -> Any:
    body = body or {}
    given = a_string(body, "thread_id")
    thread_id = new_thread_id(given or str(uuid.uuid4()))
    a_string(body, "if_exists", ("raise", "do_nothing"))
    metadata = {"graph_id": GRAPH_ID, "assistant_id": ASSISTANT_ID}
    metadata |= an_object(body, "metadata")
    with ctx.clients.use() as ow:
        # An id the server made now is no run's: only a given one is looked up.
        if ctx.tokens and given and ow.store.get_run(thread_id) is not None:
            # A run started outside the API (or by someone else) is nobody's to claim.
            row = ow.store.threads.get(thread_id)
            if row is None or row.owner != who:
                raise not_found(thread_id)
        made = ow.store.threads.made(thread_id, who, metadata)
        if made is None:
            row = visible(ow, thread_id, who, ctx.tokens)  # another user's thread: 404, not 409
            if body.get("if_exists") == "do_nothing":
                return thread_json(ow, thread_id, row)
            raise HTTPException(409, f"Thread {thread_id} already exists")
        # The row as written (not read again); plain JSON: encoded without FastAPI's walk.
        return as_json(thread_json(ow, thread_id, made, unused=not given))


@router.post("/threads/search")
def thread_search(ctx: Ctx, who: Who, body: dict[str, Any] | None = None) -> Any:
    """A page of the caller's threads, with LangGraph Server's pagination headers
    (``X-Pagination-Total``, and ``X-Pagination-Next``: the next page's offset)."""
    body = body or {}
    offset, limit = count(body, "offset", 0), count(body, "limit", 10, most=MAX_PAGE)
    found = search(ctx, who, body)
    headers = {"X-Pagination-Total": str(len(found))}
    if offset + limit < len(found):
        headers["X-Pagination-Next"] = str(offset + limit)
    return JSONResponse(found[offset : offset + limit], headers=headers)


@router.post("/threads/count")
def thread_count(ctx: Ctx, who: Who, body: dict[str, Any] | None = None) -> int:
    body = body or {}
    refuse_unknown(body, ("metadata", "values", "status"), "thread count")
    return len(search(ctx, who, body))


def search(ctx: Serving, who: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every thread of the caller's that a search body matches, in its order."""
    meta = by_assistant_name(ctx, an_object(body, "metadata"))
    status = a_string(body, "status")
    ids = set(strings(body, "ids"))
    descending = a_string(body, "sort_order", ("asc", "desc")) != "asc"
    values = an_object(body, "values")
    out = []
    with ctx.clients.use() as ow:
        rows = ow.store.threads.all(who if ctx.tokens else None)
        known = {r.thread_id for r in rows}
        found: list[tuple[str, ThreadRow | None]] = [(r.thread_id, r) for r in rows]
        if not ctx.tokens:  # runs started outside the API are listed too
            found += [
                (r.thread_id, None) for r in ow.store.list_runs(1000) if r.thread_id not in known
            ]
        for tid, row in found:
            if ids and tid not in ids:
                continue
            try:
                doc = thread_json(ow, tid, row)
            except UnknownThreadError:  # deleted meanwhile (a stateless run's thread)
                continue
            if any(doc["metadata"].get(k) != v for k, v in meta.items()):
                continue
            if status and doc["status"] != status:
                continue
            if values and any((doc["values"] or {}).get(k) != v for k, v in values.items()):
                continue
            out.append(doc)
    out.sort(key=lambda d: d["updated_at"], reverse=descending)
    return out


def by_assistant_name(ctx: Serving, meta: dict[str, Any]) -> dict[str, Any]:
    """A search's metadata filter, with ``graph_id`` naming an operator's assistant read as
    that assistant's threads. agent-chat-ui lists the threads of a non-UUID assistant id
    by ``metadata.graph_id``: on LangGraph Server that id is a graph's; on onward every
    assistant runs the one graph ``onward``, so ``graph_id: "fast"`` means the threads
    whose ``assistant_id`` is the ``fast`` assistant's (threads keep ``graph_id:
    "onward"``, which lists them all, as the reference does for a graph)."""
    name = meta.get("graph_id")
    aid = ctx.catalog.by_name.get(name) if isinstance(name, str) and name != GRAPH_ID else None
    if aid is None or meta.get("assistant_id", aid) != aid:
        return meta
    return {**meta, "graph_id": GRAPH_ID, "assistant_id": aid}


@router.get("/threads/{thread_id}")
def thread_get(thread_id: str, ctx: Ctx, who: Who) -> Any:
    with ctx.clients.use() as ow:
        return thread_json(ow, thread_id, visible(ow, thread_id, who, ctx.tokens))


@router.patch("/threads/{thread_id}")
def thread_patch(thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    metadata = an_object(body, "metadata")
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        if ow.store.threads.get(thread_id) is None:
            ow.store.threads.create(thread_id, who, {"graph_id": GRAPH_ID})
        ow.store.threads.merge_metadata(thread_id, metadata)
        return thread_json(ow, thread_id, ow.store.threads.get(thread_id))


@router.post("/threads/{thread_id}/copy")
def thread_copy(thread_id: str, ctx: Ctx, who: Who) -> Any:
    """A new thread of the caller's that goes on from this one's state now (an onward
    fork at the latest checkpoint: the copy's history starts there; its effects are its
    own)."""
    with ctx.clients.use() as ow:
        row = visible(ow, thread_id, who, ctx.tokens)
        if ow.store.get_run(thread_id) is None:
            raise HTTPException(409, f"Thread {thread_id} has no run yet: nothing to copy")
        if driven(ow, thread_id, has_run=True):
            raise HTTPException(409, f"Thread {thread_id} has a run in progress")
        snap = ow.graph.get_state(ow._config(thread_id))
        checkpoint_id = snap.config["configurable"]["checkpoint_id"]
        new_id = lifecycle.fork(
            ow, thread_id, checkpoint_id, None, new_thread_id=str(uuid.uuid4()), finished_ok=True
        )
        metadata = {**(row.metadata if row else {"graph_id": GRAPH_ID}), "copied_from": thread_id}
        ow.store.threads.create(new_id, who, metadata)
        return thread_json(ow, new_id, ow.store.threads.get(new_id))


PROTECTED_METADATA = frozenset(
    {"source", "step", "parents", "writes", "thread_id", "run_id", "checkpoint_id"}
    | {"checkpoint_ns", "graph_id", "assistant_id", "user_id"}
)
"""Checkpoint metadata LangGraph and onward write (a client's patch cannot change it)."""
MAX_METADATA_BYTES = 16 * 1024
MAX_METADATA_KEYS = 64


def client_metadata(body: dict[str, Any]) -> dict[str, Any]:
    """A state patch's ``metadata``: an object of at most :data:`MAX_METADATA_KEYS` keys
    and :data:`MAX_METADATA_BYTES` of JSON, none of them the runtime's own."""
    if not isinstance(body.get("metadata"), dict):
        raise UsageError("a state patch needs metadata: an object of the keys to merge")
    metadata: dict[str, Any] = body["metadata"]
    taken = sorted(
        k for k in metadata if k in PROTECTED_METADATA or k.startswith(("langgraph", "onward"))
    )
    if taken:
        raise ForbiddenError(
            f"metadata {', '.join(taken)[:200]}: these checkpoint keys are written by "
            "LangGraph and onward, not by clients"
        )
    size = len(json.dumps(metadata, ensure_ascii=False).encode())
    if len(metadata) > MAX_METADATA_KEYS or size > MAX_METADATA_BYTES:
        raise UsageError(
            f"metadata is {len(metadata)} keys, {size} bytes; a patch may merge at most "
            f"{MAX_METADATA_KEYS} keys and {MAX_METADATA_BYTES} bytes"
        )
    return metadata


@router.patch("/threads/{thread_id}/state")
def thread_patch_state(thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    """Merge metadata into a checkpoint's (the latest, or ``checkpoint_id``), as LangGraph
    Server's patch state does: the checkpoint itself, its values and its place in the
    history stay as they were."""
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)  # first: another user's thread is just 404
        refuse_unknown(body, ("metadata", "checkpoint_id", "checkpoint"), "state patch")
        metadata = client_metadata(body)
        if ow.store.get_run(thread_id) is None:
            raise HTTPException(400, f"Thread {thread_id} has no run yet: nothing to patch")
        if driven(ow, thread_id, has_run=True):
            raise HTTPException(409, f"Thread {thread_id} has a run in progress")
        checkpoint_id = checkpoint_in(body)
        found = ow.store.saver.get_tuple(at_checkpoint(ow, thread_id, checkpoint_id))
        if found is None:
            raise HTTPException(404, f"Checkpoint {checkpoint_id} not found")
        conf = found.config["configurable"]
        parent = found.parent_config or {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": conf["checkpoint_ns"]}
        }
        merged: Any = {**found.metadata, **metadata}
        ow.store.saver.put(parent, found.checkpoint, merged, {})
        ow.store.events.record(
            thread_id,
            EventKind.STATE_UPDATED,
            {"by": who, "checkpoint_id": conf["checkpoint_id"], "metadata": sorted(metadata)},
        )
        return {"checkpoint": dict(conf)}


@router.delete("/threads/{thread_id}", status_code=204)
def thread_delete(thread_id: str, ctx: Ctx, who: Who) -> Response:
    delete_thread(ctx, thread_id, who)
    return Response(status_code=204)


def delete_thread(ctx: Serving, thread_id: str, who: str) -> None:
    """Delete a thread of ``who``'s with its run, checkpoints and queued runs; 409 while a
    run drives it (also a stateless run's end: :mod:`onward.serve.routes.stateless`)."""
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        if driven(ow, thread_id) or any(not a.queued for a in ctx.control.on_thread(thread_id)):
            raise HTTPException(409, f"Thread {thread_id} has a run in progress")
        for row in ow.store.threads.queued(thread_id):
            cancel_queued(ctx, row.run_id, CancelAction.ROLLBACK)
        if ow.store.get_run(thread_id) is not None:
            _rows, shas = ow.store.delete_run(thread_id)
            ow.store.delete_unused_bodies(shas)
        ow.store.threads.delete(thread_id)
        ow.store.crons.delete_for_thread(thread_id)  # as LangGraph Server's do
