"""Runs on a thread: streamed over server-sent events, waited for, or left to go on in the
background; joined again (``join``, ``join_stream`` with ``Last-Event-ID``), cancelled
(``interrupt`` / ``rollback``, one run or many); and the thread's run records.

Every SSE event has an id (its number in the run's feed). A client whose stream dropped
reconnects to the ``Location`` it was given with ``Last-Event-ID`` and gets what it
missed, then the rest; ``on_disconnect="cancel"`` stops the run when its stream drops.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from onward.errors import UsageError, refuse_unknown
from onward.serve import drives, replay, states
from onward.serve.context import Ctx, Serving, Who
from onward.serve.control import CancelAction
from onward.serve.drives import launch, modes_of
from onward.serve.feed import Feed
from onward.serve.requests import a_string, disconnect_of, strings
from onward.serve.strict import StrictRoute
from onward.serve.views import run_json, state_at, visible
from onward.store.runs import ApiRunRow, ApiRunStatus

router = APIRouter(route_class=StrictRoute)
FINISHED = (ApiRunStatus.SUCCESS, ApiRunStatus.ERROR, ApiRunStatus.INTERRUPTED)


def _location(thread_id: str, run_id: str, tail: str = "stream") -> dict[str, str]:
    base = f"/threads/{thread_id}/runs/{run_id}"
    return {"Location": f"{base}/{tail}", "Content-Location": base}


def run_doc(r: ApiRunRow) -> dict[str, Any]:
    return {**run_json(r), "multitask_strategy": r.multitask_strategy}


def last_event(header: str | None) -> int:
    """The number a ``Last-Event-ID`` header names (0: from the start)."""
    if header is None or header.strip() in ("", "-1", "0"):
        return 0
    text = header.strip()
    if not text.isdecimal() or len(text) > 18:
        raise UsageError(f"Last-Event-ID {text[:40]!r} is not an event id of this stream")
    return int(text)


def wire_modes(modes: list[str]) -> set[str]:
    """Stream modes → the SSE event names they come as."""
    return {"messages" if m == "messages-tuple" else m for m in modes}


async def events(
    feed: Feed | AsyncIterator[tuple[int, tuple[str, Any]]],
    after: int = 0,
    only: set[str] | None = None,
    *,
    on_drop: Any = None,
    prefix: str = "",
    resolve: states.Resolve | None = None,
) -> AsyncIterator[bytes]:
    """A feed as SSE events with ids; ``only``: these event names (and metadata, errors);
    ``on_drop``: called when the client goes away before the run's end; ``resolve``: a
    values event's JSON, made when it is sent (onward.serve.states). The events a feed
    has ready together go in one write (each as ``EventSourceResponse`` encodes it)."""
    ended = False
    source = feed.follow_batches(after) if isinstance(feed, Feed) else _one_by_one(feed)
    try:
        async for batch in source:
            frames = []
            for number, (event, data) in batch:
                if only is not None and event.split("|")[0] not in only | {"metadata", "error"}:
                    continue
                if resolve is not None and event == "values":
                    data = await resolve(data)
                    if data is states.MISSING:  # its checkpoint is gone (the thread was deleted)
                        continue
                text = (
                    data
                    if isinstance(data, states.Encoded)
                    else json.dumps(data, ensure_ascii=False).encode()
                )
                frames.append(frame(event, f"{prefix}{number}", text))
            if frames:
                yield b"".join(frames)
        ended = True
    finally:
        if not ended and on_drop is not None:
            on_drop()


SEP = EventSourceResponse.DEFAULT_SEPARATOR.encode()
"""The line separator of the responses' events (``EventSourceResponse``'s default)."""


def frame(event: str, event_id: str, data: bytes) -> bytes:
    """One SSE event, the bytes ``ServerSentEvent(data, event=, id=).encode()`` makes for
    JSON ``data`` (which holds no line break: JSON escapes them) without decoding it and
    encoding it again: a long thread's values event is most of a megabyte. Line breaks in
    the name and id are dropped, as ``ServerSentEvent`` drops them."""
    return b"".join(
        (
            b"id: ",
            _one_line(event_id),
            SEP,
            b"event: ",
            _one_line(event),
            SEP,
            b"data: ",
            data,
            SEP,
            SEP,
        )
    )


def _one_line(text: str) -> bytes:
    return text.replace("\r", "").replace("\n", "").encode()


async def _one_by_one(
    source: AsyncIterator[tuple[int, tuple[str, Any]]],
) -> AsyncIterator[list[tuple[int, tuple[str, Any]]]]:
    async for item in source:
        yield [item]


def _on_drop(ctx: Serving, run_id: str, body: dict[str, Any]) -> Any:
    if disconnect_of(body) != "cancel":
        return None
    return lambda: _cancel_quietly(ctx, run_id, CancelAction.INTERRUPT)


def _cancel_quietly(ctx: Serving, run_id: str, action: CancelAction) -> None:
    """A dropped client's cancel: here, or asked of the run's driver through the store."""
    if ctx.control.cancel(run_id, action) is None:
        with ctx.clients.use() as ow:
            ow.store.threads.request_cancel(run_id, action)


@router.post("/threads/{thread_id}/runs/stream")
async def runs_stream(
    thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who
) -> EventSourceResponse:
    modes = modes_of(body)
    run_id, out = await run_in_threadpool(launch, ctx, thread_id, body, who, modes)
    return EventSourceResponse(
        events(out, on_drop=_on_drop(ctx, run_id, body), resolve=states.resolver(ctx.clients)),
        headers=_location(thread_id, run_id),
        ping=15,
    )


async def finished_values(
    ctx: Serving, request: Request | None, thread_id: str, run_id: str, cancel_on_drop: bool
) -> Any:
    """Wait for a run's end; its last values (or ``{"__error__": ...}``), as ``wait`` and
    ``join`` answer. A client that goes away cancels the run with ``cancel_on_drop``."""
    # This server's feed, else the run's events in the store (it is driven elsewhere).
    feed = ctx.control.feed(run_id) or replay.follow(ctx, run_id)
    reader = asyncio.ensure_future(_last_values(feed, replay.resolver(ctx, run_id)))
    while not reader.done():
        await asyncio.wait({reader}, timeout=0.5)
        if not reader.done() and request is not None and await request.is_disconnected():
            if cancel_on_drop:
                await asyncio.to_thread(_cancel_quietly, ctx, run_id, CancelAction.INTERRUPT)
            reader.cancel()
            return {}
    last = reader.result()
    if isinstance(last, dict) and "__error__" in last:
        return last
    with ctx.clients.use() as ow:
        if ow.store.get_run(thread_id) is None:
            return last or {}
        return state_at(ow, thread_id, None)["values"] if last is None else last


def values_answer(last: Any, headers: dict[str, str]) -> Response:
    """A run's last values as a ``wait`` or ``join`` answers them (the same bytes as
    ``JSONResponse``; values made from a state are encoded already)."""
    if isinstance(last, states.Encoded):
        return Response(bytes(last), media_type="application/json", headers=headers)
    return JSONResponse(last, headers=headers)


async def _last_values(
    feed: Feed | AsyncIterator[tuple[int, tuple[str, Any]]], resolve: states.Resolve
) -> Any:
    """The run's last values (made from one state, at the end), or its error."""
    last: Any = None
    source = feed.follow() if isinstance(feed, Feed) else feed
    async for _n, (event, data) in source:
        if event == "error":
            return {"__error__": data}
        if event == "values":
            last = data
    found = await resolve(last) if last is not None else None
    return None if found is states.MISSING else found


