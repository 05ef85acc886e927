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

from onward import faults
from onward.errors import AnswerError
from onward.model.state import (
    PLAN_TARGET,
    Approval,
    ApproveTask,
    ArtifactRef,
    AskBatch,
    Decision,
    DecisionAction,
    PlanEdit,
    PlanStep,
    RunUpdate,
    StepStatus,
    WaitKind,
    transition,
    utcnow,
)
from onward.nodes.deps import thread_of
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.people.approvals import (
    Answer,
    asked_of,
    batch_request,
    parse_answers,
    resolved_args,
)

Updates = RunUpdate
"""What approve and escalate return (their answer's updates)."""


def questions_of(task: Any) -> tuple[list[ApproveTask], int]:
    """The questions a Send carries (one, or a wave's batch) and the wave's size."""
    if isinstance(task, AskBatch):
        return list(task.questions), task.wave
    assert isinstance(task, ApproveTask)
    return [task], task.wave


def ask(
    task: ApproveTask | AskBatch,
    config: RunnableConfig,
    apply: Callable[[ApproveTask, Answer], Updates | None],
    read: Callable[[ArtifactRef], Any] | None = None,
) -> Updates:
    """Ask until every question has an answer that applies; ``apply(question, answer) ->
    updates | None`` (None: ask again, e.g. feedback on a plan). All questions go out as ONE
    interrupt; an answer may settle some of them (``targets``), and the rest are asked
    again. Nothing is written before the node returns, so a crash while answering loses the
    answers (ask again) or keeps them all: never half a batch, never one twice. ``read``
    gives an artifact's value: a step's references are shown (and audited) resolved."""
    tasks, wave = questions_of(task)
    thread_id = thread_of(config)
    keys = [_ask_key(t) for t in tasks]
    shown = [_resolved(t, read) for t in tasks]
    for t, key, seen in zip(tasks, keys, shown, strict=True):
        emit(
            EventKind.APPROVAL_REQUESTED,
            step_id=target_of_task(t),
            tool=t.step.tool if t.step else None,
            message=f"waiting for a person ({t.kind.value})",
            detail={"ask_key": key, "wait_kind": t.kind.value, "args_hash": t.args_hash}
            | ({"resolved": seen} if seen else {}),
        )
    done: dict[int, Updates] = {}
    earlier: dict[int, list[Decision]] = {}
    errors: dict[int, list[str]] = {}
    general: list[str] | None = None
    while len(done) < len(tasks):
        open_ = [i for i in range(len(tasks)) if i not in done]
        asked = [tasks[i] for i in open_]
        raw = interrupt(
            batch_request(
                asked,
                thread_id,
                {j: errors[i] for j, i in enumerate(open_) if i in errors},
                general,
                [shown[i] for i in open_],
            )
        )
        general, errors = None, {}
        try:
            pairs = parse_answers(raw, [asked_of(t) for t in asked])
        except AnswerError as exc:
            general = [str(exc)]
            continue
        iid = raw.get("interrupt_id") if isinstance(raw, dict) else None
        for j, answer in pairs:
            i = open_[j]
            t = tasks[i]
            try:
                updates = apply(t, answer)
            except AnswerError as exc:
                errors[i] = [str(exc)]
                continue
            except Exception as exc:  # never jam the question: say what failed, ask again
                errors[i] = [
                    f"the answer could not be applied ({type(exc).__name__}: {exc}); "
                    "choose another decision"
                ]
                continue
            if updates is None:
                earlier.setdefault(i, []).append(decision(t, answer, DecisionAction.RESPOND))
                continue
            updates["decisions"] = [
                d.model_copy(update={"interrupt_id": iid})
                for d in [*earlier.pop(i, []), *updates.get("decisions", [])]
            ]
            final = updates["decisions"][-1] if updates["decisions"] else None
            emit(
                EventKind.APPROVAL_DECIDED,
                step_id=target_of_task(t),
                tool=t.step.tool if t.step else None,
                message=answer.message,
                detail={
                    "ask_key": keys[i],
                    "action": final.action.value if final else answer.type.value,
                    "by": answer.by or "unknown",
                    "interrupt_id": iid,
                    "args_hash": final.args_hash if final else None,
                }
                | ({"resolved": shown[i]} if shown[i] else {}),
            )
            done[i] = updates
    merged = merge_updates([done[i] for i in range(len(tasks))])
    merged["wave"] = wave
    # Every answer applied, none of it committed yet: the worst moment for a kill.
    faults.reach(faults.Fault.AFTER_ANSWERS, target_of_task(tasks[0]))
    return merged


def _resolved(task: ApproveTask, read: Callable[[ArtifactRef], Any] | None) -> list[dict[str, str]]:
    """A step question's references with their values (none for plans and budgets)."""
    if read is None or task.step is None or task.kind not in _SHOWS_VALUES:
        return []
    return resolved_args(task.step, task.inputs, read)


_SHOWS_VALUES = (WaitKind.APPROVAL, WaitKind.ESCALATION)


def _ask_key(task: ApproveTask) -> str:
    return f"{task.kind.value}:{target_of_task(task)}:{task.asked_at.isoformat()}"


def target_of_task(task: ApproveTask) -> str:
    return task.step.id if task.step else PLAN_TARGET


_KEYED = ("steps", "approvals", "waiting", "artifacts")
_LISTED = ("decisions", "messages")


def merge_updates(parts: list[Updates]) -> Updates:
    """The answers of one batch as one node update: keyed channels merged, lists
    concatenated, plan edits collected (the plan reducer applies them in order); for
    the rest (status, failure, budget) the last answer that sets one wins."""
    if len(parts) == 1:
        return parts[0]
    merged: dict[str, Any] = {}
    edits: list[Any] = []
    for part in parts:
        value: Any
        for key, value in part.items():
            if key in _KEYED:
                merged[key] = {**merged.get(key, {}), **value}
            elif key in _LISTED:
                merged[key] = [*merged.get(key, []), *value]
            elif key == "plan":
                edits.extend(value if isinstance(value, list) else [value])
            else:
                merged[key] = value
    if edits:
        merged["plan"] = edits if all(isinstance(e, PlanEdit) for e in edits) else edits[-1]
    return merged  # type: ignore[return-value]


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
