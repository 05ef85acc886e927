"""``onward report THREAD --html FILE``: one self-contained HTML page (no network, no CDN):
a Gantt-style timeline of the steps, their attempts and the waits for people, the
statuses, the event table and the summary numbers."""

from __future__ import annotations

import json
from datetime import datetime
from importlib import resources
from typing import Any

from jinja2 import Environment, select_autoescape

from onward.model.state import RunState
from onward.observe.kinds import EventKind
from onward.observe.timeline import Summary, TimelineEvent


def _template() -> str:
    return (resources.files("onward") / "templates" / "report.html").read_text(encoding="utf-8")


def _bars(state: RunState, events: list[TimelineEvent], t0: datetime, span: float) -> list[Any]:
    finished = state.status.finished

    def pct(at: datetime) -> float:
        return round(100.0 * max((at - t0).total_seconds(), 0.0) / span, 3)

    rows = []
    for step in state.plan.steps:
        bars: list[dict[str, Any]] = []
        opened: dict[Any, TimelineEvent] = {}
        for e in events:
            if e.step_id != step.id:
                continue
            if e.kind == EventKind.STEP_STARTED:
                opened[("run", e.attempt)] = e
            elif (
                e.kind in (EventKind.STEP_DONE, EventKind.STEP_FAILED)
                and ("run", e.attempt) in opened
            ):
                s = opened.pop(("run", e.attempt))
                ok = e.kind == EventKind.STEP_DONE
                bars.append(
                    {
                        "cls": "ok" if ok else "bad",
                        "left": pct(s.at),
                        "width": max(pct(e.at) - pct(s.at), 0.2),
                        "title": f"attempt {e.attempt}: "
                        + ("done" if ok else str(e.detail.get("failure_class"))),
                    }
                )
            elif e.kind == EventKind.APPROVAL_REQUESTED:
                opened[("wait", e.detail.get("ask_key"))] = e
            elif (
                e.kind == EventKind.APPROVAL_DECIDED and ("wait", e.detail.get("ask_key")) in opened
            ):
                s = opened.pop(("wait", e.detail.get("ask_key")))
                bars.append(
                    {
                        "cls": "wait",
                        "left": pct(s.at),
                        "width": max(pct(e.at) - pct(s.at), 0.2),
                        "title": f"waited for {e.detail.get('by')}: {e.detail.get('action')}",
                    }
                )
        last = max((e.at for e in events if e.step_id == step.id), default=t0)
        for key, s in opened.items():  # still running or waiting, or ended without a word
            if finished:  # the run is over: the bar ends at the step's last event
                width = max(pct(last) - pct(s.at), 0.2)
                cls, title = ("wait", "never answered") if key[0] == "wait" else ("bad", "ended")
            else:
                width = max(100.0 - pct(s.at), 0.2)
                cls, title = ("wait", "waiting") if key[0] == "wait" else ("open", "running")
            bars.append({"cls": cls, "left": pct(s.at), "width": width, "title": title})
        rows.append(
            {
                "id": step.id,
                "tool": step.tool,
                "status": state.status_of(step.id).value,
                "bars": bars,
            }
        )
    return rows


def render_html(
    thread_id: str, state: RunState, events: list[TimelineEvent], summary: Summary
) -> str:
    t0 = summary.started_at or (events[0].at if events else datetime.now())
    end = max([e.at for e in events] + [t0])
    span = max((end - t0).total_seconds(), 0.001)
    env = Environment(autoescape=select_autoescape(default=True))
    shown = [
        {
            **e.model_dump(),
            "detail_text": json.dumps(e.detail, ensure_ascii=False, default=str)[:400],
        }
        for e in events
    ]
    for row, e in zip(shown, events, strict=True):
        row["at"] = e.at
    return env.from_string(_template()).render(
        thread_id=thread_id,
        objective=state.goal.objective if state.goal else "",
        plan_version=state.plan.version,
        summary=summary,
        rows=_bars(state, events, t0, span),
        events=shown,
    )
