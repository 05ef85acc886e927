"""Stateless runs (``POST /runs``, ``/runs/stream``, ``/runs/wait``, ``/runs/batch``), as on
LangGraph Server: a run on a new thread of the caller's, made for it; once the run ended
(done, failed, or stopped at a question) the thread is deleted, unless the request asked
``on_completion="keep"``. The run itself is an ordinary thread run (:func:`drives.launch`):
the same checks, streaming, limits and durability."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from onward.errors import UsageError
from onward.observe.kinds import EventKind
from onward.serve import states
from onward.serve.context import Ctx, Serving, Who
from onward.serve.drives import Staged, launch, modes_of, stage_new
from onward.serve.feed import Feed
from onward.serve.requests import (
    a_string,
    check_configurable,
    check_run_fields,
    pause_after,
    pause_before,
)
from onward.serve.routes.runs import (
    FINISHED,
    _location,
    _on_drop,
    events,
    finished_values,
    run_doc,
    values_answer,
)
from onward.serve.routes.threads import delete_thread
from onward.serve.strict import StrictRoute

router = APIRouter(route_class=StrictRoute)
MAX_BATCH = 16
"""Most runs one ``/runs/batch`` request starts."""
SETTLE_WAIT = 60.0
"""Longest a finished stateless run's thread waits for its drive to let go (seconds)."""
_cleanups: set[asyncio.Task[None]] = set()
"""Deletions in flight (kept referenced so the loop does not drop them)."""


def _prepared(body: Any) -> tuple[dict[str, Any], bool]:
    """The thread-run request a stateless request becomes, and whether its thread is kept."""
    if not isinstance(body, dict):
        raise UsageError("a run request must be an object")
    keep = a_string(body, "on_completion", ("delete", "keep")) == "keep"
    if check_configurable(body, None) is not None:
        raise UsageError(
            "config.configurable.checkpoint_id: a stateless run starts on a new thread, "
            "which has no checkpoints; run on a thread (POST /threads/{id}/runs) to use it"
        )
    for field in ("checkpoint", "checkpoint_id", "command", "if_not_exists"):
        if body.get(field) is not None:
            raise UsageError(
                f"{field}: a stateless run starts on a new thread, which has no checkpoints "
                "or questions; run on a thread (POST /threads/{id}/runs) to use it"
            )
    if body.get("multitask_strategy") not in (None, "enqueue", "reject"):
        raise UsageError(
            "multitask_strategy: a stateless run's thread is its own, so no other run is "
            "there to interrupt"
        )
    rest = {k: v for k, v in body.items() if k != "on_completion"}
    return {**rest, "if_not_exists": "create"}, keep


def _launch(
    ctx: Serving, body: dict[str, Any], who: str, modes: list[str], keep: bool
) -> tuple[str, str, Feed]:
    """Start the run on a new thread; (thread id, run id, feed). A refused request leaves
    no thread behind. A thread to delete is logged as such (before its cleanup can be
    scheduled): if the server stops before it deletes it, its recovery sweep does."""
    thread_id = str(uuid.uuid4())
    try:
        run_id, feed = launch(ctx, thread_id, body, who, modes)
        if not keep:
            with ctx.clients.use() as ow:
                ow.store.events.record(thread_id, EventKind.STATELESS_THREAD, {"run_id": run_id})
    except BaseException:
        with contextlib.suppress(Exception):
            delete_thread(ctx, thread_id, who)
        raise
    return thread_id, run_id, feed


def start_stateless(ctx: Serving, body: dict[str, Any], who: str) -> tuple[str, str, Feed, bool]:
    """A background stateless run (a stateless cron's firing); (thread id, run id, feed,
    whether its thread is kept)."""
    run_body, keep = _prepared(body)
    thread_id, run_id, feed = _launch(ctx, run_body, who, modes_of(run_body), keep)
    return thread_id, run_id, feed, keep


def _settled(ctx: Serving, thread_id: str) -> bool:
    return not ctx.control.on_thread(thread_id)


def _ended(ctx: Serving, run_id: str) -> bool:
    """Whether the run is over for good: a drained or suspended run (the server stopping,
    a wait until later) is finished by recovery, so its thread must stay."""
    if ctx.control.stopping:
        return False
    with ctx.clients.use() as ow:
        row = ow.store.threads.get_run(run_id)
    return row is None or row.status in FINISHED


async def _delete_when_done(
    ctx: Serving, thread_id: str, run_id: str, feed: Feed, who: str
) -> None:
    """Delete a stateless run's thread once the run ended and its drive let go."""
    async for _item in feed.follow():
        pass
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_WAIT
    while not _settled(ctx, thread_id) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    if not await run_in_threadpool(_ended, ctx, run_id):
        return
    for _attempt in range(20):
        try:
            await run_in_threadpool(delete_thread, ctx, thread_id, who)
            return
        except Exception:  # still held (the lease is being released): try again shortly
            await asyncio.sleep(0.25)


def clean_up_later(
    ctx: Serving, thread_id: str, run_id: str, feed: Feed, who: str, keep: bool
) -> None:
    if keep:
        return
    task = asyncio.ensure_future(_delete_when_done(ctx, thread_id, run_id, feed, who))
    _cleanups.add(task)
    task.add_done_callback(_cleanups.discard)


