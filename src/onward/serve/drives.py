"""Driving a thread's run on the server's pool, its output fed to whoever streams it.

A drive holds the run's lease, as a CLI drive does, on a pool thread with its own
client; a client that disconnects does not stop it. :class:`~onward.serve.recovery.Recovery`
uses the same :func:`drive` to finish runs whose driver died.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langgraph.types import Command, StreamMode

from onward.errors import OnwardError, UsageError
from onward.observe.chat import STEP_MESSAGE_PREFIX
from onward.serve.clients import Clients
from onward.serve.context import Serving
from onward.serve.feed import DONE, Feed
from onward.serve.intake import ENDED, prepare
from onward.serve.requests import pause_before
from onward.serve.wire import chat_values, chunk, jsonable
from onward.store.runs import ApiRunStatus

GRAPH_MODES: dict[str, StreamMode] = {
    "values": "values",
    "updates": "updates",
    "messages-tuple": "messages",
    "custom": "custom",
    "debug": "debug",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}
"""API stream modes → the graph's (``messages-tuple`` is the graph's ``messages``)."""


def modes_of(body: dict[str, Any]) -> list[str]:
    raw = body.get("stream_mode") or "values"
    modes = [raw] if isinstance(raw, str) else raw
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise UsageError("stream_mode must be a mode name or a list of them")
    unknown = sorted(set(modes) - set(GRAPH_MODES))
    if unknown:
        raise UsageError(
            f"stream_mode {', '.join(unknown)} is not supported; use {', '.join(GRAPH_MODES)}"
        )
    return modes


def launch(
    ctx: Serving,
    thread_id: str,
    body: dict[str, Any],
    who: str,
    modes: list[str],
    loop: asyncio.AbstractEventLoop | None,
) -> tuple[str, Feed]:
    """Accept a run request and drive it on the pool: (run id, its feed). ``loop``: where
    the feed is read; None for a background run."""
    pause = pause_before(body)
    ctx.pool.reserve(who)  # 429 before anything is stored
    try:
        run_id, command, checkpoint_id = prepare(ctx, thread_id, body, who)
    except BaseException:
        ctx.pool.release(who)
        raise
    out = Feed(loop)
    ctx.pool.submit(
        who,
        lambda: drive(
            ctx.clients, thread_id, run_id, command, modes, checkpoint_id, out, pause_at=pause
        ),
    )
    return run_id, out


def stream_step_messages(out: Feed, values: Any, seen: set[str] | None) -> set[str]:
    """The ``messages`` mode's share of the conversation model: each step's tool call and
    result as soon as a values chunk shows it settled (the graph streams the messages its
    nodes write; the step messages are derived, onward.observe.chat). The first chunk
    only records what the thread already showed."""
    messages = chat_values(values).get("messages") or []
    ids = {m.get("id") for m in messages if isinstance(m, dict)}
    if seen is None:
        return {i for i in ids if i}
    for m in messages:
        mid = m.get("id") if isinstance(m, dict) else None
        if mid and mid not in seen and str(mid).startswith(STEP_MESSAGE_PREFIX):
            seen.add(mid)
            out.put(("messages", [m, {"langgraph_node": "verify"}]))
    return seen


def drive(
    clients: Clients,
    thread_id: str,
    run_id: str,
    command: Command[Any] | None,
    modes: list[str],
    checkpoint_id: str | None,
    out: Feed,
    takeover: bool = False,
    pause_at: Sequence[str] = (),
) -> None:
    """Drive a run for a request, feeding ``out``; ``pause_at``: the request's
    ``interrupt_before`` (the run ends *interrupted* there, as on LangGraph Server)."""
    graph_modes: list[StreamMode] = sorted(
        {GRAPH_MODES[m] for m in modes if m in GRAPH_MODES} | {"values"}
    )
    wanted = {GRAPH_MODES[m] for m in modes if m in GRAPH_MODES}
    status = ApiRunStatus.SUCCESS
    with clients.use() as ow:
        if command is ENDED:  # ended by the request itself ("Mark as Resolved")
            try:
                if "values" in wanted:
                    snap = ow.graph.get_state(ow._config(thread_id))
                    out.put(chunk("values", snap.values))
            finally:
                ow.store.threads.set_run_status(run_id, status)
                ow.store.threads.touch(thread_id)
                out.put(DONE)
            return
        try:
            last: Any = None
            seen: set[str] | None = None
            for mode, data in ow.stream_modes(
                thread_id,
                graph_modes,
                command=command,
                checkpoint_id=checkpoint_id,
                takeover=takeover,
                interrupt_before=pause_at,
            ):
                if mode == "values":
                    last = data
                    if "messages" in wanted:
                        seen = stream_step_messages(out, data, seen)
                if mode in wanted:
                    out.put(chunk(mode, data))
            if ow.pending(thread_id):
                status = ApiRunStatus.INTERRUPTED
                if last is not None and "values" in wanted and "__interrupt__" not in last:
                    # A resumed drive that stops at a new question ends on a values chunk
                    # with the interrupts, as LangGraph Server's streams do.
                    snap = ow.graph.get_state(ow._config(thread_id))
                    out.put(
                        (
                            "values",
                            {
                                **chat_values(snap.values),
                                "__interrupt__": [jsonable(i) for i in snap.interrupts],
                            },
                        )
                    )
            elif pause_at and ow.get(thread_id).paused_before:
                status = ApiRunStatus.INTERRUPTED
            else:
                run = ow.store.get_run(thread_id)
                if run is not None and not run.status.finished:
                    # Drained, or suspended until later: the record stays running, and
                    # recovery drives the run again once nobody holds its lease.
                    status = ApiRunStatus.RUNNING
            ow.store.wake(thread_id)
        except OnwardError as exc:
            status = ApiRunStatus.ERROR
            out.put(("error", {"error": type(exc).__name__, "message": str(exc)}))
        except Exception as exc:  # never a bare 500 mid-stream
            status = ApiRunStatus.ERROR
            out.put(("error", {"error": type(exc).__name__, "message": str(exc)[:500]}))
        finally:
            ow.store.threads.set_run_status(run_id, status)
            ow.store.threads.touch(thread_id)
            out.put(DONE)
