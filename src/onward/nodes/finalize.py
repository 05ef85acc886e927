"""finalize: goal acceptance checks, the goal's review, then the execution report as the
final chat message.

A goal review (``--judge``) that could not run (verification/judge.py) is handled like a
step's: by the run's policy (``judge_failure``) the run ends done with "the goal review did
not run: <reason>" in its final message and a decision in its log, or it waits for a person
(a ``judge`` question about the outcome, routed by finalize's edge): retry reviews again,
approve ends the run without the review (said the same way), reject fails it. No one to
ask (``--no-escalate``): the run fails with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.errors import JudgeUnavailable
from onward.model.state import (
    PLAN_TARGET,
    Decision,
    DecisionAction,
    RunFailure,
    RunFailureKind,
    RunState,
    RunStatus,
    RunUpdate,
    StepRecords,
    StepStatus,
    Usage,
    Waiting,
    WaitKind,
    utcnow,
)
from onward.nodes.deps import NodeDeps, thread_of
from onward.observe.chat import REPORT_KEY, markdown_report, report_marker, reported
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.verification.checks import evaluate, following
from onward.verification.judge import goal_hash, judge_goal, unavailable

NOT_REVIEWED = "the goal review did not run"


def finalize(state: RunState, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> RunUpdate:
    deps = runtime.context
    if state.status is RunStatus.CANCELLED:
        emit(EventKind.RUN_FINISHED, message=RunStatus.CANCELLED.value)
        return {"messages": [final_message(deps, state, RunStatus.CANCELLED, state.failure)]}
    review = GoalReview(failure=state.failure)
    if state.failure is None and state.plan.steps:
        review = _outcome(deps, state, config)
        if review.waiting is not None:  # a person decides; the run is not over
            return {"waiting": {PLAN_TARGET: review.waiting}, "usage": review.usage}
    failure = review.failure
    status = RunStatus.FAILED if failure else RunStatus.DONE
    emit(EventKind.RUN_FINISHED, message=status.value)
    message = final_message(deps, state, status, failure, review.missing)
    out: RunUpdate = {"status": status, "failure": failure, "messages": [message]}
    if review.usage != _NO_USAGE:
        out["usage"] = review.usage
    if review.decision is not None:
        out["decisions"] = [review.decision]
    return out


_NO_USAGE = Usage()


def _outcome(deps: NodeDeps, state: RunState, config: RunnableConfig) -> GoalReview:
    """The run's result once nothing is left: a failed step, failed acceptance checks, or
    the goal's review (when asked for)."""
    assert state.goal is not None
    failure = _failed_step(state) or _acceptance(deps, state)
    if failure is not None or not state.goal.judge:
        return GoalReview(failure=failure)
    return _review_goal(deps, state, thread_of(config))


def _failed_step(state: RunState) -> RunFailure | None:
    # Statuses are at hand without decoding the records: decode the first failed.
    statuses = state.steps.statuses
    if StepStatus.FAILED not in statuses.values():  # a scan in C: usually none
        return None
    failed = next(sid for sid, st in statuses.items() if st is StepStatus.FAILED)
    rec = state.steps[failed]
    why = rec.failure.message if rec.failure else "failed"
    cls = rec.failure.failure_class if rec.failure else "unknown"
    return RunFailure(
        kind=RunFailureKind.STEP, step_id=rec.id, message=f"step {rec.id!r} failed ({cls}): {why}"
    )


def _acceptance(deps: NodeDeps, state: RunState) -> RunFailure | None:
    assert state.goal is not None
    ctx = deps.check_context(
        state.workdir, dict(state.artifacts), confined=state.policy.confine_paths
    )
    # Steps skipped by a decision (a person's reject or skip, a recorded revision) are not
    # failures: the checks about them follow the decision.
    statuses = state.steps.statuses
    skipped = {sid for sid, st in statuses.items() if st is StepStatus.SKIPPED}
    checks = [c for c in (following(c, skipped) for c in state.goal.acceptance) if c]
    findings = [f for c in checks for f in evaluate(c, None, ctx)]
    if not findings:
        return None
    return RunFailure(
        kind=RunFailureKind.ACCEPTANCE, message="acceptance checks failed: " + "; ".join(findings)
    )


@dataclass(frozen=True, slots=True)
class GoalReview:
    """The goal's review: a failure, or why it is missing (ended with), or a question."""

    usage: Usage = _NO_USAGE
    failure: RunFailure | None = None
    missing: str | None = None
    """Why the run ends without its review (said in the final message)."""
    decision: Decision | None = None
    """The policy's decision to end without the review, for the decision log."""
    waiting: Waiting | None = None
    """The review could not run and a person is asked."""


def _review_goal(deps: NodeDeps, state: RunState, thread_id: str) -> GoalReview:
    """The judge's verdict on the outcome; a person's answer to an earlier question about
    this outcome (bound to :func:`goal_hash`) instead, unless it was "retry"."""
    answered = _answer_on(state)
    if answered is not None and answered.action is not DecisionAction.RETRY:
        said = f": {answered.reason}" if answered.reason else ""
        if answered.action is DecisionAction.APPROVE:
            passed = f"{NOT_REVIEWED}; {answered.by} passed the run without it{said}"
            return GoalReview(missing=passed)
        why = f"{NOT_REVIEWED}; {answered.by} failed the run{said}"
        return GoalReview(failure=RunFailure(kind=RunFailureKind.ACCEPTANCE, message=why))
    try:
        if (cannot := unavailable(deps, state)) is not None:
            raise JudgeUnavailable(cannot, _NO_USAGE)
        failure, usage = judge_goal(deps, state, thread_id)
    except JudgeUnavailable as exc:
        return _without_review(state, f"{NOT_REVIEWED}: {exc.reason}", exc.usage)
    return GoalReview(usage=usage, failure=failure)


