"""finalize: goal acceptance checks, then the execution report as the final chat message."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import repeat
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.model.budget import model_budget_spent
from onward.model.state import (
    RunFailure,
    RunFailureKind,
    RunState,
    RunStatus,
    RunUpdate,
    StepRecords,
    StepStatus,
    Usage,
)
from onward.nodes.deps import NodeDeps, thread_of
from onward.observe.chat import REPORT_KEY, markdown_report, report_marker, reported
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.verification.checks import evaluate
from onward.verification.judge import judge_goal


def finalize(state: RunState, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> RunUpdate:
    deps = runtime.context
    if state.status is RunStatus.CANCELLED:
        emit(EventKind.RUN_FINISHED, message=RunStatus.CANCELLED.value)
        return {"messages": [final_message(deps, state, RunStatus.CANCELLED, state.failure)]}
    failure = state.failure
    usage: Usage | None = None
    if failure is None and state.plan.steps:
        # Statuses are at hand without decoding the records: decode the first failed.
        statuses = state.steps.statuses
        failed = (
            next(sid for sid, st in statuses.items() if st is StepStatus.FAILED)
            if StepStatus.FAILED in statuses.values()  # a scan in C: usually none
            else None
        )
        if failed is not None:
            rec = state.steps[failed]
            why = rec.failure.message if rec.failure else "failed"
            cls = rec.failure.failure_class if rec.failure else "unknown"
            failure = RunFailure(
                kind=RunFailureKind.STEP,
                step_id=rec.id,
                message=f"step {rec.id!r} failed ({cls}): {why}",
            )
        else:
            assert state.goal is not None
            ctx = deps.check_context(
                state.workdir, dict(state.artifacts), confined=state.policy.confine_paths
            )
            findings = [f for c in state.goal.acceptance for f in evaluate(c, None, ctx)]
            if findings:
                failure = RunFailure(
                    kind=RunFailureKind.ACCEPTANCE,
                    message="acceptance checks failed: " + "; ".join(findings),
                )
            elif state.goal.judge and deps.model is not None and model_budget_spent(state) is None:
                thread_id = thread_of(config)
                try:
                    failure, usage = judge_goal(deps, state, thread_id)
                except Exception:
                    failure = None
    status = RunStatus.FAILED if failure else RunStatus.DONE
    emit(EventKind.RUN_FINISHED, message=status.value)
    message = final_message(deps, state, status, failure)
    out: RunUpdate = {"status": status, "failure": failure, "messages": [message]}
    if usage is not None:
        out["usage"] = usage
    return out


def final_message(
    deps: NodeDeps, state: RunState, status: RunStatus, failure: RunFailure | None
) -> AIMessage:
    """The goal's last chat message: the report in Markdown with the actual result, marked
    with the steps it reports (onward.observe.chat)."""

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
