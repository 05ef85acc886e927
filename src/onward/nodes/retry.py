"""retry (transient failures): schedules the next attempt after a backoff drawn from the
step's RetryPolicy (full jitter, capped), as ``not_before`` on the step. Attempt counts live
on the step records, so a crash between attempts resets nothing.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.model.state import (
    FailureClass,
    RunState,
    RunUpdate,
    StepRecord,
    StepStatus,
    transition,
)
from onward.nodes.deps import NodeDeps, thread_of
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.policies.retry import DEFAULT_RETRY
from onward.tools.registry import load_tool_modules


def retry(state: RunState, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> RunUpdate:
    deps = runtime.context
    load_tool_modules(state.tool_modules)
    now = deps.clock()
    steps: dict[str, StepRecord] = {}
    for sid, rec in state.steps.items():
        if rec.status is not StepStatus.FAILED or rec.failure is None:
            continue
        if rec.failure.failure_class is not FailureClass.TRANSIENT:
            continue
        step = state.plan.step(sid)
        spec = deps.registry.get(step.tool)
        policy = step.retry or (spec.retry if spec else None) or DEFAULT_RETRY
        failed = rec.attempts - rec.attempt_floor
        delay = policy.delay(failed, deps.rng)
        steps[sid] = transition(rec, StepStatus.PENDING, not_before=now + delay)
        if deps.events is not None:
            deps.events.record(
                thread_of(config),
                EventKind.RETRY_SCHEDULED,
                {
                    "step_id": sid,
                    "attempt": rec.attempts + 1,
                    "delay": delay.total_seconds(),
                    "cap": policy.cap(failed).total_seconds(),
                    "failure": rec.failure.message,
                },
                at=now,
            )
        emit(
            EventKind.STEP_WAITING,
            step_id=sid,
            tool=step.tool,
            attempt=rec.attempts,
            message=f"retry {rec.attempts + 1} in {delay.total_seconds():.1f}s: "
            f"{rec.failure.message[:80]}",
        )
    return {"steps": steps}