@router.post("/runs/stream")
async def stateless_stream(body: dict[str, Any], ctx: Ctx, who: Who) -> EventSourceResponse:
    request, keep = _prepared(body)
    modes = modes_of(request)
    thread_id, run_id, out = await run_in_threadpool(_launch, ctx, request, who, modes, keep)
    clean_up_later(ctx, thread_id, run_id, out, who, keep)
    return EventSourceResponse(
        events(out, on_drop=_on_drop(ctx, run_id, request), resolve=states.resolver(ctx.clients)),
        headers=_location(thread_id, run_id),
        ping=15,
    )


@router.post("/runs/wait")
async def stateless_wait(body: dict[str, Any], request: Request, ctx: Ctx, who: Who) -> Any:
    run_body, keep = _prepared(body)
    modes = modes_of(run_body)
    if "values" not in modes:
        modes = [*modes, "values"]  # the answer is the last values
    run_body["stream_mode"] = modes
    thread_id, run_id, out = await run_in_threadpool(_launch, ctx, run_body, who, modes, keep)
    clean_up_later(ctx, thread_id, run_id, out, who, keep)
    cancel = run_body.get("on_disconnect") == "cancel"
    last = await finished_values(ctx, request, thread_id, run_id, cancel)
    return values_answer(last, _location(thread_id, run_id, "join"))


def _background(ctx: Serving, body: dict[str, Any], who: str) -> tuple[dict[str, Any], Feed, bool]:
    run_body, keep = _prepared(body)
    if run_body.get("on_disconnect") == "cancel":
        raise UsageError(
            'on_disconnect "cancel" needs a stream or a wait: a background run has no '
            "connection to lose"
        )
    _tid, run_id, out = _launch(ctx, run_body, who, modes_of(run_body), keep)
    with ctx.clients.use() as ow:
        row = ow.store.threads.get_run(run_id)
    assert row is not None
    return run_doc(row), out, keep


@router.post("/runs")
async def stateless_create(body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    doc, out, keep = await run_in_threadpool(_background, ctx, body, who)
    clean_up_later(ctx, doc["thread_id"], doc["run_id"], out, who, keep)
    return JSONResponse(doc, headers=_location(doc["thread_id"], doc["run_id"]))


def _sdk_batch_item(item: Any) -> Any:
    """The JS SDK's ``createBatch`` sends each request's ``assistantId`` beside the
    ``assistant_id`` it copies it to: the same field twice, so one is dropped."""
    if isinstance(item, dict) and "assistantId" in item:
        rest = {k: v for k, v in item.items() if k != "assistantId"}
        if rest.get("assistant_id") in (None, item["assistantId"]):
            return {**rest, "assistant_id": item["assistantId"]}
    return item


@router.post("/runs/batch")
async def stateless_batch(body: list[Any], ctx: Ctx, who: Who) -> Any:
    """Several background stateless runs, all or none: every request is checked, and the
    whole batch against the caller's run cap, before any starts; each is then prepared,
    and only when all are does any drive (a failure removes the ones prepared)."""
    if not body or len(body) > MAX_BATCH:
        raise UsageError(f"a batch holds 1 to {MAX_BATCH} run requests, not {len(body)}")
    body = [_sdk_batch_item(item) for item in body]
    for item in body:
        request, _keep = _prepared(item)
        check_run_fields(request)
        pause_before(request), pause_after(request)
        modes_of(request)
    ctx.pool.check_room(who, len(body))
    staged = await run_in_threadpool(_stage_all, ctx, body, who)
    docs = []
    for thread_id, keep, ready in staged:
        doc, out = await run_in_threadpool(_go, ctx, ready, keep)
        clean_up_later(ctx, thread_id, doc["run_id"], out, who, keep)
        docs.append(doc)
    return docs


def _stage_all(ctx: Serving, body: list[Any], who: str) -> list[tuple[str, bool, Staged]]:
    """Prepare every run of a batch on a new thread; when one cannot be, remove the
    threads of those prepared (none of them ran) and refuse the batch."""
    staged: list[tuple[str, bool, Staged]] = []
    thread_id = ""
    try:
        for item in body:
            run_body, keep = _prepared(item)
            thread_id = str(uuid.uuid4())
            staged.append(
                (thread_id, keep, stage_new(ctx, thread_id, run_body, who, modes_of(run_body)))
            )
    except BaseException:
        for _tid, _keep, ready in staged:
            ready.release()
        for tid in [*(t for t, _k, _r in staged), thread_id]:
            with contextlib.suppress(Exception):
                delete_thread(ctx, tid, who)
        raise
    return staged


def _go(ctx: Serving, ready: Staged, keep: bool) -> tuple[dict[str, Any], Feed]:
    run_id, out = ready.go()
    with ctx.clients.use() as ow:
        if not keep:
            ow.store.events.record(ready.thread_id, EventKind.STATELESS_THREAD, {"run_id": run_id})
        row = ow.store.threads.get_run(run_id)
    assert row is not None
    return run_doc(row), out
