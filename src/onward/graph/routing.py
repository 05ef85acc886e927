"""gate: the scheduler as a routing function (no superstep of its own).

It is a pure function of state: pick ready steps (dependencies done) in plan
order, at most ``max_concurrency`` of them, and fan them out with ``Send``; or
route to finalize. This is the single place later routes (retry, replan,
approve, escalate) plug in, keyed by the failed step's FailureClass.
"""

from __future__ import annotations

from langgraph.types import Send

from onward import refs
from onward.checks import artifact_names
from onward.state import ExecuteTask, RunState, RunStatus, StepStatus

EXECUTE = "execute"
FINALIZE = "finalize"
_SETTLED = (StepStatus.DONE, StepStatus.SKIPPED)


def gate(state: RunState) -> list[Send] | str:
    if state.status is not RunStatus.RUNNING or not state.plan.steps:
        return FINALIZE
    if any(r.status is StepStatus.FAILED for r in state.steps.values()):
        return FINALIZE  # failure routes (retry / replan / escalate) plug in here
    sends: list[Send] = []
    for step in state.plan.steps:
        if state.status_of(step.id) is not StepStatus.PENDING:
            continue
        if all(state.status_of(d) in _SETTLED for d in step.depends_on):
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
    return sends or FINALIZE
