"""verify: judge a step's output by deterministic checks before it may be done.

Runs inside the execute task, after the tool and before the task's writes
commit, so "done" is never saved without its evidence, and a step costs one
superstep (one checkpoint) instead of two. Checks are the tool's defaults plus
the step's own. All pass → done; any finding → failed as ``validation``, with
the findings recorded.
"""

from __future__ import annotations

from typing import Any

from onward.checks import evaluate
from onward.nodes.deps import NodeDeps
from onward.state import (
    ArtifactRef,
    ExecuteTask,
    FailureClass,
    StepFailure,
    StepRecord,
    StepStatus,
    transition,
)


def verify_step(deps: NodeDeps, task: ExecuteTask, executed: StepRecord, output: Any) -> StepRecord:
    """``executed`` is the running record with its output ref; returns it done or failed."""
    assert executed.output is not None
    step = task.step
    spec = deps.registry.get(step.tool)
    checks = [*(spec.checks if spec else ()), *step.checks]
    visible: dict[str, ArtifactRef] = dict(task.inputs)
    if step.output:
        visible[step.output] = executed.output
    ctx = deps.check_context(task.workdir, visible, confined=task.confine_paths)
    findings = [f for c in checks for f in evaluate(c, output, ctx)]
    if not findings:
        return transition(executed, StepStatus.DONE)
    failure = StepFailure(
        failure_class=FailureClass.VALIDATION, message="; ".join(findings), error_type="CheckFailed"
    )
    return transition(executed, StepStatus.FAILED, failure=failure, findings=findings)
