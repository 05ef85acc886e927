"""approve and escalate: the two nodes where a run waits for a person.

Both ask with ``interrupt()`` and the same payload (see onward.approvals), and both
re-ask, with the errors, when an answer cannot be applied: nothing is lost. A node
that calls ``interrupt()`` runs again from its first line when the answer arrives,
so nothing may happen before the question:

* **approve** does nothing but ask; its answer only becomes state (an approval bound
  to the args hash, an edited step, skipped steps, feedback, the decision log).
* **escalate** asks what to do about an effect whose outcome is unknown; after the
  answer it settles the effect's ledger row (idempotent writes: a replay repeats them
  harmlessly) and, for "done", verifies the given result like any output.

The rule for rejections and skips: a step runs only when every step it depends on is
done, so when a person rejects or skips a step, every step downstream of it is
skipped too, each with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import interrupt

from onward import budget
from onward.approvals import (
    Answer,
    AnswerType,
    edited_budget,
    edited_plan,
    edited_step,
    parse_answer,
    plan_hash,
    request,
    step_hash,
)
from onward.errors import AnswerError
from onward.nodes.deps import NodeDeps
from onward.progress import EventKind, emit
from onward.state import (
    PLAN_TARGET,
    Approval,
    ApproveTask,
    Decision,
    DecisionAction,
    FailureClass,
    PlanEdit,
    PlanStep,
    RunFailure,
    RunFailureKind,
    RunStatus,
    StepFailure,
    StepStatus,
    WaitKind,
    transition,
    utcnow,
)

Updates = dict[str, Any]


def _ask(
    task: ApproveTask, config: RunnableConfig, apply: Callable[[Answer], Updates | None]
) -> Updates:
    """Ask until an answer applies; ``apply(answer) -> updates | None`` (None: ask again,
    e.g. feedback on a plan). Feedback answers along the way are kept for the log."""
    thread_id = str(config.get("configurable", {}).get("thread_id", ""))
    target = task.step.id if task.step else PLAN_TARGET
    ask_key = f"{task.kind.value}:{target}:{task.asked_at.isoformat()}"
    emit(
        EventKind.APPROVAL_REQUESTED,
        step_id=target,
        tool=task.step.tool if task.step else None,
        message=f"waiting for a person ({task.kind.value})",
        detail={"ask_key": ask_key, "wait_kind": task.kind.value, "args_hash": task.args_hash},
    )
    errors: list[str] | None = None
    earlier: list[Decision] = []
    while True:
        raw = interrupt(request(task, thread_id, errors))
        try:
            answer = parse_answer(raw, task.kind)
            updates = apply(answer)
        except AnswerError as exc:
            errors = [str(exc)]
            continue
        except Exception as exc:  # never jam the question: say what failed and ask again
            errors = [
                f"the answer could not be applied ({type(exc).__name__}: {exc}); "
                "choose another decision"
            ]
            continue
        iid = raw.get("interrupt_id") if isinstance(raw, dict) else None
        if updates is None:
            earlier.append(_decision(task, answer, DecisionAction.RESPOND))
            errors = None
            continue
        updates["decisions"] = [
            d.model_copy(update={"interrupt_id": iid})
            for d in [*earlier, *updates.get("decisions", [])]
        ]
        final = updates["decisions"][-1] if updates["decisions"] else None
        emit(
            EventKind.APPROVAL_DECIDED,
            step_id=target,
            tool=task.step.tool if task.step else None,
            message=answer.message,
            detail={
                "ask_key": ask_key,
                "action": final.action.value if final else answer.type.value,
                "by": answer.by or "unknown",
                "interrupt_id": iid,
                "args_hash": final.args_hash if final else None,
            },
        )
        updates["wave"] = task.wave
        return updates


def _decision(
    task: ApproveTask,
    answer: Answer,
    action: DecisionAction,
    *,
    args_hash: str | None = None,
) -> Decision:
    return Decision(
        step_id=task.step.id if task.step else PLAN_TARGET,
        action=action,
        by=answer.by or "unknown",
        at=utcnow(),
        reason=answer.message,
        key=task.waiting.key if task.waiting else None,
        kind=task.kind,
        args_hash=args_hash or task.args_hash,
    )


def _skip_downstream(task: ApproveTask, why: str) -> dict[str, Any]:
    assert task.step is not None
    assert task.record is not None
    steps = {task.step.id: transition(task.record, StepStatus.SKIPPED, note=why)}
    for rec in task.dependants:
        if rec.status in (StepStatus.PENDING, StepStatus.FAILED):
            steps[rec.id] = transition(
                rec,
                StepStatus.SKIPPED,
                note=f"depends on {task.step.id!r}, which was skipped: {why}",
            )
    return steps


def _approval(task: ApproveTask, answer: Answer, step: PlanStep, h: str, edited: bool) -> Approval:
    return Approval(
        step_id=step.id,
        tool=step.tool,
        args_hash=h,
        by=answer.by or "unknown",
        at=utcnow(),
        edited=edited,
    )


def make_approve_node(deps: NodeDeps) -> Any:
    def approve(task: Any, config: RunnableConfig) -> Updates:
        assert isinstance(task, ApproveTask)
        if task.kind is WaitKind.PLAN:
            return _ask(task, config, lambda a: _answer_plan(deps, task, a))
        if task.kind is WaitKind.BUDGET:
            return _ask(task, config, lambda a: _answer_budget(deps, task, a))
        return _ask(task, config, lambda a: _answer_step(deps, task, a))

    return approve


def _answer_step(deps: NodeDeps, task: ApproveTask, answer: Answer) -> Updates:
    step, rec = task.step, task.record
    assert step is not None
    assert rec is not None
    if answer.type is AnswerType.APPROVE:
        return {
            "approvals": {step.id: _approval(task, answer, step, task.args_hash, False)},
            "decisions": [_decision(task, answer, DecisionAction.APPROVE)],
        }
    if answer.type is AnswerType.EDIT:
        edited = edited_step(step, answer, deps.registry, task.allow_tools)
        h = step_hash(edited, task.inputs)
        return {
            "plan": PlanEdit(step=edited),
            "approvals": {step.id: _approval(task, answer, edited, h, True)},
            "decisions": [_decision(task, answer, DecisionAction.EDIT, args_hash=h)],
        }
    by = answer.by or "unknown"
    if answer.type is AnswerType.REJECT:
        why = f"rejected by {by}" + (f": {answer.message}" if answer.message else "")
        return {
            "steps": _skip_downstream(task, why),
            "decisions": [_decision(task, answer, DecisionAction.REJECT)],
        }
    # respond: the step does not run; the feedback fails it as a validation failure, the
    # class the replanner reads (until then the run stops with the feedback as its reason).
    feedback = f"feedback from {by}: {answer.message}"
    failure = StepFailure(
        failure_class=FailureClass.VALIDATION, message=feedback, error_type="HumanFeedback"
    )
    return {
        "steps": {
            step.id: transition(rec, StepStatus.FAILED, failure=failure, findings=[feedback])
        },
        "messages": [HumanMessage(f"Feedback on step {step.id}: {answer.message}")],
        "decisions": [_decision(task, answer, DecisionAction.RESPOND)],
    }


def _answer_plan(deps: NodeDeps, task: ApproveTask, answer: Answer) -> Updates | None:
    plan = task.plan
    assert plan is not None
    by = answer.by or "unknown"
    if answer.type is AnswerType.APPROVE:
        approval = Approval(
            step_id=PLAN_TARGET, tool="approve_plan", args_hash=task.args_hash, by=by, at=utcnow()
        )
        return {
            "plan_approval": approval,
            "decisions": [_decision(task, answer, DecisionAction.APPROVE)],
        }
    if answer.type is AnswerType.EDIT:
        new = edited_plan(plan, answer, deps.registry, task.allow_tools, task.done)
        h = plan_hash(new)
        approval = Approval(
            step_id=PLAN_TARGET, tool="approve_plan", args_hash=h, by=by, at=utcnow(), edited=True
        )
        return {
            "plan": new,
            "plan_approval": approval,
            "decisions": [_decision(task, answer, DecisionAction.EDIT, args_hash=h)],
        }
    if answer.type is AnswerType.REJECT:
        why = f"plan rejected by {by}" + (f": {answer.message}" if answer.message else "")
        return {
            "status": RunStatus.CANCELLED,
            "failure": RunFailure(kind=RunFailureKind.CANCELLED, message=why),
            "decisions": [_decision(task, answer, DecisionAction.REJECT)],
        }
    return None  # feedback on the plan: recorded, and the question stands


def _answer_budget(deps: NodeDeps, task: ApproveTask, answer: Answer) -> Updates:
    current = task.budget
    assert current is not None
    by = answer.by or "unknown"
    if answer.type is AnswerType.REJECT:
        why = f"aborted by {by} at the budget limit" + (
            f": {answer.message}" if answer.message else ""
        )
        return {
            "status": RunStatus.CANCELLED,
            "failure": RunFailure(kind=RunFailureKind.CANCELLED, message=why),
            "decisions": [_decision(task, answer, DecisionAction.ABORT)],
        }
    if answer.type is AnswerType.EDIT:
        new = edited_budget(current, answer)
    else:
        new = budget.raised(current, task.spent)
    return {
        "budget": new,
        "decisions": [
            _decision(
                task,
                answer,
                DecisionAction.EDIT if answer.type is AnswerType.EDIT else DecisionAction.APPROVE,
            )
        ],
    }


def make_escalate_node(deps: NodeDeps) -> Any:
    def escalate(task: Any, config: RunnableConfig) -> Updates:
        assert isinstance(task, ApproveTask)
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        return _ask(task, config, lambda a: _answer_escalation(deps, task, a, thread_id))

    return escalate


def _answer_escalation(
    deps: NodeDeps, task: ApproveTask, answer: Answer, thread_id: str
) -> Updates:
    step, rec, waiting = task.step, task.record, task.waiting
    assert step is not None
    assert rec is not None
    assert waiting is not None
    key, ledger = waiting.key, deps.ledger
    settled: Updates = {"waiting": {step.id: None}}
    by = answer.by or "unknown"
    kind = answer.type
    # A person's retry grants the step a fresh round of its retry policy.
    again = {"attempt_floor": rec.attempts, "streak": 0, "not_before": None}
    if kind in (AnswerType.APPROVE, AnswerType.RETRY):
        if key and ledger:
            ledger.allow_retry(key)
        return settled | {
            "steps": {step.id: transition(rec, StepStatus.PENDING, **again)},
            "decisions": [_decision(task, answer, DecisionAction.RETRY)],
        }
    if kind is AnswerType.EDIT:
        edited = edited_step(step, answer, deps.registry, task.allow_tools)
        if key and ledger:
            ledger.skip(key)  # replaced by the edited effect, which gets its own key
        h = step_hash(edited, task.inputs)
        return settled | {
            "plan": PlanEdit(step=edited),
            "steps": {step.id: transition(rec, StepStatus.PENDING, **again)},
            "approvals": {step.id: _approval(task, answer, edited, h, True)},
            "decisions": [_decision(task, answer, DecisionAction.EDIT, args_hash=h)],
        }
    if kind in (AnswerType.REJECT, AnswerType.SKIP):
        if key and ledger:
            ledger.skip(key)
        why = f"skipped by {by}" + (f": {answer.message}" if answer.message else "")
        return settled | {
            "steps": _skip_downstream(task, why),
            "decisions": [_decision(task, answer, DecisionAction.SKIP)],
        }
    if kind is AnswerType.ABORT:
        why = f"aborted by {by}" + (f": {answer.message}" if answer.message else "")
        return settled | {
            "status": RunStatus.CANCELLED,
            "failure": RunFailure(kind=RunFailureKind.CANCELLED, message=why, step_id=step.id),
            "messages": [AIMessage(f"Run aborted at step {step.id}: {why}")],
            "decisions": [_decision(task, answer, DecisionAction.ABORT)],
        }
    # done: the effect happened; its result is verified like any output (by verify).
    if key and ledger:
        ledger.complete(key, answer.result)
    ref = deps.artifacts.put(step.output or f"step:{step.id}", answer.result, owner=thread_id)
    # A failed step the person did by hand is produced by them (failed → produced).
    produced = transition(
        rec, StepStatus.PRODUCED, output=ref, ended_at=utcnow(), effect_key=key, failure=None
    )
    return settled | {
        "steps": {step.id: produced},
        "decisions": [_decision(task, answer, DecisionAction.DONE)],
    }
