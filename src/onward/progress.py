"""Progress events: emitted by nodes through LangGraph's custom stream, read by the CLI
(Rich progress) and by the Python API (``Onward.stream``) for notebooks."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from langgraph.config import get_stream_writer
from pydantic import BaseModel, ConfigDict


class EventKind(StrEnum):
    PLAN_CREATED = "plan_created"
    PLAN_FAILED = "plan_failed"
    STEP_STARTED = "step_started"
    STEP_DONE = "step_done"
    STEP_FAILED = "step_failed"
    STEP_WAITING = "step_waiting"
    RUN_FINISHED = "run_finished"


class ProgressEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: EventKind
    step_id: str | None = None
    tool: str | None = None
    attempt: int | None = None
    total_steps: int | None = None
    message: str = ""


def emit(kind: EventKind, **fields: Any) -> None:
    try:
        writer = get_stream_writer()
    except RuntimeError:  # called outside a graph run (unit tests of a node)
        return
    writer(ProgressEvent(kind=kind, **fields).model_dump(mode="json"))
