"""verify: the only place a step becomes done.

execute saves a step's output as *produced*; verify then runs the tool's default checks
and the step's own on it (and, when asked, a model's review, which can fail a step the
checks passed, never pass one). All pass → done, and the output becomes a run artifact;
any finding → failed as ``validation``, with the findings recorded, routed by the route
table like any failure. One verify superstep checks a whole parallel wave.

A judge that gives no verdict (an outage, a refused key, a verdict unreadable twice; see
verification/judge.py) never fails the step and never runs its tool again: by the run's
policy (``judge_failure``) the step passes with its review recorded as missing
(``unjudged``), or stays produced and waits for a person (a ``judge`` question, asked by
the approve node: :func:`answer_judge` applies the answer). Retrying the review is verify
again on the same output.

Verify's work is reproducible (it reads saved outputs and the work directory), so its
superstep does not cost a durable commit of its own: the savers commit it with the next
step's writes, and a crash before that runs verify again — never the tool
(checkpointing/savers.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Command

from onward import faults
from onward.errors import AnswerError, JudgeUnavailable
from onward.model import references
from onward.model.state import (
    ApproveTask,
    ArtifactRef,
    DecisionAction,
    ExecuteTask,
    FailureClass,
    Goal,
    PlanStep,
    RunFailure,
    RunFailureKind,
    RunState,
    RunStatus,
    RunUpdate,
    StepFailure,
    StepRecord,
    StepStatus,
    Usage,
    Waiting,
    WaitKind,
    add_usage,
    transition,
)
from onward.nodes.asking import decision, skip_downstream
from onward.nodes.deps import NodeDeps, thread_of
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.people.approvals import Answer, AnswerType
from onward.policies.retry import DEFAULT_RETRY
from onward.tools.registry import load_tool_modules
from onward.verification.checks import artifact_names, evaluate, with_args
from onward.verification.failures import settle
from onward.verification.judge import judge_step, unavailable

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
    # The tool's own contract on the output first (a model step's output schema).
    own = spec.output_findings(step.args, output) if spec and spec.output_findings else []
    findings = [*own, *(f for c in checks for f in evaluate(c, output, ctx))]
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


def judge_goal(state: RunState, step: PlanStep) -> Goal | None:
    """The goal a model reviews the step's output against, when the run or the step asks
    for a review (whether a judge can run is found out when it is asked)."""
    wanted = step.judge or (state.goal is not None and state.goal.judge)
    return state.goal if wanted else None


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
    waiting: dict[str, Waiting | None] = {}
    usage = _NO_USAGE
    for sid in produced:
        step = state.plan.step(sid)
        record, spent = _verify_one(deps, state, step, state.steps[sid], thread_id)
        if spent is not _NO_USAGE:  # adding nothing gives the same usage
            usage = add_usage(usage, spent)
        if isinstance(record, Waiting):  # the judge could not run: a person decides
            waiting[sid] = record
            continue
        steps[sid] = record
        if record.status is StepStatus.DONE and step.output and record.output is not None:
            artifacts[step.output] = record.output
    updates: RunUpdate = {"steps": steps}
    if artifacts:
        updates["artifacts"] = artifacts
    if waiting:
        updates["waiting"] = waiting
    if usage is not _NO_USAGE and usage != _NO_USAGE:
        updates["usage"] = usage
    return updates


def _verify_one(
    deps: NodeDeps, state: RunState, step: PlanStep, produced: StepRecord, thread_id: str
) -> tuple[StepRecord | Waiting, Usage]:
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
        judge_goal=judge_goal(state, step),
    )
    usage = _NO_USAGE
    faults.reach(faults.Fault.BEFORE_VERIFY, step.id)
    output = deps.artifacts.get(produced.output)
    record = check_step(deps, task, produced, output)
    faults.reach(faults.Fault.INSIDE_VERIFY, step.id)
    emit(
        EventKind.VERIFIED,
        step_id=step.id,
        tool=step.tool,
        attempt=produced.attempts,
        detail={"passed": record.status is StepStatus.DONE, "findings": record.findings},
    )
    # A step a person (or the policy) passed without its review is not reviewed again.
    if record.status is StepStatus.DONE and task.judge_goal is not None and not record.unjudged:
        try:
            if (why := unavailable(deps, state)) is not None:
                raise JudgeUnavailable(why, _NO_USAGE)
            verdict, findings, usage = judge_step(deps, task, output, thread_id)
        except JudgeUnavailable as exc:
            unreviewed = _unreviewed(state, step, produced, exc.reason)
            if isinstance(unreviewed, Waiting):
                return unreviewed, exc.usage  # produced it stays: no tool runs again
            record, usage = unreviewed, exc.usage
        else:
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


def _unreviewed(
    state: RunState, step: PlanStep, produced: StepRecord, reason: str
) -> StepRecord | Waiting:
    """A step whose checks passed but whose judge could not run, as the run's policy says:
    done with the review recorded as missing, a question for a person (the step stays
    produced), or, when no one may be asked (``--no-escalate``), failed."""
    why = f"the judge could not run: {reason}"
    if state.policy.judge_failure == "pass":
        note = f"{why}; passed without review (run policy judge_failure: pass)"
        return transition(produced, StepStatus.DONE, unjudged=note, note=note)
    if state.policy.escalate_failures:
        return Waiting(step_id=step.id, reason=why, args=step.args, judge=True)
    failure = StepFailure(
        failure_class=FailureClass.NON_CONVERGENT,
        message=f"{why} (no one may be asked: escalate_failures is off)",
        error_type="JudgeUnavailable",
    )
    return transition(produced, StepStatus.FAILED, failure=failure, findings=[why])


def answer_judge(task: ApproveTask, answer: Answer) -> RunUpdate:
    """A person's answer to a ``judge`` question (the approve node asks it). retry: the
    question is settled and verify reviews the same output again (the tool does not run);
    approve: the step passes without its review (recorded on it) or, for the goal, the run
    ends without it; reject: the step fails as ``validation`` (the goal: the run fails);
    skip: the step and its dependants are skipped; abort: the run is cancelled. A decision
    about the goal is read back by finalize from the decision log."""
    assert task.waiting is not None
    settled: RunUpdate = {"waiting": {task.waiting.step_id: None}}
    if answer.type is AnswerType.ABORT:
        return settled | _aborted(task, answer)
    made: RunUpdate = {"decisions": [decision(task, answer, _ACTION[answer.type])]}
    if answer.type is AnswerType.RETRY:
        return settled | made
    if task.step is None:  # the goal's review: finalize reads the decision
        if answer.type is AnswerType.SKIP:
            raise AnswerError("the run's outcome is no step: retry, approve, reject or abort")
        return settled | made
    return settled | made | {"steps": _answered_step(task, answer)}


_ACTION = {
    AnswerType.RETRY: DecisionAction.RETRY,
    AnswerType.APPROVE: DecisionAction.APPROVE,
    AnswerType.REJECT: DecisionAction.REJECT,
    AnswerType.SKIP: DecisionAction.SKIP,
}


def _answered_step(task: ApproveTask, answer: Answer) -> dict[str, StepRecord]:
    """The records a person's approve, reject or skip of an unreviewed step writes."""
    assert task.step is not None
    assert task.record is not None
    assert task.waiting is not None
    by = answer.by or "unknown"
    said = f": {answer.message}" if answer.message else ""
    if answer.type is AnswerType.SKIP:
        return skip_downstream(task, f"skipped by {by}{said}")
    if answer.type is AnswerType.APPROVE:
        note = f"{task.waiting.reason}; passed without review by {by}{said}"
        return {task.step.id: task.record.model_copy(update={"unjudged": note, "note": note})}
    failure = StepFailure(
        failure_class=FailureClass.VALIDATION,
        message=f"failed by {by} ({task.waiting.reason}){said}",
        error_type="JudgeUnavailable",
    )
    failed = transition(task.record, StepStatus.FAILED, failure=failure, findings=[failure.message])
    return {task.step.id: failed}


