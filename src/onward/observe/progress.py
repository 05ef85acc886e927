"""Progress events: emitted by nodes through LangGraph's custom stream, read by the CLI
(Rich progress) and by the Python API (``Onward.stream``) for notebooks."""

from __future__ import annotations

from typing import Any

from langgraph.config import get_config, get_stream_writer
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


_HEADER = ("step_id", "tool", "attempt", "total_steps", "message")
"""The event fields an event-log row keeps beside its detail (when set)."""


def _log_row(kind: EventKind, **fields: Any) -> tuple[str, dict[str, Any], str | None]:
    """(kind, detail, dedupe key) of an event with :class:`ProgressEvent`'s fields, for the
    event log (built without the model: a step emits four)."""
    detail: dict[str, Any] = {k: v for k in _HEADER if (v := fields.get(k)) is not None}
    if not detail.get("message", True):
        del detail["message"]  # "" is the model's default: no message
    detail.update(fields.get("detail") or ())
    once = ONCE_FIELDS.get(kind)
    key = None if once is None else ":".join([kind.value, *(str(detail.get(f)) for f in once)])
    return kind.value, detail, key


QUIET = "__onward_quiet"
"""A ``configurable`` key: set by a drive that does not stream LangGraph's custom mode, so
:func:`emit` builds no stream payload nobody reads (``__`` keys stay out of checkpoint
metadata). Unset (LangGraph's own server, a host's graph), events are streamed."""


EVENT_ROWS: PerThread[Any] = PerThread()
"""The event-log rows of the node running on this thread (see :mod:`onward.observe.per_thread`)."""


def emit(kind: EventKind, **fields: Any) -> None:
    """Send a progress event on LangGraph's custom stream, and keep it for the event log
    (written by the node wrapper before the node's writes commit, see :data:`EVENT_ROWS`)."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a graph run (unit tests of a node)
        return
    EVENT_ROWS.add((utcnow(), *_log_row(kind, **fields)))
    if not configurable.get(QUIET):
        event = ProgressEvent(kind=kind, **fields)
        get_stream_writer()(event.model_dump(mode="json"))
