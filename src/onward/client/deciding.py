"""Answering a run's questions: the inbox, checking an answer before it counts, the
shortcuts (approve, resolve), and the deadlines a sweep applies to unanswered ones."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from onward.errors import AnswerError, OnwardError, UsageError
from onward.model.state import DecisionAction, RunStatus, WaitKind
from onward.observe.kinds import EventKind
from onward.observe.progress import ProgressEvent
from onward.people import resume_tokens
from onward.people.approvals import (
    Answer,
    AnswerType,
    edited_budget,
    edited_plan,
    edited_step,
    parse_answers,
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
        items = with_tokens(ow, items, user)
    return sorted(items, key=lambda p: p.asked_at)


def token_subject(p: PendingDecision, whole: bool) -> str:
    """What a resume token is for: a lone question, one question of a wave's batch, or
    (``whole``) every question of the batch at once."""
    return p.interrupt_id if whole or len(p.batch) <= 1 else f"{p.interrupt_id}:{target_id(p)}"


def with_tokens(ow: Onward, items: list[PendingDecision], user: str) -> list[PendingDecision]:
    """The items with resume tokens minted for ``user``: each for its own question, and
    for a batch also one that answers all of it."""
    key = resume_tokens.secret()
    assert key is not None
    expires = ow.clock() + resume_tokens.ttl()

    def mint(p: PendingDecision, whole: bool) -> str:
        return resume_tokens.mint(key, p.thread_id, token_subject(p, whole), user, expires)

    return [
        p.model_copy(
            update={
                "token": mint(p, False),
                "batch_token": mint(p, True) if len(p.batch) > 1 else None,
            }
        )
        for p in items
    ]


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
    decisions = answer if isinstance(answer, list) else answer.get("decisions", [answer])
    if not isinstance(decisions, list):
        raise AnswerError('"decisions" must be a list of decision objects')
    group, answered = answering(ow, thread_id, step, interrupt_id, len(decisions))
    iid = group[0].interrupt_id
    by = by or whoami()
    key = resume_tokens.secret()
    if key and check_token:
        subject = token_subject(answered[0], whole=len(answered) == len(group) > 1)
        resume_tokens.verify(
            key, token, thread_id=thread_id, interrupt_id=subject, user=by, now=ow.clock()
        )
    value: dict[str, Any] = {"decisions": decisions, "by": by, "interrupt_id": iid}
    if len(answered) < len(group):  # some questions of a batch: name them
        value["targets"] = [target_id(p) for p in answered]
    pairs = parse_answers(value, [(target_id(p), p.kind) for p in group])
    for i, parsed in pairs:
        preflight(ow, thread_id, group[i], parsed)
    command: Command[Any] = Command(resume={iid: value})
    return ow.drive(
        thread_id,
        on_event,
        command=command,
        stop_after_answer=not continue_run,
        wake=True,  # a queued run: a worker drives it on
    )


def target_id(p: PendingDecision) -> str:
    return p.step_id or "plan"


def answering(
    ow: Onward, thread_id: str, step: str | None, interrupt_id: str | None, count: int
) -> tuple[list[PendingDecision], list[PendingDecision]]:
    """(every question of the interrupt an answer is for, the ones its ``count``
    decisions answer): named by ``step`` or ``interrupt_id``, or the only interrupt."""
    pending = ow.pending(thread_id)
    if step is not None or (interrupt_id is not None and count == 1):
        one = pick(ow, thread_id, step, interrupt_id) if step is not None else None
        iid = one.interrupt_id if one else interrupt_id
        group = [p for p in pending if p.interrupt_id == iid]
        if one is not None or len(group) == 1:
            if count != 1:
                raise AnswerError(f"one step is named: send one decision (got {count})")
            return group, [one or group[0]]
    if not pending:
        pick(ow, thread_id, step, interrupt_id)  # raises: not waiting
    ids = list(dict.fromkeys(p.interrupt_id for p in pending))
    if interrupt_id is not None:
        if interrupt_id not in ids:
            pick(ow, thread_id, step, interrupt_id)  # raises: names what is waiting
        ids = [interrupt_id]
    group = [p for p in pending if p.interrupt_id == ids[0]]
    if len(ids) > 1 or (count == 1 and len(group) > 1):
        listing = ", ".join(
            f"{target_id(p)} ({p.kind.value}, id {p.interrupt_id})" for p in pending
        )
        raise UsageError(
            f"run {thread_id} waits on {len(pending)} decisions ({listing}); name one with "
            f"--step (or the interrupt id), or send {len(group)} decisions in that order"
        )
    return group, group


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


def preflight(ow: Onward, thread_id: str, target: PendingDecision, answer: Answer) -> None:
    """Refuse an answer the node would refuse, before resuming: same checks, clear error."""
    if answer.type is not AnswerType.EDIT:
        return
    state = ow.state(thread_id)
    allow = state.policy.allow_tools
    if target.kind is WaitKind.BUDGET:
        edited_budget(state.budget, answer)
    elif target.kind is WaitKind.PLAN:
        edited_plan(
            state.plan, answer, ow.registry, allow, state.steps, state.policy.max_plan_steps
        )
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
        # By interrupt and step: a wave's questions share one interrupt id.
        seen = {
            (e.kind, e.detail.get("interrupt_id"), e.detail.get("step_id"))
            for e in ow.store.events.list(item.thread_id)
        }
        detail = {
            "interrupt_id": item.interrupt_id,
            "step_id": item.step_id,
            "kind": item.kind.value,
            "asked_at": item.asked_at.isoformat(),
        }
        key = (item.interrupt_id, item.step_id)
        if now >= item.remind_at and (EventKind.APPROVAL_REMINDER, *key) not in seen:
            ow.store.events.record(item.thread_id, EventKind.APPROVAL_REMINDER, detail, at=now)
            report.reminded.append(item)
        if now < item.expire_at or (EventKind.APPROVAL_EXPIRED, *key) in seen:
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
                step=target_id(item),
                # A wave's interrupt id changes as its questions are answered one by one.
                interrupt_id=item.interrupt_id if len(item.batch) <= 1 else None,
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
