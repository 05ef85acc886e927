"""A run's timeline as plain rows: which events it shows, in which order, with which step
and attempt. No pydantic, so ``onward timeline`` prints it without importing pydantic; the
model of a row (``onward timeline --json``, :meth:`Onward.timeline`) is built from these in
:mod:`onward.observe.timeline`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from onward.observe.events import Event


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """The fields of one :class:`onward.observe.timeline.TimelineEvent`."""

    id: int
    at: datetime
    kind: str
    step_id: str | None
    attempt: int | None
    detail: dict[str, Any]


def timeline_rows(
    events: Iterable[Event], *, step: str | None = None, kinds: set[str] | None = None
) -> list[TimelineRow]:
    """The events of ``step`` (all without it) of ``kinds`` (all without them), by time."""
    out = []
    for e in sorted(events, key=lambda e: (e.at, e.id)):
        sid = e.detail.get("step_id")
        if step is not None and sid != step:
            continue
        if kinds and e.kind not in kinds:
            continue
        attempt = e.detail.get("attempt")
        out.append(
            TimelineRow(
                id=e.id,
                at=e.at,
                kind=e.kind,
                step_id=sid if isinstance(sid, str) else None,
                attempt=attempt if isinstance(attempt, int) else None,
                detail=e.detail,
            )
        )
    return out
