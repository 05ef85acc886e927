"""verify: the only place a step becomes done.

execute saves a step's output as *produced*; verify then runs the tool's default checks
and the step's own on it (and, when asked, a model's review, which can fail a step the
checks passed, never pass one). All pass → done, and the output becomes a run artifact;
any finding → failed as ``validation``, with the findings recorded, routed by the route
table like any failure. One verify superstep checks a whole parallel wave.

Verify's work is reproducible (it reads saved outputs and the work directory), so its
superstep does not cost a durable commit of its own: the savers commit it with the next
step's writes, and a crash before that runs verify again — never the tool
(checkpointing/savers.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.model import budget, references
from onward.model.state import (
    ArtifactRef,
    ExecuteTask,
    FailureClass,
    Goal,
    PlanStep,
    RunState,
    RunUpdate,
    StepFailure,
    StepRecord,
    StepStatus,
    Usage,
    add_usage,
    transition,
)
from onward.nodes.deps import NodeDeps, thread_of
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.policies.retry import DEFAULT_RETRY
from onward.testing import faults as diagnostics
from onward.tools.registry import load_tool_modules
from onward.verification.checks import artifact_names, evaluate, with_args
from onward.verification.failures import settle
from onward.verification.judge import judge_step

_NO_USAGE = Usage()
"""The usage of a step no model reviewed (frozen, so one instance serves every step)."""


def check_step(deps: NodeDeps, task: ExecuteTask, produced: StepRecord, output: Any) -> StepRecord:
    """The deterministic verdict on a produced output: the record done, or failed with its
    findings."""
    assert produced.output is not None
    step = task.step
    spec = deps.registry.get(step.tool)
    # The step's own checks follow its args as they ran (an approved edit of a path too).
    checks = [*(spec.checks if spec else ()), *(with_args(c, step.args) for c in step.checks)]
    visible: dict[str, ArtifactRef] = dict(task.inputs)
    if step.output:
        visible[step.output] = produced.output
    ctx = deps.check_context(task.workdir, visible, confined=task.confine_paths)
    findings = [f for c in checks for f in evaluate(c, output, ctx)]
    if not findings:
        return transition(produced, StepStatus.DONE)
    failure = StepFailure(
        failure_class=FailureClass.VALIDATION, message="; ".join(findings), error_type="CheckFailed"
    )
    return transition(produced, StepStatus.FAILED, failure=failure, findings=findings)


def inputs_of(state: RunState, step: PlanStep) -> dict[str, ArtifactRef]:
    """The run artifacts a step's args and checks refer to."""
    wanted = references.names(step.args) | {n for c in step.checks for n in artifact_names(c)}
    return {n: state.artifacts[n] for n in wanted if n in state.artifacts}


def judge_goal(deps: NodeDeps, state: RunState, step: PlanStep) -> Goal | None:
    """The goal a model reviews the step's output against, when one should."""
    wanted = step.judge or (state.goal is not None and state.goal.judge)
    if deps.model is None or not wanted or budget.model_budget_spent(state) is not None:
        return None
    return state.goal


def verify(state: RunState, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> RunUpdate:
    deps = runtime.context
    thread_id = thread_of(config)
    load_tool_modules(state.tool_modules)
    position = state.plan.index().position
    status_of = state.steps.statuses.get
    # A produced step has a record: found among the open records in plan order, not by a
    # scan of every step of the plan (verify runs after every step).
    produced = sorted(
        (s for s in state.steps.open_ids if status_of(s) is StepStatus.PRODUCED and s in position),
        key=position.__getitem__,
    )
    steps: dict[str, StepRecord] = {}
    artifacts: dict[str, ArtifactRef] = {}
    usage = _NO_USAGE
    for sid in produced:
        step = state.plan.step(sid)
        record, spent = _verify_one(deps, state, step, state.steps[sid], thread_id)
        if spent is not _NO_USAGE:  # adding nothing gives the same usage
            usage = add_usage(usage, spent)
        steps[sid] = record
        if record.status is StepStatus.DONE and step.output and record.output is not None:
            artifacts[step.output] = record.output
    updates: RunUpdate = {"steps": steps}
    if artifacts:
        updates["artifacts"] = artifacts
    if usage is not _NO_USAGE and usage != _NO_USAGE:
        updates["usage"] = usage
    return updates


def _verify_one(
    deps: NodeDeps, state: RunState, step: PlanStep, produced: StepRecord, thread_id: str
) -> tuple[StepRecord, Usage]:
    assert produced.output is not None
    spec = deps.registry.get(step.tool)
    task = ExecuteTask(
        step=step,
        record=produced,
        workdir=state.workdir,
        tool_modules=state.tool_modules,
        inputs=inputs_of(state, step),
        max_replans=state.budget.max_replans,
        confine_paths=state.policy.confine_paths,
        judge_goal=judge_goal(deps, state, step),
    )
    usage = _NO_USAGE
    diagnostics.fault_point("before_verify", step.id)
    output = deps.artifacts.get(produced.output)
    record = check_step(deps, task, produced, output)
    diagnostics.fault_point("inside_verify", step.id)
    emit(
        EventKind.VERIFIED,
        step_id=step.id,
        tool=step.tool,
        attempt=produced.attempts,
        detail={"passed": record.status is StepStatus.DONE, "findings": record.findings},
    )
    if record.status is StepStatus.DONE and task.judge_goal is not None:
        verdict, findings, usage = judge_step(deps, task, output, thread_id)
        if verdict is not None:  # the judge fails what the checks passed, never more
            record = transition(produced, StepStatus.FAILED, failure=verdict, findings=findings)
    # Convergence is judged against the record as the attempt found it (no copy when the
    # record already says so: a first attempt, whose failure and history are empty).
    found = produced.history[-1] if produced.history else None
    before = (
        produced if produced.failure is found else produced.model_copy(update={"failure": found})
    )
    policy = step.retry or (spec.retry if spec else None) or DEFAULT_RETRY
    record = settle(record, before, policy, state.budget.max_replans, step.tool)
    done = record.status is StepStatus.DONE
    emit(
        EventKind.STEP_DONE if done else EventKind.STEP_FAILED,
        step_id=step.id,
        tool=step.tool,
        attempt=produced.attempts,
        message=(
            produced.output.summary
            if done
            else (record.failure.message if record.failure else "failed")
        ),
        detail={"duration": _seconds(produced.started_at, produced.ended_at)}
        | ({"failure_class": record.failure.failure_class.value} if record.failure else {}),
    )
    return record, usage


def _seconds(start: datetime | None, end: datetime | None) -> float:
    return round((end - start).total_seconds(), 6) if start and end else 0.0


def pending_checks(deps: NodeDeps, state: RunState) -> dict[str, list[dict[str, Any]]]:
    """The checks verify will run, by produced step (what ``onward show --at`` lists for an
    output produced but not yet verified)."""
    load_tool_modules(state.tool_modules)
    out: dict[str, list[dict[str, Any]]] = {}
    for step in state.plan.steps:
        if state.status_of(step.id) is not StepStatus.PRODUCED:
            continue
        spec = deps.registry.get(step.tool)
        checks = [*(spec.checks if spec else ()), *(with_args(c, step.args) for c in step.checks)]
        out[step.id] = [c.model_dump(mode="json") for c in checks]
    return out
