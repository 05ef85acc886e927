"""What approve and escalate share: asking a person with ``interrupt()`` until an answer
applies, and turning answers into decisions, approvals and skips.

Both nodes ask with the same payload (see onward.people.approvals), and both re-ask, with the
errors, when an answer cannot be applied: nothing is lost. A node that calls
``interrupt()`` runs again from its first line when the answer arrives, so nothing may
happen before the question. The rule for rejections and skips: a step runs only when every
step it depends on is done, so when a person rejects or skips a step, every step
downstream of it is skipped too, each with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import interrupt

from onward.errors import AnswerError
from onward.model.state import (
    PLAN_TARGET,
    Approval,
    ApproveTask,
    Decision,
    DecisionAction,
    PlanStep,
    RunUpdate,
    StepStatus,
    transition,
    utcnow,
)
from onward.nodes.deps import thread_of
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.people.approvals import (
    Answer,
    parse_answer,
    request,
)

Updates = RunUpdate
"""What approve and escalate return (their answer's updates)."""


def ask(
    task: ApproveTask, config: RunnableConfig, apply: Callable[[Answer], Updates | None]
) -> Updates:
    """Ask until an answer applies; ``apply(answer) -> updates | None`` (None: ask again,
    e.g. feedback on a plan). Feedback answers along the way are kept for the log."""
    thread_id = thread_of(config)
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
            earlier.append(decision(task, answer, DecisionAction.RESPOND))
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


def decision(
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


def skip_downstream(task: ApproveTask, why: str) -> dict[str, Any]:
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


def approval_of(
    task: ApproveTask, answer: Answer, step: PlanStep, h: str, edited: bool
) -> Approval:
    return Approval(
        step_id=step.id,
        tool=step.tool,
        args_hash=h,
        by=answer.by or "unknown",
        at=utcnow(),
        edited=edited,
    )
