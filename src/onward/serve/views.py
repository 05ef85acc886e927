"""Threads, runs and states as the API shows them, and who may see a thread.

A thread is an onward run (plus its API row, for threads made through the API): its
status is read from the run's lease and questions, its values from the graph's state,
both through onward.observe.reading (the questions without LangGraph where that read is
exact; the values are LangGraph's snapshot, as LangGraph Server shows them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException
from fastapi.responses import Response
from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from onward.client import Onward
from onward.model.state import RunStatus
from onward.observe import reading
from onward.serve.encoded import dumps, kept_by, state_bytes
from onward.serve.wire import ASSISTANT_ID, EPOCH, GRAPH_ID, chat_values, jsonable, thread_state
from onward.store.database import RunRow
from onward.store.runs import ApiRunRow, ApiRunStatus, ThreadRow


def not_found(thread_id: str) -> HTTPException:
    return HTTPException(404, f"Thread {thread_id} not found")


def check_assistant(assistant_id: str) -> None:
    if assistant_id not in (GRAPH_ID, ASSISTANT_ID):
        raise HTTPException(404, f"Assistant {assistant_id} not found; use {GRAPH_ID!r}")


@dataclass(frozen=True)
class Known:
    """What a request already read of its thread, under the thread's lock, and found
    free (no run driven or queued on it): its API row, whether an onward run has its id."""

    row: ThreadRow | None
    has_run: bool


def read_thread(ow: Onward, thread_id: str) -> Known:
    """The thread's API row and whether a run has its id: two reads, once per request."""
    return Known(ow.store.threads.get(thread_id), ow.store.get_run(thread_id) is not None)


def check_visible(thread_id: str, known: Known, who: str, tokens: dict[str, str]) -> None:
    """:func:`~onward.serve.views.visible` on rows already read: 404 when the thread does
    not exist or (with ``tokens``) is someone else's; a run started outside the API (no
    row) is visible only without tokens."""
    if known.row is None:
        if tokens or not known.has_run:
            raise not_found(thread_id)
    elif tokens and known.row.owner != who:
        raise not_found(thread_id)


def visible(ow: Onward, thread_id: str, who: str, tokens: dict[str, str]) -> ThreadRow | None:
    """The thread's API row (None for a run started outside the API); 404 when the
    thread does not exist or belongs to someone else (with ``tokens`` configured)."""
    row = ow.store.threads.get(thread_id)
    has_run = row is not None or (not tokens and ow.store.get_run(thread_id) is not None)
    check_visible(thread_id, Known(row, has_run), who, tokens)
    return row


def driven(ow: Onward, thread_id: str, *, has_run: bool | None = None) -> bool:
    """Whether a run drives the thread (its status is then ``busy``), without reading the
    run's questions: it has an onward run (``has_run``: read already) whose lease is live."""
    if has_run is None:
        has_run = ow.store.get_run(thread_id) is not None
    return has_run and ow.store.leases.live(thread_id)


def thread_status(ow: Onward, thread_id: str) -> str:
    return status_of(ow, thread_id, ow.store.get_run(thread_id))


def status_of(ow: Onward, thread_id: str, run: RunRow | None) -> str:
    """:func:`thread_status` of a thread whose onward run (``run``) was read already."""
    if run is None:
        return "idle"
    if driven(ow, thread_id, has_run=True):
        return "busy"
    if ow.pending(thread_id):
        return "interrupted"
    if run.status is RunStatus.FAILED:
        return "error"
    return "interrupted" if _paused_by_request(ow, thread_id, run.status) else "idle"


def _paused_by_request(ow: Onward, thread_id: str, status: RunStatus) -> bool:
    """The thread's last API run ended where its request asked it to pause
    (``interrupt_before`` / ``_after``): that run is *success*, its thread *interrupted*
    (as on LangGraph Server), so a client still sees it stopped short."""
    if status.finished:
        return False
    last = ow.store.threads.runs(thread_id)[:1]
    if not last or last[0].status is not ApiRunStatus.SUCCESS:
        return False
    if not (last[0].pause_before or last[0].pause_after):
        return False
    return bool(reading.snapshot(ow, thread_id).next)


