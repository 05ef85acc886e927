"""escalate: asks what to do about an effect whose outcome is unknown, or a failure onward
cannot outlive alone. After the answer it settles the effect's ledger row (idempotent
writes: a replay repeats them harmlessly) and, for "done", saves the given result as
produced, so the verify node checks it like any output.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.model.state import (
    ApproveTask,
    AskBatch,
    DecisionAction,
    PlanEdit,
    RunFailure,
    RunFailureKind,
    RunStatus,
    StepStatus,
    transition,
    utcnow,
)
from onward.nodes.asking import Updates, approval_of, ask, decision, skip_downstream
from onward.nodes.deps import NodeDeps, thread_of
from onward.people.approvals import (
    Answer,
    AnswerType,
    edited_step,
    step_hash,
)


def escalate(task: Any, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> Updates:
    deps = runtime.context
    assert isinstance(task, ApproveTask | AskBatch)
    thread_id = thread_of(config)
    return ask(
        task, config, lambda t, a: _answer_escalation(deps, t, a, thread_id), deps.artifacts.get
    )


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
            "decisions": [decision(task, answer, DecisionAction.RETRY)],
        }
    if kind is AnswerType.EDIT:
        edited = edited_step(step, answer, deps.registry, task.allow_tools)
        if key and ledger:
            ledger.skip(key)  # replaced by the edited effect, which gets its own key
        h = step_hash(edited, task.inputs)
        return settled | {
            "plan": PlanEdit(step=edited),
            "steps": {step.id: transition(rec, StepStatus.PENDING, **again)},
            "approvals": {step.id: approval_of(task, answer, edited, h, True)},
            "decisions": [decision(task, answer, DecisionAction.EDIT, args_hash=h)],
        }
    if kind in (AnswerType.REJECT, AnswerType.SKIP):
        if key and ledger:
            ledger.skip(key)
        why = f"skipped by {by}" + (f": {answer.message}" if answer.message else "")
        return settled | {
            "steps": skip_downstream(task, why),
            "decisions": [decision(task, answer, DecisionAction.SKIP)],
        }
    if kind is AnswerType.ABORT:
        why = f"aborted by {by}" + (f": {answer.message}" if answer.message else "")
        return settled | {
            "status": RunStatus.CANCELLED,
            "failure": RunFailure(kind=RunFailureKind.CANCELLED, message=why, step_id=step.id),
            "messages": [AIMessage(f"Run aborted at step {step.id}: {why}")],
            "decisions": [decision(task, answer, DecisionAction.ABORT)],
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
        "decisions": [decision(task, answer, DecisionAction.DONE)],
    }
