"""approve: asks a person about a step, the plan, a used-up budget or a review the judge
could not give (nodes/verify.py applies that answer), and does nothing
else; the answer only becomes state (an approval bound to the args hash, an edited step,
skipped steps, feedback, the decision log). See nodes/asking.py for how it asks.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.model import budget
from onward.model.state import (
    PLAN_TARGET,
    Approval,
    ApproveTask,
    AskBatch,
    DecisionAction,
    FailureClass,
    PlanEdit,
    RunFailure,
    RunFailureKind,
    RunStatus,
    StepFailure,
    StepStatus,
    WaitKind,
    transition,
    utcnow,
)
from onward.nodes.asking import Updates, approval_of, ask, decision, skip_downstream
from onward.nodes.deps import NodeDeps
from onward.nodes.verify import answer_judge
from onward.people.approvals import (
    Answer,
    AnswerType,
    edited_budget,
    edited_plan,
    edited_step,
    plan_hash,
    step_hash,
)


def approve(task: Any, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> Updates:
    deps = runtime.context
    assert isinstance(task, ApproveTask | AskBatch)
    return ask(task, config, lambda t, a: _answer(deps, t, a), deps.artifacts.get)


def _answer(deps: NodeDeps, task: ApproveTask, answer: Answer) -> Updates | None:
    if task.kind is WaitKind.PLAN:
        return _answer_plan(deps, task, answer)
    if task.kind is WaitKind.BUDGET:
        return _answer_budget(deps, task, answer)
    if task.kind is WaitKind.JUDGE:
        return answer_judge(task, answer)  # a review that could not run: verify's rules
    return _answer_step(deps, task, answer)


def _answer_step(deps: NodeDeps, task: ApproveTask, answer: Answer) -> Updates:
    step, rec = task.step, task.record
    assert step is not None
    assert rec is not None
    if answer.type is AnswerType.APPROVE:
        return {
            "approvals": {step.id: approval_of(task, answer, step, task.args_hash, False)},
            "decisions": [decision(task, answer, DecisionAction.APPROVE)],
        }
    if answer.type is AnswerType.EDIT:
        edited = edited_step(step, answer, deps.registry, task.allow_tools)
        h = step_hash(edited, task.inputs)
        return {
            "plan": PlanEdit(step=edited),
            "approvals": {step.id: approval_of(task, answer, edited, h, True)},
            "decisions": [decision(task, answer, DecisionAction.EDIT, args_hash=h)],
        }
    by = answer.by or "unknown"
    if answer.type is AnswerType.REJECT:
        why = f"rejected by {by}" + (f": {answer.message}" if answer.message else "")
        return {
            "steps": skip_downstream(task, why),
            "decisions": [decision(task, answer, DecisionAction.REJECT)],
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
        "decisions": [decision(task, answer, DecisionAction.RESPOND)],
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
            "decisions": [decision(task, answer, DecisionAction.APPROVE)],
        }
    if answer.type is AnswerType.EDIT:
        new = edited_plan(
            plan, answer, deps.registry, task.allow_tools, task.done, task.max_plan_steps
        )
        h = plan_hash(new)
        approval = Approval(
            step_id=PLAN_TARGET, tool="approve_plan", args_hash=h, by=by, at=utcnow(), edited=True
        )
        return {
            "plan": new,
            "plan_approval": approval,
            "decisions": [decision(task, answer, DecisionAction.EDIT, args_hash=h)],
        }
    if answer.type is AnswerType.REJECT:
        why = f"plan rejected by {by}" + (f": {answer.message}" if answer.message else "")
        return {
            "status": RunStatus.CANCELLED,
            "failure": RunFailure(kind=RunFailureKind.CANCELLED, message=why),
            "decisions": [decision(task, answer, DecisionAction.REJECT)],
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
            "decisions": [decision(task, answer, DecisionAction.ABORT)],
        }
    if answer.type is AnswerType.EDIT:
        new = edited_budget(current, answer)
    else:
        new = budget.raised(current, task.spent)
    return {
        "budget": new,
        "decisions": [
            decision(
                task,
                answer,
                DecisionAction.EDIT if answer.type is AnswerType.EDIT else DecisionAction.APPROVE,
            )
        ],
    }