@router.post("/threads/{thread_id}/runs/wait")
async def runs_wait(
    thread_id: str, body: dict[str, Any], request: Request, ctx: Ctx, who: Who
) -> Any:
    body = {**body, "stream_mode": modes_of(body)}  # values are in the feed either way
    if "values" not in body["stream_mode"]:
        body["stream_mode"] = [*body["stream_mode"], "values"]
    run_id, _out = await run_in_threadpool(launch, ctx, thread_id, body, who, body["stream_mode"])
    cancel = disconnect_of(body) == "cancel"
    last = await finished_values(ctx, request, thread_id, run_id, cancel)
    return values_answer(last, _location(thread_id, run_id, "join"))


@router.post("/threads/{thread_id}/runs")
def runs_create(thread_id: str, body: dict[str, Any], ctx: Ctx, who: Who) -> Any:
    """A background run: returns at once; the run goes on in the server (its stream
    modes are kept for ``join_stream``)."""
    if disconnect_of(body) == "cancel":
        raise UsageError(
            'on_disconnect "cancel" needs a stream or a wait: a background run has no '
            "connection to lose"
        )
    run_id, _out = launch(ctx, thread_id, body, who, modes_of(body))
    with ctx.clients.use() as ow:
        row = ow.store.threads.get_run(run_id)
        assert row is not None
        return JSONResponse(run_doc(row), headers=_location(thread_id, run_id))


@router.get("/threads/{thread_id}/runs")
def runs_list(
    thread_id: str,
    ctx: Ctx,
    who: Who,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
    status: str | None = None,
) -> Any:
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        rows = ow.store.threads.runs(thread_id)
    if status is not None:
        if status not in {s.value for s in ApiRunStatus}:
            raise UsageError(f"status {status[:40]!r} is not one of {', '.join(ApiRunStatus)}")
        rows = [r for r in rows if r.status.value == status]
    return [run_doc(r) for r in rows[offset : offset + limit]]


