"""wait: nothing can run before some ``not_before`` (backoff, an open breaker). Short waits
are slept here; a longer one suspends the run until then, so the process can stop and
``onward resume`` (or a worker) goes on later.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from onward.model.state import (
    RunState,
    RunStatus,
    RunUpdate,
    StepStatus,
)
from onward.nodes.deps import NodeDeps
from onward.store.breakers import BreakerPolicy
from onward.tools.registry import load_tool_modules

POLL = 0.5
"""Seconds the wait node waits when it finds no deferral to wait for (no hot loop)."""


def earliest_wait(deps: NodeDeps, state: RunState) -> datetime | None:
    """When the first deferred pending step may run (its backoff, or its service's breaker)."""
    times: list[datetime] = []
    now = deps.clock()
    for step in state.plan.steps:
        rec = state.record(step.id)
        if rec.status is not StepStatus.PENDING:
            continue
        if rec.not_before is not None and rec.not_before > now:
            times.append(rec.not_before)
        spec = deps.registry.get(step.tool)
        service = spec.service_for(step.args) if spec else None
        if spec is not None and service and deps.breakers is not None:
            until = deps.breakers.blocked_until(service, spec.breaker or BreakerPolicy())
            if until is not None:
                times.append(until)
    return min(times) if times else None


def wait(state: RunState, runtime: Runtime[NodeDeps]) -> RunUpdate:
    deps = runtime.context
    load_tool_modules(state.tool_modules)
    until = earliest_wait(deps, state)
    if until is None:  # the scheduler saw a deferral that is over by now: look again soon
        until = deps.clock() + timedelta(seconds=POLL)
    seconds = (until - deps.clock()).total_seconds()
    if seconds <= deps.max_wait.total_seconds():
        if seconds > 0:
            deps.sleep(seconds)
        return {}
    return {
        "status": RunStatus.SUSPENDED,
        "resume_at": until,
        "messages": [
            AIMessage(
                f"Suspended until {until.isoformat(timespec='seconds')} (a retry backoff or "
                "an open circuit breaker); `onward resume` goes on then."
            )
        ],
    }
