"""Answering a run's questions: the inbox, checking an answer before it counts, the
shortcuts (approve, resolve), and the deadlines a sweep applies to unanswered ones."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from onward.errors import OnwardError, UsageError
from onward.model.state import DecisionAction, RunStatus, WaitKind
from onward.observe.kinds import EventKind
from onward.observe.progress import ProgressEvent
from onward.people import resume_tokens
from onward.people.approvals import (
    AnswerType,
    edited_budget,
    edited_plan,
    edited_step,
    parse_answer,
)
from onward.people.inbox import PendingDecision
from onward.policies.run import ExpiryAction

if TYPE_CHECKING:
    from onward.client.facade import Onward
    from onward.client.views import RunView


@dataclass(kw_only=True, slots=True)
class SweepReport:
    """What ``sweep`` did at ``now``."""

    now: datetime
    reminded: list[PendingDecision] = field(default_factory=list)
    rejected: list[PendingDecision] = field(default_factory=list)
    suspended: list[PendingDecision] = field(default_factory=list)
    errors: list[tuple[PendingDecision, str]] = field(default_factory=list)
    """Defaults that could not be applied now (e.g. the run is busy); the next sweep retries."""


def whoami() -> str:
    """Who is deciding: $ONWARD_USER, else login@host."""
    import getpass
    import socket

    from onward.settings import settings

    if settings().user:
        return settings().user or ""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def inbox(ow: Onward, user: str | None) -> list[PendingDecision]:
    key = resume_tokens.secret()
    user = user or whoami()
    items: list[PendingDecision] = []
    for row in ow.store.unfinished_runs():
        items += ow.pending(row.thread_id)
    if key:
        expires = ow.clock() + resume_tokens.ttl()
        items = [
            p.model_copy(
                update={
                    "token": resume_tokens.mint(key, p.thread_id, p.interrupt_id, user, expires)
                }
            )
            for p in items
        ]
    return sorted(items, key=lambda p: p.asked_at)


def decide(
    ow: Onward,
    thread_id: str,
    answer: dict[str, Any] | list[Any],
    *,
    step: str | None,
    interrupt_id: str | None,
    by: str | None,
    token: str | None,
    continue_run: bool,
    on_event: Callable[[ProgressEvent], None] | None,
    check_token: bool,
) -> RunView:
    """:meth:`Onward.decide`; ``check_token=False`` is for onward's own answers (a sweep
    applying a deadline's default), which no user's token covers."""
    target = pick(ow, thread_id, step, interrupt_id)
    by = by or whoami()
    key = resume_tokens.secret()
    if key and check_token:
        resume_tokens.verify(
            key,
            token,
            thread_id=thread_id,
            interrupt_id=target.interrupt_id,
            user=by,
            now=ow.clock(),
        )
    decisions = answer if isinstance(answer, list) else answer.get("decisions", [answer])
    value = {"decisions": decisions, "by": by, "interrupt_id": target.interrupt_id}
    preflight(ow, thread_id, target, value)
    command: Command[Any] = Command(resume={target.interrupt_id: value})
    return ow.drive(
        thread_id,
        on_event,
        command=command,
        stop_after_answer=not continue_run,
        wake=True,  # a queued run: a worker drives it on
    )


def pick(ow: Onward, thread_id: str, step: str | None, interrupt_id: str | None) -> PendingDecision:
    """The one pending question an answer is for, or a usage error naming the candidates."""
    pending = ow.pending(thread_id)
    listing = ", ".join(
        f"{p.step_id or 'plan'} ({p.kind.value}, id {p.interrupt_id})" for p in pending
    )
    if interrupt_id is not None:
        chosen = [p for p in pending if p.interrupt_id == interrupt_id]
    elif step is not None:
        chosen = [p for p in pending if p.step_id == step or (step == "plan" and p.step_id is None)]
    else:
        chosen = pending
    if not pending:
        status = ow.state(thread_id).status.value
        raise UsageError(
            f"run {thread_id} is not waiting for a decision (it is {status}); see "
            f"`onward status {thread_id}`, or `onward resume {thread_id}` to go on"
        )
    if not chosen:
        which = f"interrupt {interrupt_id}" if interrupt_id else f"step {step!r}"
        raise UsageError(
            f"{which} of run {thread_id} is not waiting for a decision (waiting: {listing})"
        )
    if len(chosen) > 1:
        raise UsageError(
            f"run {thread_id} waits on {len(chosen)} decisions ({listing}); name one with "
            "--step (or the interrupt id)"
        )
    return chosen[0]


def preflight(ow: Onward, thread_id: str, target: PendingDecision, value: dict[str, Any]) -> None:
    """Refuse an answer the node would refuse, before resuming: same checks, clear error."""
    answer = parse_answer(value, target.kind)
    if answer.type is not AnswerType.EDIT:
        return
    state = ow.state(thread_id)
    allow = state.policy.allow_tools
    if target.kind is WaitKind.BUDGET:
        edited_budget(state.budget, answer)
    elif target.kind is WaitKind.PLAN:
        edited_plan(state.plan, answer, ow.registry, allow, state.steps)
    else:
        assert target.step_id is not None
        edited_step(state.plan.step(target.step_id), answer, ow.registry, allow)


def approve(
    ow: Onward,
    thread_id: str,
    step: str | None,
    *,
    edit: dict[str, Any] | None,
    args: dict[str, Any] | None,
    reason: str,
    how: dict[str, Any],
) -> RunView:
    if edit is None and args is None:
        return ow.decide(thread_id, {"type": "approve", "message": reason}, step=step, **how)
    target = pick(ow, thread_id, step, how.get("interrupt_id"))
    new_args = dict(args) if args is not None else {**target.args, **(edit or {})}
    answer = {
        "type": "edit",
        "edited_action": {"name": target.tool, "args": new_args},
        "message": reason,
    }
    return ow.decide(thread_id, answer, step=step, **how)


def resolve(
    ow: Onward,
    thread_id: str,
    step_id: str,
    action: DecisionAction | str,
    *,
    result: Any,
    by: str | None,
    reason: str,
    token: str | None,
    continue_run: bool,
) -> RunView:
    action = DecisionAction(action)
    if action not in (DecisionAction.DONE, DecisionAction.RETRY, DecisionAction.SKIP):
        raise UsageError("resolve settles an effect as done, retry or skip")
    answer: dict[str, Any] = {"type": action.value, "message": reason}
    if action is DecisionAction.DONE:
        answer["result"] = result
    return ow.decide(thread_id, answer, step=step_id, by=by, token=token, continue_run=continue_run)


def sweep(
    ow: Onward, now: datetime | None, *, continue_runs: bool, thread_ids: Sequence[str] | None
) -> SweepReport:
    now = now or ow.clock()
    report = SweepReport(now=now)
    items = ow.inbox() if thread_ids is None else [p for tid in thread_ids for p in ow.pending(tid)]
    for item in items:
        seen = {
            (e.kind, e.detail.get("interrupt_id")) for e in ow.store.events.list(item.thread_id)
        }
        detail = {
            "interrupt_id": item.interrupt_id,
            "step_id": item.step_id,
            "kind": item.kind.value,
            "asked_at": item.asked_at.isoformat(),
        }
        if now >= item.remind_at and (EventKind.APPROVAL_REMINDER, item.interrupt_id) not in seen:
            ow.store.events.record(item.thread_id, EventKind.APPROVAL_REMINDER, detail, at=now)
            report.reminded.append(item)
        if now < item.expire_at or (EventKind.APPROVAL_EXPIRED, item.interrupt_id) in seen:
            continue
        expired = detail | {"applied": item.on_expiry.value}
        if item.on_expiry is ExpiryAction.SUSPEND:
            ow.store.set_run_status(item.thread_id, RunStatus.SUSPENDED)
            ow.store.events.record(item.thread_id, EventKind.RUN_SUSPENDED, detail, at=now)
            ow.store.events.record(item.thread_id, EventKind.APPROVAL_EXPIRED, expired, at=now)
            report.suspended.append(item)
            continue
        answer = {
            "type": "skip" if item.kind is WaitKind.ESCALATION else "reject",
            "message": f"no answer by {item.expire_at.isoformat()} (deadline default)",
        }
        try:
            decide(
                ow,
                item.thread_id,
                answer,
                step=None,
                interrupt_id=item.interrupt_id,
                by="onward-sweep",
                token=None,
                continue_run=continue_runs,
                on_event=None,
                check_token=False,
            )
        except OnwardError as exc:
            # Not marked expired: the next sweep tries again. Other runs go on.
            report.errors.append((item, str(exc)))
            continue
        ow.store.events.record(item.thread_id, EventKind.APPROVAL_EXPIRED, expired, at=now)
        report.rejected.append(item)
    return report