def _answer_on(state: RunState) -> Decision | None:
    """A person's latest answer to a question about this very outcome, if any."""
    h = goal_hash(state)
    for d in reversed(state.decisions):
        if d.kind is WaitKind.JUDGE and d.step_id == PLAN_TARGET:
            return d if d.args_hash == h else None
    return None


def _without_review(state: RunState, why: str, usage: Usage) -> GoalReview:
    """The run's policy on a goal review that could not run: end without it (said and
    logged), ask a person, or (no one may be asked) fail."""
    if state.policy.judge_failure == "pass":
        by = "onward (run policy judge_failure: pass)"
        logged = Decision(
            step_id=PLAN_TARGET,
            action=DecisionAction.APPROVE,
            by=by,
            at=utcnow(),
            reason=why,
            kind=WaitKind.JUDGE,
            args_hash=goal_hash(state),
        )
        return GoalReview(usage=usage, missing=why, decision=logged)
    if state.policy.escalate_failures:
        waiting = Waiting(step_id=PLAN_TARGET, reason=why, judge=True)
        return GoalReview(usage=usage, waiting=waiting)
    failure = RunFailure(
        kind=RunFailureKind.ACCEPTANCE,
        message=f"{why} (no one may be asked: escalate_failures is off)",
    )
    return GoalReview(usage=usage, failure=failure)


def final_message(
    deps: NodeDeps,
    state: RunState,
    status: RunStatus,
    failure: RunFailure | None,
    missing: str | None = None,
) -> AIMessage:
    """The goal's last chat message: the report in Markdown with the actual result, marked
    with the steps it reports (onward.observe.chat); ``missing``: why the goal's review
    did not run, said right below the headline."""

    def value_of(name: str) -> Any:
        ref = state.artifacts.get(name)
        if ref is None:
            return None
        try:
            return deps.artifacts.get(ref)
        except Exception:  # a result that cannot be read is left out of the message
            return None

    marker = report_marker(state, reported(state.messages))
    text = markdown_report(state, status, failure, value_of, marker[REPORT_KEY])
    if missing is not None:
        head, _, rest = text.partition("\n")
        text = f"{head}\n\n**Warning:** {missing}.\n{rest}"
    if state.plan.steps and (retried := _retried(state.steps, state.plan.index().ids)):
        text += f"\nDeviations: re-attempted {', '.join(retried)}.\n"
    return AIMessage(text, additional_kwargs=marker)


def execution_report(state: RunState, status: RunStatus, failure: RunFailure | None) -> str:
    """The plain-text report (a terminal's; the chat gets :func:`final_message`)."""
    lines = [f"Run {status.value}: {state.goal.objective if state.goal else ''}"]
    if failure is not None:
        lines.append(f"Reason: {failure.message}")
    if state.plan.steps:
        # Read from the statuses; decode only the steps a line shows (a long run's
        # report must not cost a decode of every step and record).
        index, records = state.plan.index(), state.steps
        n = len(index)
        codes = list(map(records.statuses.get, index.ids, repeat(StepStatus.PENDING)))
        by_status = {code.value: k for code, k in Counter(codes).items()}
        lines.append(
            f"Steps: {n} in plan v{state.plan.version} — "
            + ", ".join(f"{v} {k}" for k, v in sorted(by_status.items()))
        )
        if retried := _retried(records, index.ids):
            lines.append(f"Deviations: re-attempted {', '.join(retried)}")
        shown = 0
        for i, (sid, code) in enumerate(zip(index.ids, codes, strict=True)):
            if code is StepStatus.DONE and shown < 10:
                s, rec = index[i], state.record(sid)
                checks = len(s.checks)
                lines.append(
                    f"  ✓ {s.id} ({s.tool}): {rec.output.summary if rec.output else ''}"
                    + (f" — {checks} step check(s) passed" if checks else "")
                )
                shown += 1
            elif code is StepStatus.FAILED:
                s, rec = index[i], state.record(sid)
                lines.append(f"  ✗ {s.id} ({s.tool}): {rec.failure.message if rec.failure else ''}")
            elif code is StepStatus.SKIPPED and (rec := state.record(sid)).note:
                s = index[i]
                lines.append(f"  – {s.id} ({s.tool}): {rec.note}")
    if state.artifacts:
        lines.append(
            "Artifacts: "
            + ", ".join(
                f"{name} (sha256 {ref.sha256[:12]}…)"
                for name, ref in sorted(state.artifacts.items())
            )
        )
    if state.goal and state.goal.acceptance and status is RunStatus.DONE:
        lines.append(f"Acceptance: {len(state.goal.acceptance)} check(s) passed")
    return "\n".join(lines)


_RAN = frozenset({StepStatus.RUNNING, StepStatus.PRODUCED, StepStatus.DONE, StepStatus.FAILED})


def _retried(records: StepRecords, ids: Sequence[str]) -> list[str]:
    """The steps with more than one attempt, in plan order. A record that ran has at least
    one attempt (transitions set them), so when the attempts add up to the number of such
    records, none has two: no record is read. Else each record's attempts are peeked."""
    ran = sum(1 for code in records.statuses.values() if code in _RAN)
    if records.attempts_total == ran:
        return []
    return [sid for sid in ids if sid in records and records.peek(sid, "attempts", 0) > 1]
