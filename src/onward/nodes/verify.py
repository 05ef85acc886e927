"""verify: judge every executed step by deterministic checks before it may be done.

Checks are the tool's defaults plus the step's own. All pass → done (and its
named output becomes a run artifact); any finding → failed as ``validation``
with the findings recorded. A step whose execution failed is marked failed here,
so every terminal transition happens in one node.
"""

from __future__ import annotations

from typing import Any

from onward import refs
from onward.checks import artifact_names, evaluate
from onward.nodes.deps import NodeDeps
from onward.progress import EventKind, emit
from onward.state import (
    ArtifactRef,
    FailureClass,
    RunState,
    StepFailure,
    StepRecord,
    StepStatus,
    transition,
)


def make_verify_node(deps: NodeDeps) -> Any:
    def verify(state: RunState) -> dict[str, Any]:
        records: dict[str, StepRecord] = {}
        produced: dict[str, ArtifactRef] = {}
        for rec in state.steps.values():
            if rec.status is not StepStatus.RUNNING:
                continue
            step = state.plan.step(rec.id)
            if rec.failure is not None or rec.output is None:
                records[rec.id] = transition(rec, StepStatus.FAILED)
                emit(
                    EventKind.STEP_FAILED,
                    step_id=rec.id,
                    tool=step.tool,
                    attempt=rec.attempts,
                    message=rec.failure.message if rec.failure else "no output",
                )
                continue
            spec = deps.registry.get(step.tool)
            checks = [*(spec.checks if spec else ()), *step.checks]
            visible = dict(state.artifacts)
            if step.output:
                visible[step.output] = rec.output
            wanted = {n for c in checks for n in artifact_names(c)} | refs.names(step.args)
            ctx = deps.check_context(state.workdir, {n: visible[n] for n in wanted if n in visible})
            try:
                output = deps.artifacts.get(rec.output)
                findings = [f for c in checks for f in evaluate(c, output, ctx)]
            except Exception as exc:
                findings = [f"output could not be read: {exc}"]
            if findings:
                failure = StepFailure(
                    failure_class=FailureClass.VALIDATION,
                    message="; ".join(findings),
                    error_type="CheckFailed",
                )
                records[rec.id] = transition(
                    rec, StepStatus.FAILED, failure=failure, findings=findings
                )
                emit(
                    EventKind.STEP_FAILED,
                    step_id=rec.id,
                    tool=step.tool,
                    attempt=rec.attempts,
                    message=failure.message,
                )
            else:
                records[rec.id] = transition(rec, StepStatus.DONE)
                if step.output:
                    produced[step.output] = rec.output
                emit(
                    EventKind.STEP_DONE,
                    step_id=rec.id,
                    tool=step.tool,
                    attempt=rec.attempts,
                    total_steps=len(state.plan.steps),
                    message=rec.output.summary,
                )
        updates: dict[str, Any] = {"steps": records}
        if produced:
            updates["artifacts"] = produced
        return updates

    return verify
