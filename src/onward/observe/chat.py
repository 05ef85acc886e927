"""The run as a chat conversation: what chat frontends (agent-chat-ui, ``useStream``,
assistant-ui) render.

* :func:`markdown_report` is the final assistant message of a goal: a headline, the steps
  as a table, and the actual result (for the order template the anomalies per rule with
  their counts and example order ids, and where the report was written).
* :func:`conversation` is the thread's ``messages`` value as the server shows it: the
  state's own messages (the human goals, the plan, notes, the final reports) with every
  settled step as an ``AIMessage`` carrying a tool call (name, args, id) followed by a
  ``ToolMessage`` with its result summary, each pair placed before the report of the goal
  it served. It is derived when read, so checkpoints carry no per-step chat messages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from itertools import compress, repeat
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage

from onward.model import references
from onward.model.state import (
    InnerCall,
    PlanStep,
    PlanSteps,
    RunFailure,
    RunFailureKind,
    RunState,
    RunStatus,
    StepStatus,
)

STEP_MESSAGE_PREFIX = "onward-"
"""Ids of the derived step messages start with this (the server streams them in the
``messages`` mode as they appear; the state's own messages stream from the graph)."""
REPORT_KEY = "onward_steps"
"""``additional_kwargs`` key of a final report message: the step ids whose outcome it
reports (those settled during its goal), so :func:`conversation` puts their tool calls
before it."""
MAX_STEP_ROWS = 50
"""Steps listed in a report's table (the rest are counted)."""
MAX_STEP_MESSAGES = 200
"""Tool-call pairs shown per goal; more are summed up in one message (a long run's chat
stays readable and its values small)."""
MAX_EXAMPLES = 3
"""Example order ids per rule in the result table."""
_SETTLED = (StepStatus.DONE, StepStatus.FAILED, StepStatus.SKIPPED)
_SETTLED_SET: frozenset[StepStatus | None] = frozenset(_SETTLED)
_MARK = {StepStatus.DONE: "✓ done", StepStatus.FAILED: "✗ failed", StepStatus.SKIPPED: "– skipped"}

NO_PLAN_HELP = (
    "**What you can do:** ask for a goal the built-in templates handle, e.g. "
    "*Analyze orders.csv, find abnormal orders and give me a summary* or "
    "*copy every file in inbox/ to archive/*; send a declared plan (`input.plan`, "
    "steps with tools and args); or ask whoever runs this server to configure a model "
    "(`OPENAI_API_KEY`, optionally `OPENAI_BASE_URL` and `ONWARD_MODEL`) so any goal can "
    "be planned."
)
"""What a chat user is told when no planner could handle the goal."""

ValueOf = Callable[[str], Any]
"""Reads an artifact's value by name (None when it cannot be read)."""


def _cell(text: Any, limit: int = 120) -> str:
    """Text fit for one Markdown table cell."""
    s = " ".join(str(text).split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _skipped(state: RunState, status: RunStatus, ids: Sequence[str]) -> list[str]:
    """A finished run's steps skipped by a decision, said plainly: a skip is no failure."""
    statuses = state.steps.statuses
    skipped = [sid for sid in ids if statuses.get(sid) is StepStatus.SKIPPED]
    if not skipped or status is not RunStatus.DONE:
        return []
    shown = "; ".join(
        f"{sid} ({_cell(state.record(sid).note or 'skipped', 160)})" for sid in skipped[:10]
    )
    more = f"; and {len(skipped) - 10} more" if len(skipped) > 10 else ""
    n = len(skipped)
    return [f"**{n} step{'' if n == 1 else 's'} skipped by decision:** {shown}{more}", ""]


def markdown_report(
    state: RunState,
    status: RunStatus,
    failure: RunFailure | None,
    value_of: ValueOf,
    ids: Sequence[str] | None = None,
) -> str:
    """The goal's final message: headline, reason, the actual result, the steps as a table
    (``ids``: the steps this goal settled; all of the plan's by default)."""
    objective = state.goal.objective if state.goal else ""
    out = [f"**Run {status.value}**: {_cell(objective, 300)}", ""]
    if failure is not None:
        out += [f"**Reason:** {_cell(failure.message, 600)}", ""]
        if failure.kind is RunFailureKind.PLANNING and not state.plan.steps:
            out += [NO_PLAN_HELP, ""]
    index = state.plan.index()
    # The per-step passes run in C (map, filter, Counter): a report lists every step.
    mine = list(index.ids if ids is None else filter(index.position.__contains__, ids))
    out += _result(state, value_of, mine)
    out += _skipped(state, status, mine)
    if mine:
        statuses = state.steps.statuses
        counts = Counter(map(statuses.get, mine, repeat(StepStatus.PENDING)))
        tally = ", ".join(f"{n} {k}" for k, n in sorted((k.value, n) for k, n in counts.items()))
        out += [f"**Steps** ({len(mine)} of plan v{state.plan.version}: {tally})", ""]
        out += ["| step | tool | status | result |", "|---|---|---|---|"]
        for sid in mine[:MAX_STEP_ROWS]:
            st = statuses.get(sid, StepStatus.PENDING)
            rec = state.record(sid)
            what = _outcome(rec.output.summary if rec.output else "", rec, st)
            tool = index[index.position[sid]].tool
            out.append(f"| {sid} | {tool} | {_MARK.get(st, st.value)} | {_cell(what)} |")
        if len(mine) > MAX_STEP_ROWS:
            out.append(
                f"\n…and {len(mine) - MAX_STEP_ROWS} more steps (`onward show` lists them all)."
            )
        out.append("")
    if state.goal and state.goal.acceptance and status is RunStatus.DONE:
        out.append(f"Acceptance: {len(state.goal.acceptance)} check(s) passed.")
    return "\n".join(out).rstrip() + "\n"


def _outcome(summary: str, rec: Any, st: StepStatus) -> str:
    if st is StepStatus.FAILED and rec.failure is not None:
        return str(rec.failure.message)
    if st is StepStatus.SKIPPED:
        return str(rec.note or "skipped")
    return summary


def _result(state: RunState, value_of: ValueOf, ids: Sequence[str]) -> list[str]:
    """The actual result, for the tools whose output onward knows how to show."""
    out: list[str] = []
    index = state.plan.index()
    statuses = state.steps.statuses
    # Only the steps of these tools are read: found by their encoded bytes, so a
    # 10,000-step chain of other tools is neither decoded nor peeked.
    shown = {index.ids[i] for i in index.where("tool", *_RESULTS)}
    for sid in ids:
        if sid not in shown or statuses.get(sid) is not StepStatus.DONE:
            continue
        view = _RESULTS.get(index.peek(index.position[sid], "tool"))
        step = index[index.position[sid]] if view is not None else None
        if step is None or view is None or not step.output:
            continue
        value = value_of(step.output)
        if isinstance(value, dict):
            out += view(value, step, value_of)
    return out


def _anomalies(value: dict[str, Any], step: PlanStep, value_of: ValueOf) -> list[str]:
    rules = value.get("rules")
    if not isinstance(rules, list):
        return []
    ref = references.parse(step.args.get("validation"))
    validation = value_of(ref[0]) if ref else None
    fields = validation.get("fields", {}) if isinstance(validation, dict) else {}
    id_column = fields.get("order_id")
    total, abnormal = value.get("total_rows"), value.get("anomalous_rows")
    out = [f"**{abnormal} of {total} orders are abnormal.**", ""]
    out += ["| rule | count | example order ids |", "|---|---:|---|"]
    for r in rules:
        if not isinstance(r, dict):
            continue
        examples = r.get("examples") or []
        ids = list(
            dict.fromkeys(
                str(
                    e.get(id_column) if id_column and e.get(id_column) else f"line {e.get('_line')}"
                )
                for e in examples
                if isinstance(e, dict)
            )
        )[:MAX_EXAMPLES]
        note = f" ({r['skipped']})" if r.get("skipped") else ""
        shown = ", ".join(ids) + (" …" if int(r.get("count", 0)) > len(ids) and ids else "")
        out.append(
            f"| {_cell(r.get('rule'))}{_cell(note)} | {r.get('count', 0)} | {_cell(shown) or '—'} |"
        )
    out.append("")
    return out


def _example_id(row: Any, id_column: str | None) -> str:
    if isinstance(row, dict) and id_column and row.get(id_column):
        return str(row[id_column])
    return f"line {row.get('_line') if isinstance(row, dict) else '?'}"


def _written(value: dict[str, Any], step: PlanStep, value_of: ValueOf) -> list[str]:
    path = value.get("path")
    return [f"Report written to `{path}`.", ""] if isinstance(path, str) else []


_RESULTS: dict[str, Callable[[dict[str, Any], PlanStep, ValueOf], list[str]]] = {
    "find_anomalies": _anomalies,
    "render_report": _written,
}


def report_marker(state: RunState, before: Sequence[str] = ()) -> dict[str, Any]:
    """``additional_kwargs`` for a goal's final report: the steps it settled (those not
    already reported by an earlier goal's report, ``before``)."""
    seen = set(before)
    plan_ids = state.plan.index().ids
    settled = map(_SETTLED_SET.__contains__, map(state.steps.statuses.get, plan_ids))
    ids = list(compress(plan_ids, settled))  # in C: the marker names every settled step
    return {REPORT_KEY: [s for s in ids if s not in seen] if seen else ids}


def reported(messages: Sequence[AnyMessage]) -> list[str]:
    """Every step id the reports among ``messages`` already cover."""
    return [
        sid
        for m in messages
        if isinstance(m, AIMessage)
        for sid in (m.additional_kwargs.get(REPORT_KEY) or [])
    ]


def step_messages(state: RunState, ids: Sequence[str]) -> Iterator[AnyMessage]:
    """The tool-call pair of each step in ``ids`` that is settled (at most
    :data:`MAX_STEP_MESSAGES`, then one message counting the rest)."""
    index = state.plan.index()
    for part in _step_parts(state, ids):
        if isinstance(part, str):
            yield from step_pair(state, index, part)
        else:
            yield part


def _step_parts(state: RunState, ids: Sequence[str]) -> Iterator[str | AnyMessage]:
    """The settled steps among ``ids`` (each its id, standing for :func:`step_pair`), at
    most :data:`MAX_STEP_MESSAGES`, then one message counting the rest."""
    index = state.plan.index()
    statuses = state.steps.statuses
    settled = [sid for sid in ids if sid in index.position and statuses.get(sid) in _SETTLED]
    for shown, sid in enumerate(settled):
        if shown >= MAX_STEP_MESSAGES:
            yield AIMessage(
                f"…and {len(settled) - shown} more steps (see the report).",
                id=f"onward-steps-more-{sid}",
            )
            return
        yield sid


def step_pair(state: RunState, index: PlanSteps, sid: str) -> list[AnyMessage]:
    """A settled step's messages: its inner tool calls, then its own call and result
    (``index``: the plan's index, ``state.plan.index()``)."""
    step = index[index.position[sid]]
    rec = state.record(sid)
    st = state.steps.statuses[sid]
    call_id = f"call-{sid}"
    text = _outcome(rec.output.summary if rec.output else "", rec, st) or st.value
    return [
        *inner_messages(sid, rec.calls),
        AIMessage(
            step.description or "",
            id=f"onward-step-{sid}",
            tool_calls=[{"name": step.tool, "args": step.args, "id": call_id, "type": "tool_call"}],
        ),
        ToolMessage(
            text,
            tool_call_id=call_id,
            name=step.tool,
            id=f"onward-result-{sid}",
            status="success" if st is StepStatus.DONE else "error",
        ),
    ]


def inner_messages(sid: str, calls: Sequence[InnerCall]) -> Iterator[AnyMessage]:
    """The tool calls a tool-calling step made (its record's ``calls``), each as an AI
    tool call and its tool message, before the step's own pair."""
    for i, c in enumerate(calls):
        call_id = f"call-{sid}-{i}"
        yield AIMessage(
            "",
            id=f"onward-step-{sid}-call-{i}",
            tool_calls=[{"name": c.tool, "args": c.args, "id": call_id, "type": "tool_call"}],
        )
        yield ToolMessage(
            c.result,
            tool_call_id=call_id,
            name=c.tool,
            id=f"onward-result-{sid}-call-{i}",
            status="success" if c.ok else "error",
        )


def conversation(state: RunState) -> list[AnyMessage]:
    """The thread's messages as a chat: each goal's steps as tool calls before its report,
    the steps of the goal still running at the end."""
    index = state.plan.index()
    out: list[AnyMessage] = []
    for part in conversation_parts(state):
        if isinstance(part, str):
            out.extend(step_pair(state, index, part))
        else:
            out.append(part)
    return out


def conversation_parts(state: RunState) -> Iterator[str | AnyMessage]:
    """:func:`conversation` with each settled step's messages left as the step's id (a
    reader that keeps the messages of a step it has seen makes them once:
    onward.serve.encoded)."""
    covered: set[str] = set()
    for m in state.messages:
        ids = m.additional_kwargs.get(REPORT_KEY) if isinstance(m, AIMessage) else None
        if ids:
            yield from _step_parts(state, ids)
            covered.update(ids)
        yield m
    if state.plan.steps:
        rest = [s for s in state.plan.index().ids if s not in covered]
        yield from _step_parts(state, rest)