def _run(ctx: Serving, thread_id: str, run_id: str, who: str) -> ApiRunRow:
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
        row = ow.store.threads.get_run(run_id)
    if row is None or row.thread_id != thread_id:
        raise HTTPException(404, f"Run {run_id} not found on thread {thread_id}")
    return row


@router.get("/threads/{thread_id}/runs/{run_id}")
def runs_get(thread_id: str, run_id: str, ctx: Ctx, who: Who) -> Any:
    return run_doc(_run(ctx, thread_id, run_id, who))


@router.delete("/threads/{thread_id}/runs/{run_id}", status_code=204)
def runs_delete(thread_id: str, run_id: str, ctx: Ctx, who: Who) -> Response:
    row = _run(ctx, thread_id, run_id, who)
    if row.status in (ApiRunStatus.PENDING, ApiRunStatus.RUNNING):
        raise HTTPException(409, f"Run {run_id} is {row.status.value}; cancel it first")
    with ctx.clients.use() as ow:
        ow.store.threads.delete_run(run_id)
    return Response(status_code=204)


def _flag(value: str | None, name: str) -> bool:
    if value is None or value.lower() in ("0", "false", "no", ""):
        return False
    if value.lower() in ("1", "true", "yes"):
        return True
    raise UsageError(f"{name} must be true or false, not {value[:20]!r}")


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def runs_join(
    thread_id: str,
    run_id: str,
    request: Request,
    ctx: Ctx,
    who: Who,
    cancel_on_disconnect: str | None = None,
) -> Any:
    await run_in_threadpool(_run, ctx, thread_id, run_id, who)
    cancel = _flag(cancel_on_disconnect, "cancel_on_disconnect")
    last = await finished_values(ctx, request, thread_id, run_id, cancel)
    return values_answer(last, _location(thread_id, run_id, "join"))


