"""What happened in a run, from its event log: the timeline, and the summary numbers.

Every number of the summary is computed from the events it shows (plus the plan, for
which tool a step used), so the two always agree; tests cross-check them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from onward.observe.events import Event
from onward.observe.kinds import EventKind
from onward.observe.rows import timeline_rows

if TYPE_CHECKING:
    from onward.model.state import RunState


class TimelineEvent(BaseModel):
    """One row of ``onward timeline --json``."""

    model_config = ConfigDict(frozen=True)

    id: int
    at: datetime
    kind: str
    step_id: str | None = None
    attempt: int | None = None
    detail: dict[str, Any] = {}


class Timeline(list[TimelineEvent]):
    """A run's events in order: a list, shown by Jupyter as a table (the first 50)."""

    def _repr_html_(self) -> str:
        from onward.notebook.html import timeline_html

        return timeline_html(self)


def timeline(
    events: list[Event], *, step: str | None = None, kinds: set[str] | None = None
) -> Timeline:
    return Timeline(
        TimelineEvent(
            id=r.id, at=r.at, kind=r.kind, step_id=r.step_id, attempt=r.attempt, detail=r.detail
        )
        for r in timeline_rows(events, step=step, kinds=kinds)
    )


class Intervention(BaseModel):
    model_config = ConfigDict(frozen=True)

    step_id: str | None
    kind: str
    asked_at: datetime
    decided_at: datetime | None
    waited_seconds: float
    action: str | None = None
    by: str | None = None


class Summary(BaseModel):
    """``onward summary --json``."""

    model_config = ConfigDict(frozen=True)

    thread_id: str
    status: str
    started_at: datetime | None
    ended_at: datetime | None
    total_seconds: float
    waiting_seconds: float
    """Time spent waiting for people (approval or escalation asked → answered)."""
    busy_seconds: float
    steps: int
    steps_done: int
    attempts: dict[str, int]
    retries: dict[str, int]
    """Attempts beyond the first, per step that had any."""
    failures_by_class: dict[str, int]
    interventions: list[Intervention]
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost: float
    cost_by_step: dict[str, float]
    cost_by_tool: dict[str, float]

    def _repr_html_(self) -> str:
        """How Jupyter shows the summary: the numbers as a table."""
        from onward.notebook.html import summary_html

        return summary_html(self)


def _covered(spans: list[tuple[datetime, datetime]]) -> float:
    """Seconds covered by the union of the spans (parallel questions wait together)."""
    total, end = 0.0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += (stop - start).total_seconds()
            end = stop
        elif stop > end:
            total += (stop - end).total_seconds()
            end = stop
    return total


def summarise(thread_id: str, state: RunState, events: list[Event], now: datetime) -> Summary:
    events = sorted(events, key=lambda e: (e.at, e.id))
    started = [e.at for e in events if e.kind in (EventKind.RUN_STARTED, EventKind.RUN_RESUMED)]
    finished = [e.at for e in events if e.kind in (EventKind.RUN_FINISHED, EventKind.RUN_CANCELLED)]
    start = min(started) if started else (events[0].at if events else None)
    end = max(finished) if finished and state.status.finished else None
    total = ((end or now) - start).total_seconds() if start else 0.0

    attempts: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    for e in events:
        sid = e.detail.get("step_id")
        if e.kind == EventKind.STEP_STARTED and isinstance(sid, str):
            attempts[sid] += 1
        elif e.kind == EventKind.STEP_FAILED:
            failures[str(e.detail.get("failure_class"))] += 1

    def intervention(q: Event, answer: Event | None) -> Intervention:
        """A question and its answer; one never answered is open until now (or the end)."""
        until = answer.at if answer is not None else end or now
        return Intervention(
            step_id=q.detail.get("step_id"),
            kind=str(q.detail.get("wait_kind")),
            asked_at=q.at,
            decided_at=answer.at if answer is not None else None,
            waited_seconds=max((until - q.at).total_seconds(), 0.0),
            action=answer.detail.get("action") if answer is not None else None,
            by=answer.detail.get("by") if answer is not None else None,
        )

    asked: dict[str, Event] = {}
    interventions: list[Intervention] = []
    for e in events:
        key = str(e.detail.get("ask_key"))
        if e.kind == EventKind.APPROVAL_REQUESTED:
            asked.setdefault(key, e)
        elif e.kind == EventKind.APPROVAL_DECIDED and key in asked:
            interventions.append(intervention(asked.pop(key), e))
    interventions += [intervention(q, None) for q in asked.values()]
    waiting = _covered(
        [(i.asked_at, i.asked_at + timedelta(seconds=i.waited_seconds)) for i in interventions]
    )

    tools = {s.id: s.tool for s in state.plan.steps}
    calls = [e for e in events if e.kind == EventKind.MODEL_CALL and e.detail.get("error") is None]
    by_step: defaultdict[str, float] = defaultdict(float)
    by_tool: defaultdict[str, float] = defaultdict(float)
    for e in calls:
        cost = float(e.detail.get("cost") or 0.0)
        sid = e.detail.get("step_id") or "(run)"
        by_step[sid] += cost
        by_tool[tools.get(sid, str(e.detail.get("purpose")))] += cost
    return Summary(
        thread_id=thread_id,
        status=state.status.value,
        started_at=start,
        ended_at=end,
        total_seconds=round(total, 3),
        waiting_seconds=round(waiting, 3),
        busy_seconds=round(max(total - waiting, 0.0), 3),
        steps=len(state.plan.steps),
        steps_done=sum(1 for s in state.plan.steps if state.status_of(s.id).value == "done"),
        attempts=dict(attempts),
        retries={k: v - 1 for k, v in attempts.items() if v > 1},
        failures_by_class=dict(failures),
        interventions=interventions,
        model_calls=len(calls),
        input_tokens=sum(int(e.detail.get("input_tokens") or 0) for e in calls),
        output_tokens=sum(int(e.detail.get("output_tokens") or 0) for e in calls),
        cost=round(sum(float(e.detail.get("cost") or 0.0) for e in calls), 8),
        cost_by_step=dict(by_step),
        cost_by_tool=dict(by_tool),
    )