def _aborted(task: ApproveTask, answer: Answer) -> RunUpdate:
    assert task.waiting is not None
    said = f": {answer.message}" if answer.message else ""
    why = f"aborted by {answer.by or 'unknown'} (the review could not run){said}"
    target = task.waiting.step_id
    return {
        "status": RunStatus.CANCELLED,
        "failure": RunFailure(kind=RunFailureKind.CANCELLED, message=why, step_id=target),
        "messages": [AIMessage(f"Run aborted: {why}")],
        "decisions": [decision(task, answer, DecisionAction.ABORT)],
    }


RESUMED_BY = "onward resume"
"""Who answers "retry" to a review question when a run is resumed without an answer."""


def retry_reviews(interrupts: Sequence[Any]) -> Command[Any] | None:
    """A plain resume (no answer) of a run that waits on reviews the judge could not give
    retries them: "retry" to every such question (a decision by :data:`RESUMED_BY`), so
    ``onward resume`` finishes the run once the model answers again. Other questions stay
    asked (the judge's are never asked in one interrupt with them)."""
    answers: dict[str, Any] = {}
    for found in interrupts:
        meta = found.value.get("onward") if isinstance(found.value, dict) else None
        metas = (meta.get("questions") or [meta]) if isinstance(meta, dict) else []
        if metas and all(m.get("kind") == WaitKind.JUDGE.value for m in metas):
            retry = [{"type": AnswerType.RETRY.value}] * len(metas)
            answers[found.id] = {"decisions": retry, "by": RESUMED_BY, "interrupt_id": found.id}
    return Command(resume=answers) if answers else None


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