def thread_json(
    ow: Onward, thread_id: str, row: ThreadRow | None, *, unused: bool = False
) -> dict[str, Any]:
    """A thread as LangGraph Server answers it. ``unused``: no run can have its id (the
    server made the id just now), so none is read."""
    run = None if unused else ow.store.get_run(thread_id)
    values: Any = None
    interrupts: dict[str, Any] = {}
    if run is not None:
        snap = reading.snapshot(ow, thread_id)
        values = chat_values(snap.values) if snap.values else None
        for task in snap.tasks:
            if task.interrupts:
                interrupts[task.id] = [jsonable(i) for i in task.interrupts]
    created = row.created_at.isoformat() if row else run.created_at.isoformat() if run else EPOCH
    updated = row.updated_at.isoformat() if row else run.updated_at.isoformat() if run else EPOCH
    metadata = dict(row.metadata) if row else {"graph_id": GRAPH_ID}
    return {
        "thread_id": thread_id,
        "created_at": created,
        "updated_at": updated,
        "state_updated_at": run.updated_at.isoformat() if run else updated,
        "metadata": metadata,
        "config": {"configurable": {}},
        "status": status_of(ow, thread_id, run),
        "values": values,
        "error": None,  # LangGraph Server's field for a failed run's error (onward's is in values)
        "interrupts": interrupts,
    }


def run_json(r: ApiRunRow) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "thread_id": r.thread_id,
        "assistant_id": r.assistant_id,
        "created_at": r.created_at.isoformat(),
        "updated_at": r.updated_at.isoformat(),
        "status": r.status.value,
        # As LangGraph Server's runs: the graph and assistant beside the caller's metadata.
        "metadata": {**r.metadata, "graph_id": GRAPH_ID, "assistant_id": r.assistant_id},
        "multitask_strategy": "reject",
        "kwargs": {},
    }


def at_checkpoint(ow: Onward, thread_id: str, checkpoint_id: str | None) -> RunnableConfig:
    """The graph config of a thread, at ``checkpoint_id`` when one is given."""
    config = ow._config(thread_id)
    if checkpoint_id:
        config["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
    return config


def snapshot_at(ow: Onward, thread_id: str, checkpoint_id: str | None) -> StateSnapshot:
    """The thread's state snapshot (at ``checkpoint_id``; 404 for one it does not hold)."""
    snap = ow.graph.get_state(at_checkpoint(ow, thread_id, checkpoint_id))
    if checkpoint_id and snap.created_at is None:
        raise HTTPException(404, f"Checkpoint {checkpoint_id} not found")
    return snap


def state_at(ow: Onward, thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
    return thread_state(snapshot_at(ow, thread_id, checkpoint_id))


def state_answer(ow: Onward, thread_id: str, checkpoint_id: str | None) -> Response:
    """The thread's state as the answer of a state route (onward.serve.encoded)."""
    snap = snapshot_at(ow, thread_id, checkpoint_id)
    return json_answer(state_bytes(snap, kept_by(ow.store.saver)))


def history_answer(ow: Onward, snaps: Iterable[StateSnapshot]) -> Response:
    """A history page as its route answers it, each state joined from kept parts."""
    kept = kept_by(ow.store.saver)
    return json_answer(b"[" + b",".join(state_bytes(s, kept) for s in snaps) + b"]")


def as_json(data: Any) -> Response:
    """A JSON answer of plain JSON data, encoded as FastAPI's default answer encodes it
    (the same bytes) without its ``jsonable_encoder`` walk first (on a long thread's
    state that walk cost far more than the encoding; docs/benchmarks.md)."""
    return json_answer(dumps(data))


def json_answer(body: bytes) -> Response:
    return Response(body, media_type="application/json")
