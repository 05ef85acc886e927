"""Reading a run as it is now: its typed state, its questions, the :class:`RunView` users see."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot
from pydantic import BaseModel, ConfigDict

from onward.errors import UnknownThreadError
from onward.model.state import (
    ArtifactRef,
    Budget,
    Decision,
    RunFailure,
    RunState,
    RunStatus,
    StepFailure,
    StepStatus,
    Usage,
    Waiting,
    migrate,
)
from onward.observe.kinds import EventKind
from onward.people.inbox import PendingDecision
from onward.store.database import RunRow, Store

if TYPE_CHECKING:
    from onward.client.facade import Onward

RECURSION_LIMIT = 1_000_000  # reads and edits; a drive gets a limit derived from its plan


class StepView(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    tool: str
    status: StepStatus
    attempts: int
    findings: list[str] = []
    error: str | None = None
    failure_class: str | None = None
    output: ArtifactRef | None = None
    failures: list[StepFailure] = []
    """Every failure the step had, oldest first (class, message, evidence, attempt)."""
    not_before: datetime | None = None
    replans: int = 0
    note: str | None = None


class RunView(BaseModel):
    """A run as users see it: what ``onward status --json`` prints."""

    model_config = ConfigDict(frozen=True)

    thread_id: str
    status: RunStatus
    objective: str
    workdir: str
    plan_version: int | None = None
    plan_source: str | None = None
    steps: list[StepView] = []
    artifacts: dict[str, ArtifactRef] = {}
    failure: RunFailure | None = None
    report: str = ""
    driver: str | None = None
    """Owner of the live or last lease (host:pid:random), if any."""
    heartbeat_at: datetime | None = None
    stalled: bool = False
    """Unfinished, and its driver's heartbeat is stale: the driver died or hangs."""
    resume_at: datetime | None = None
    """A suspended run goes on at this time (a retry backoff or an open breaker)."""
    usage: Usage = Usage()
    """Model calls, tokens and cost so far."""
    budget: Budget = Budget()
    waiting: list[Waiting] = []
    """Effects whose outcome is unknown (each is also a pending escalation)."""
    pending: list[PendingDecision] = []
    """Questions the run waits on: approvals, the plan, escalations."""
    decisions: list[Decision] = []
    """The decision log: who decided what, when, on which args hash."""
    paused_before: list[str] = []
    """The nodes a drive paused before (``interrupt_before``); a resume goes on."""

    @property
    def finished(self) -> bool:
        return self.status.finished

    def artifact_value(self, ow: Onward, name: str) -> Any:
        return ow.store.artifacts.get(self.artifacts[name])


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": RECURSION_LIMIT}


def row(store: Store, thread_id: str) -> RunRow:
    found = store.get_run(thread_id)
    if found is None:
        raise UnknownThreadError(thread_id, store.url)
    return found


def snapshot(ow: Onward, thread_id: str) -> StateSnapshot:
    return ow.graph.get_state(config(thread_id))


def state_of(store: Store, thread_id: str, snap: StateSnapshot) -> RunState:
    """The state a snapshot holds (the stored request before the first checkpoint), its
    status corrected by the snapshot's questions: see :meth:`Onward.state`."""
    values = snap.values
    if not values:
        return RunState.model_validate(migrate(dict(store.run_request(thread_id)["input"])))
    state = (
        values if isinstance(values, RunState) else RunState.model_validate(migrate(dict(values)))
    )
    if snap.interrupts and not state.status.finished:
        asked = {i.id for i in snap.interrupts}
        budget_stop = any(
            isinstance(i.value, dict) and i.value.get("onward", {}).get("kind") == "budget"
            for i in snap.interrupts
        )
        suspended = budget_stop or any(
            e.detail.get("interrupt_id") in asked
            for e in store.events.list(thread_id, [EventKind.RUN_SUSPENDED])
        )
        status = RunStatus.SUSPENDED if suspended else RunStatus.WAITING_FOR_HUMAN
        state = state.model_copy(update={"status": status})
    return state


def state(ow: Onward, thread_id: str) -> RunState:
    row(ow.store, thread_id)
    return state_of(ow.store, thread_id, snapshot(ow, thread_id))


def pending_of(thread_id: str, run: RunRow, snap: StateSnapshot) -> list[PendingDecision]:
    """The questions a snapshot's interrupts ask, oldest first."""
    found = [
        PendingDecision.from_interrupt(thread_id, i.id, i.value, run.objective)
        for i in snap.interrupts
    ]
    return sorted((p for p in found if p is not None), key=lambda p: p.asked_at)


def pending(ow: Onward, thread_id: str) -> list[PendingDecision]:
    run = row(ow.store, thread_id)
    return pending_of(thread_id, run, snapshot(ow, thread_id))


def view(store: Store, thread_id: str, run: RunRow, snap: StateSnapshot | RunState) -> RunView:
    """The view of a snapshot, or of a finished run's final state (no questions)."""
    state = snap if isinstance(snap, RunState) else state_of(store, thread_id, snap)
    steps = []
    if state.plan.steps:
        for s in state.plan.steps:
            rec = state.record(s.id)
            steps.append(
                StepView(
                    id=s.id,
                    tool=s.tool,
                    status=rec.status,
                    attempts=rec.attempts,
                    findings=rec.findings,
                    output=rec.output,
                    error=rec.failure.message if rec.failure else None,
                    failure_class=rec.failure.failure_class if rec.failure else None,
                    failures=[*rec.history, *([rec.failure] if rec.failure else [])],
                    not_before=rec.not_before,
                    replans=rec.replans,
                    note=rec.note,
                )
            )
    report = ""
    if state.status.finished and state.messages:
        report = state.messages[-1].text
    lease = store.leases.get(thread_id)
    return RunView(
        thread_id=thread_id,
        status=state.status,
        objective=state.goal.objective if state.goal else "",
        workdir=state.workdir,
        plan_version=state.plan.version if state.plan.steps else None,
        plan_source=state.plan.source if state.plan.steps else None,
        steps=steps,
        artifacts=dict(state.artifacts),
        failure=state.failure,
        report=report,
        resume_at=state.resume_at,
        usage=state.usage,
        budget=state.budget,
        waiting=[w for w in state.waiting.values() if w is not None],
        pending=pending_of(thread_id, run, snap)
        if state.status.waiting and not isinstance(snap, RunState)
        else [],
        decisions=list(state.decisions),
        paused_before=list(snap.next)
        if not isinstance(snap, RunState)
        and state.status is RunStatus.RUNNING
        and not any(t.interrupts for t in snap.tasks)
        else [],
        driver=lease.owner if lease else None,
        heartbeat_at=lease.heartbeat_at if lease else None,
        stalled=lease is not None
        and not state.status.finished
        and store.leases.policy.stale(lease.heartbeat_at, store.leases.clock()),
    )


def get(ow: Onward, thread_id: str) -> RunView:
    run = row(ow.store, thread_id)
    return view(ow.store, thread_id, run, snapshot(ow, thread_id))


def stalled_threads(store: Store) -> set[str]:
    leases = store.leases
    now = leases.clock()
    return {
        tid
        for tid, lease in leases.all().items()
        if leases.policy.stale(lease.heartbeat_at, now)
        and not ((found := store.get_run(tid)) and found.status.finished)
    }