@router.get("/threads/{thread_id}/runs/{run_id}/stream")
async def runs_join_stream(
    thread_id: str,
    run_id: str,
    ctx: Ctx,
    who: Who,
    cancel_on_disconnect: str | None = None,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The run's stream again: from the start, or after ``Last-Event-ID``, live to its
    end; from the store when this server does not hold its feed (restarted, or another
    process drives it). A run whose events are past their retention streams nothing."""
    await run_in_threadpool(_run, ctx, thread_id, run_id, who)
    after = last_event(last_event_id)
    stream_mode = [m for m in stream_mode or [] if m]  # the SDKs send an empty one
    only = wire_modes(modes_of({"stream_mode": stream_mode})) if stream_mode else None
    cancel = _flag(cancel_on_disconnect, "cancel_on_disconnect")
    source = replay.follow(ctx, run_id, after)
    drop = (lambda: _cancel_quietly(ctx, run_id, CancelAction.INTERRUPT)) if cancel else None
    return EventSourceResponse(
        events(source, after, only, on_drop=drop, resolve=replay.resolver(ctx, run_id)),
        headers=_location(thread_id, run_id),
        ping=15,
    )


@router.get("/threads/{thread_id}/stream")
async def thread_join_stream(
    thread_id: str,
    ctx: Ctx,
    who: Who,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The thread's runs as one stream: the one driving now, then those queued, until the
    thread has none left (also runs another server drives, or that a restart left: from
    the store). Event ids are ``RUN_ID:N``, so ``Last-Event-ID`` resumes in the run it
    names."""
    with ctx.clients.use() as ow:
        visible(ow, thread_id, who, ctx.tokens)
    # The SDKs send an empty mode, or "run_modes" (the Python SDK's default): each run's own.
    stream_mode = [m for m in stream_mode or [] if m and m != "run_modes"]
    refused = sorted({"lifecycle", "state_update"} & set(stream_mode))
    if refused:
        raise UsageError(
            f"thread stream_mode {', '.join(refused)} is not supported by onward; use "
            "run_modes (the runs' own events) or run stream modes"
        )
    only = wire_modes(modes_of({"stream_mode": stream_mode})) if stream_mode else None
    resume_run, after = None, 0
    if last_event_id and ":" in last_event_id:
        resume_run, _sep, number = last_event_id.rpartition(":")
        after = last_event(number)
    elif last_event_id:
        raise UsageError("Last-Event-ID of a thread stream is RUN_ID:N (as its events name)")

    async def follow() -> AsyncIterator[bytes]:
        done: set[str] = set()
        skipping = resume_run is not None
        while True:
            # The runs this server has in hand, else those another process (or this one
            # before a restart) left unfinished in the store.
            runs = [a.run_id for a in ctx.control.on_thread(thread_id) if a.run_id not in done]
            if not runs:
                stored = await asyncio.to_thread(_unfinished_on, ctx, thread_id)
                runs = [r for r in stored if r not in done]
            if skipping and resume_run not in runs:
                skipping = False  # that run is over: go on with the ones in hand
            if not runs:
                return
            run_id = runs[0]
            if skipping and run_id != resume_run:
                done.add(run_id)
                continue
            start = after if skipping else 0
            skipping = False
            source = replay.follow(ctx, run_id, start)
            resolve = replay.resolver(ctx, run_id)
            async for item in events(source, start, only, prefix=f"{run_id}:", resolve=resolve):
                yield item
            done.add(run_id)

    return EventSourceResponse(follow(), ping=15)


def _unfinished_on(ctx: Serving, thread_id: str) -> list[str]:
    """The thread's pending and running runs in the store, oldest first."""
    with ctx.clients.use() as ow:
        rows = ow.store.threads.runs(thread_id)
    return [r.run_id for r in reversed(rows) if r.status in replay.UNFINISHED]


def _action(action: str | None) -> CancelAction:
    value = action or "interrupt"
    if value not in {a.value for a in CancelAction}:
        raise UsageError(f"action {value[:40]!r} is not one of interrupt, rollback")
    return CancelAction(value)


def cancel_run(ctx: Serving, row: ApiRunRow, action: CancelAction) -> bool:
    """Cancel one run; False when it had already ended (nothing to do). A run another
    process drives (a server, a worker) is asked through the store: its driver stops it
    before its next node and settles its record."""
    if row.status not in (ApiRunStatus.PENDING, ApiRunStatus.RUNNING):
        return False
    active = ctx.control.get(row.run_id)
    if active is not None and active.queued:
        drives.cancel_queued(ctx, row.run_id, action)
        return True
    if active is None:
        if row.request is not None:  # queued before a restart, not yet in hand
            drives.cancel_queued(ctx, row.run_id, action)
            return True
        with ctx.clients.use() as ow:
            return ow.store.threads.request_cancel(row.run_id, action)
    ctx.control.cancel(row.run_id, action)
    return True


@router.post("/threads/{thread_id}/runs/{run_id}/cancel")
async def runs_cancel(
    thread_id: str,
    run_id: str,
    request: Request,
    ctx: Ctx,
    who: Who,
    wait: str | None = None,
    action: str | None = None,
) -> Any:
    """Stop a run before its next node (LangGraph's cancel): ``interrupt`` leaves the
    thread where it got to, ``rollback`` also removes the run and its checkpoints.
    202 at once, or with ``wait`` the thread's values once it stopped."""
    how = _action(action)
    waiting = _flag(wait, "wait")
    row = await run_in_threadpool(_run, ctx, thread_id, run_id, who)
    if not await run_in_threadpool(cancel_run, ctx, row, how):
        raise HTTPException(
            409, f"Run {run_id} already ended ({row.status.value}); there is nothing to cancel"
        )
    if not waiting:
        return Response(status_code=202, headers=_location(thread_id, run_id, "join"))
    last = await finished_values(ctx, request, thread_id, run_id, False)
    return values_answer(last, _location(thread_id, run_id, "join"))


@router.post("/runs/cancel", status_code=204)
def runs_cancel_many(
    body: dict[str, Any], ctx: Ctx, who: Who, action: str | None = None
) -> Response:
    """Cancel several runs: ``{thread_id, run_ids}``, or ``{status: pending | running |
    all}`` (every such run of the caller's threads)."""
    refuse_unknown(body, ("thread_id", "run_ids", "status", "assistant_id"), "cancel request")
    how = _action(action)
    status = a_string(body, "status", ("pending", "running", "all"))
    if body.get("assistant_id") is not None:
        raise UsageError("cancelling by assistant_id is not supported by onward; name the runs")
    rows: list[ApiRunRow] = []
    if status is not None:
        if body.get("thread_id") or body.get("run_ids"):
            raise UsageError("give a status, or a thread_id with run_ids, not both")
        wanted = (
            {ApiRunStatus.PENDING, ApiRunStatus.RUNNING}
            if status == "all"
            else {ApiRunStatus(status)}
        )
        with ctx.clients.use() as ow:
            mine = {t.thread_id for t in ow.store.threads.all(who if ctx.tokens else None)}
            rows = [
                r
                for r in ow.store.threads.unfinished_runs()
                if r.thread_id in mine and r.status in wanted
            ]
    else:
        thread_id = a_string(body, "thread_id")
        run_ids = strings(body, "run_ids")
        if not thread_id or not run_ids:
            raise UsageError("give a status, or a thread_id with run_ids")
        rows = [_run(ctx, thread_id, rid, who) for rid in run_ids]
    for row in rows:
        cancel_run(ctx, row, how)
    return Response(status_code=204)
