"""Reading a run as it is now through LangGraph: its typed state, its questions, the
:class:`RunView` users see. The last level of onward.observe.reading, which every face
reads through (the lighter reads first)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from onward.errors import AnswerRecorded, UnknownThreadError
from onward.model.state import RunState, RunStatus, migrate
from onward.observe.checkpoint import stopped
from onward.observe.kinds import EventKind
from onward.observe.live import running_steps
from onward.observe.view import RunView as RunView
from onward.observe.view import StepView as StepView
from onward.observe.view import StepViews as StepViews
from onward.observe.view import run_view, waiting_status
from onward.observe.view import step_view as step_view
from onward.people.inbox import PendingDecision
from onward.store.database import RunRow, Store

if TYPE_CHECKING:
    from onward.client.facade import Onward

RECURSION_LIMIT = 1_000_000  # reads and edits; a drive gets a limit derived from its plan


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

        def suspended() -> Iterator[Any]:
            for e in store.events.list(thread_id, [EventKind.RUN_SUSPENDED]):
                yield e.detail.get("interrupt_id")

        status = waiting_status(snap.interrupts, suspended)
        state = state.model_copy(update={"status": status})
    return state


def state(ow: Onward, thread_id: str) -> RunState:
    row(ow.store, thread_id)
    return state_of(ow.store, thread_id, snapshot(ow, thread_id))


def pending_of(thread_id: str, run: RunRow, snap: StateSnapshot) -> list[PendingDecision]:
    """The questions a snapshot's interrupts ask, oldest first (not one answered inside a
    tool-calling step whose drive then stopped: its task ended in AnswerRecorded)."""
    answered = {
        i.id
        for t in snap.tasks
        if isinstance(t.error, str) and t.error.startswith(AnswerRecorded.__name__ + "(")
        for i in t.interrupts
    }
    found = [
        p
        for i in snap.interrupts
        if i.id not in answered
        for p in PendingDecision.of_interrupt(thread_id, i.id, i.value, run.objective)
    ]
    return sorted(found, key=lambda p: p.asked_at)  # stable: a batch keeps its order


def view(store: Store, thread_id: str, run: RunRow, snap: StateSnapshot | RunState) -> RunView:
    """The view of a snapshot, or of a finished run's final state (no questions)."""
    state = snap if isinstance(snap, RunState) else state_of(store, thread_id, snap)
    # A run saved as stopped (an API cancel: client.driving.park_cancelled) says why in
    # its last message, as a finished run's report does.
    asked = not isinstance(snap, RunState) and bool(snap.interrupts)
    was_stopped = stopped(state.status, state.resume_at, asked)
    if state.status is RunStatus.RUNNING and run.status is RunStatus.SUSPENDED:
        # A drive a full disk ended (client.driving.suspend_on_full_disk): its record says
        # so; the checkpoint stays as it was saved, for resume to go on from.
        state = state.model_copy(update={"status": RunStatus.SUSPENDED})
    return run_view(
        store.leases,
        thread_id,
        state,
        report=state.messages[-1].text
        if (state.status.finished or was_stopped) and state.messages
        else "",
        pending=pending_of(thread_id, run, snap)
        if state.status.waiting and not isinstance(snap, RunState)
        else [],
        paused_before=list(snap.next)
        if not isinstance(snap, RunState)
        and state.status is RunStatus.RUNNING
        and not any(t.interrupts for t in snap.tasks)
        else [],
        live=lambda: running_steps(store.events, store.ledger, thread_id, state.steps),
    )


def stalled_threads(store: Store) -> set[str]:
    leases = store.leases
    return {
        tid
        for tid, lease in leases.all().items()
        if leases.stopped(lease) and not ((found := store.get_run(tid)) and found.status.finished)
    }
