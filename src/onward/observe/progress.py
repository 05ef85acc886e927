"""Progress events: emitted by nodes through LangGraph's custom stream, read by the CLI
(Rich progress) and by the Python API (``Onward.stream``) for notebooks."""

from __future__ import annotations

from typing import Any

from langgraph.config import get_stream_writer
from pydantic import BaseModel, ConfigDict

from onward.model.clock import utcnow
from onward.observe.kinds import ONCE_FIELDS, EventKind
from onward.observe.per_thread import PerThread


class ProgressEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: EventKind
    step_id: str | None = None
    tool: str | None = None
    attempt: int | None = None
    total_steps: int | None = None
    message: str = ""
    detail: dict[str, Any] = {}

    def log_row(self) -> tuple[str, dict[str, Any], str | None]:
        """(kind, detail, dedupe key) for the event log."""
        detail: dict[str, Any] = {
            k: v
            for k, v in (
                ("step_id", self.step_id),
                ("tool", self.tool),
                ("attempt", self.attempt),
                ("total_steps", self.total_steps),
                ("message", self.message or None),
            )
            if v is not None
        }
        detail.update(self.detail)
        fields = ONCE_FIELDS.get(self.kind)
        key = None
        if fields is not None:
            key = ":".join([self.kind.value, *(str(detail.get(f)) for f in fields)])
        return self.kind.value, detail, key


EVENT_ROWS: PerThread[Any] = PerThread()
"""The event-log rows of the node running on this thread (see :mod:`onward.observe.per_thread`)."""


def emit(kind: EventKind, **fields: Any) -> None:
    """Send a progress event on LangGraph's custom stream, and keep it for the event log
    (written by the node wrapper before the node's writes commit, see :data:`EVENT_ROWS`)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:  # called outside a graph run (unit tests of a node)
        return
    event = ProgressEvent(kind=kind, **fields)
    EVENT_ROWS.add((utcnow(), *event.log_row()))
    writer(event.model_dump(mode="json"))
