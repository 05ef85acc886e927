"""gate: the scheduler, as a routing function wherever it can be.

``gate`` is a pure function of state: pick ready steps (dependencies done) in
plan order, at most ``max_concurrency`` of them, and fan them out with ``Send``;
or route to finalize. This is the single place later routes (retry, replan,
approve, escalate) plug in, keyed by the failed step's FailureClass.

After a lone step, gate routes straight from execute: one superstep per step.
After a parallel wave it cannot: each task's routing sees only its own writes,
not its siblings', so every task would re-send the others. Then the tasks go to
the ``gate`` *node*, a join that runs once the whole wave has committed.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langgraph.types import Send

from onward import refs
from onward.checks import artifact_names
from onward.state import ExecuteTask, RunState, RunStatus, StepStatus

EXECUTE = "execute"
FINALIZE = "finalize"
GATE = "gate"
ESCALATE = "escalate"
_SETTLED = (StepStatus.DONE, StepStatus.SKIPPED)


def gate(state: RunState) -> list[Send] | str:
    if state.waiting:
        return ESCALATE  # an unknown outcome: stop and ask before anything else runs
    if state.status is not RunStatus.RUNNING or not state.plan.steps:
        return FINALIZE
    # One pass over the records, then set lookups: gate runs after every step, so this
    # loop is O(steps) per step; keep its constant small.
    settled: set[str] = set()
    started: set[str] = set()
    for sid, rec in state.steps.items():
        if rec.status is StepStatus.FAILED:
            return FINALIZE  # failure routes (retry / replan / escalate) plug in here
        if rec.status is not StepStatus.PENDING:
            started.add(sid)
            if rec.status in _SETTLED:
                settled.add(sid)
    sends: list[Send] = []
    for step in state.plan.steps:
        if step.id in started or not all(d in settled for d in step.depends_on):
            continue
        wanted = refs.names(step.args) | {n for c in step.checks for n in artifact_names(c)}
        task = ExecuteTask(
            step=step,
            record=state.record(step.id),
            workdir=state.workdir,
            tool_modules=state.tool_modules,
            inputs={n: state.artifacts[n] for n in wanted if n in state.artifacts},
        )
        sends.append(Send(EXECUTE, task))
        if len(sends) >= state.max_concurrency:
            break
    if not sends:
        return FINALIZE
    # Tell each task how many siblings it has, so its routing knows whether to join.
    for send in sends:
        send.arg = send.arg.model_copy(update={"wave": len(sends)})
    return sends


def after_execute(state: RunState) -> list[Send] | str:
    """Route a finished step: straight on if it ran alone, else join at the gate node."""
    return GATE if state.wave > 1 else gate(state)


def join(state: RunState) -> dict[str, object]:
    """The gate node: no work of its own; its outgoing edge is ``gate``."""
    return {}


def escalate(state: RunState) -> dict[str, object]:
    """Stop the run for a human: status waiting_for_human with the reasons. No side
    effects here (the human-in-the-loop work turns this into an ``interrupt()``)."""
    reasons = "\n".join(f"- {w.step_id}: {w.reason}" for w in state.waiting.values() if w)
    return {
        "status": RunStatus.WAITING_FOR_HUMAN,
        "messages": [AIMessage(f"Waiting for a human:\n{reasons}")],
    }
