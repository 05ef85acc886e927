"""Progress events: emitted by nodes through LangGraph's custom stream, read by the CLI
(Rich progress) and by the Python API (``Onward.stream``) for notebooks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langgraph.config import get_config, get_stream_writer
from pydantic import BaseModel, ConfigDict

from onward.model.clock import utcnow
from onward.observe.kinds import ONCE_FIELDS, EventKind
from onward.observe.per_thread import PerThread

if TYPE_CHECKING:
    from onward.observe.events import LogRow


class ProgressEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: EventKind
    step_id: str | None = None
    tool: str | None = None
    attempt: int | None = None
    total_steps: int | None = None
    message: str = ""
    detail: dict[str, Any] = {}


_HEADER = ("step_id", "tool", "attempt", "total_steps")
"""The event fields an event-log row keeps beside its detail when set (and ``message``
when not empty)."""

_KINDS: dict[EventKind, tuple[str, str | None, tuple[str, ...]]] = {
    kind: (
        kind.value,
        None if once is None else kind.value.replace("%", "%%") + ":%s" * len(once),
        once or (),
    )
    for kind, once in ((kind, ONCE_FIELDS.get(kind)) for kind in EventKind)
}
"""Each kind's stored value, the %-format of its dedupe key (the kind, then its once
fields' values: ``step_done:s3:1``; None: no key) and those fields, looked up once per
event (``kind.value`` is a descriptor call, and formatting beats a join of a generator)."""


def _log_row(kind: EventKind, fields: dict[str, Any]) -> LogRow:
    """The event-log row of an event with :class:`ProgressEvent`'s fields (built without
    the model and without comprehensions' frames: a step emits four)."""
    detail: dict[str, Any] = {}
    for name in _HEADER:
        if (value := fields.get(name)) is not None:
            detail[name] = value
    if message := fields.get("message"):  # "" is the model's default: no message
        detail["message"] = message
    if extra := fields.get("detail"):
        detail.update(extra)
    stored, key_format, once = _KINDS[kind]
    key = None if key_format is None else key_format % tuple(map(detail.get, once))
    return utcnow(), stored, detail, key


QUIET = "__onward_quiet"
"""A ``configurable`` key: set by a drive that does not stream LangGraph's custom mode, so
:func:`emit` builds no stream payload nobody reads (``__`` keys stay out of checkpoint
metadata). Unset (LangGraph's own server, a host's graph), events are streamed."""


EVENT_ROWS: PerThread[LogRow] = PerThread()
"""The event-log rows of the node running on this thread (see :mod:`onward.observe.per_thread`)."""


def emit(kind: EventKind, **fields: Any) -> None:
    """Send a progress event on LangGraph's custom stream, and keep it for the event log
    (written by the node wrapper before the node's writes commit, see :data:`EVENT_ROWS`)."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a graph run (unit tests of a node)
        return
    EVENT_ROWS.add(_log_row(kind, fields))
    if not configurable.get(QUIET):
        event = ProgressEvent(kind=kind, **fields)
        get_stream_writer()(event.model_dump(mode="json"))
