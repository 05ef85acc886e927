"""Driving a run: hold its lease, check it can go on, stream the graph until it stops,
and guard against a loop; then record where it stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext, suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphRecursionError
from langgraph.types import Command, StateSnapshot, StreamMode

from onward.client.leasing import acquire
from onward.client.lifecycle import apply_requested_cancel
from onward.client.stopping import CancelWatch, settle_asked
from onward.client.views import RunView, config, row, state_of, view
from onward.errors import (
    AnswerRecorded,
    ArtifactError,
    DiskFullError,
    DrainRequested,
    InconsistentRunError,
    LeaseLostError,
    LoopGuardError,
    UsageError,
)
from onward.graph.routes import Node
from onward.graph.schedule import APPROVE, ESCALATE, GATE
from onward.model import references
from onward.model.state import (
    Decision,
    DecisionAction,
    PlanStep,
    RunState,
    RunStatus,
    SideEffect,
    StepRecord,
    StepStatus,
    transition,
    utcnow,
)
from onward.nodes.verify import retry_reviews
from onward.observe.chat import report_marker, reported
from onward.observe.kinds import EventKind
from onward.observe.progress import QUIET, ProgressEvent
from onward.policies.retry import DEFAULT_RETRY
from onward.store.database import Claimed
from onward.store.leases import Heartbeat, new_owner
from onward.tools.registry import Registry, load_tool_modules

if TYPE_CHECKING:
    from onward.client.facade import Onward

MIN_SUPERSTEPS = 10_000


def superstep_limit(state: RunState, registry: Registry) -> int:
    """Loop guard: the most supersteps one drive of this plan can need (every step through
    all its attempts, replans, backoff waits and questions, twice over), not LangGraph's
    fixed default. A drive past it is stuck in a loop."""
    attempts = DEFAULT_RETRY.max_attempts
    for step in state.open_steps():  # a settled step runs again only through a replan
        spec = registry.get(step.tool)
        policy = step.retry or (spec.retry if spec else None) or DEFAULT_RETRY
        attempts = max(attempts, policy.max_attempts)
    per_step = 3 * (attempts + state.budget.max_replans + 2) + 2
    return max(MIN_SUPERSTEPS, 50 + 2 * per_step * len(state.plan.steps))


def stream(
    ow: Onward,
    thread_id: str,
    modes: Sequence[StreamMode],
    *,
    takeover: bool = False,
    command: Command[Any] | None = None,
    stop_after_answer: bool = False,
    wait: bool = True,
    checkpoint_id: str | None = None,
    final: list[tuple[StateSnapshot | RunState, RunStatus]] | None = None,
    interrupt_before: Sequence[str] = (),
    interrupt_after: Sequence[str] = (),
    claimed: Claimed | None = None,
    served: bool = False,
) -> Iterator[tuple[str, Any]]:
    """:meth:`Onward.stream_modes`; a drive that ends normally appends the state it ended in
    to ``final``, so the caller's view needs no second load: the graph's last values
    when the run finished, else the saved snapshot (it holds the pending questions), with
    the status it recorded. ``claimed``: what a worker's claim read of the run (its record,
    its cancel requests, whether it is an API thread), not read again here; ``served``:
    the caller knows the run is a thread of ``onward serve`` (the server's own drive,
    which started the run or took it over from the store: its record is not read again)."""
    pause_at = pause_points(interrupt_before)
    pause_after = [
        *pause_points(interrupt_after),
        *((APPROVE, ESCALATE) if stop_after_answer else ()),
    ]
    if not served and (claimed is None or claimed.run is None):
        row(ow.store, thread_id)  # an unknown thread fails before any lease is taken
    owner = new_owner()
    acquire(ow.store.leases, thread_id, owner, takeover)
    ow.store.cancel_looks.watch(thread_id, ow.store.cancels_requested)
    try:
        with Heartbeat(ow.store.leases, thread_id, owner) as beat:
            ow.store.held.driving(thread_id)  # its end commits what the saver defers
            at = config(thread_id)
            if checkpoint_id:
                at["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
            run_input: Any = command
            snapshot = ow.graph.get_state(at)
            # One load per drive: the state is read from this snapshot below (a load
            # walks the delta channels' history, so it is the costly part of a resume).
            state = state_of(ow.store, thread_id, snapshot)
            load_tool_modules(state.tool_modules)
            if not snapshot.values:
                # Killed before the first checkpoint: start from the stored request. (Its
                # input checkpoint may then wait for the first task's commit.)
                run_input = state
                ow.store.held.input_reproducible(thread_id)
            else:
                check_consistency(ow, thread_id, state)
                if command is None and snapshot.interrupts:
                    run_input = retry_reviews(snapshot.interrupts)  # the judge's questions
                if snapshot.next:
                    ow.store.events.record(
                        thread_id,
                        EventKind.RUN_RESUMED,
                        {"by": owner, "answer": command is not None},
                    )
            # A cancel asked before the drive: read now, unless the claim already read it.
            # During the drive the store's look every CANCEL_LOOK seconds finds one.
            asked = claimed is None or claimed.cancel_asked
            if asked and apply_requested_cancel(ow, thread_id):
                return
            # Suspended until a time (a backoff, a breaker), or stopped by an API cancel
            # (no time, nothing asked or pending: the next drive goes on at once). A run
            # a deadline suspended at its question goes on with the answer instead.
            parked = not (state.resume_at or snapshot.interrupts or snapshot.next)
            if state.status is RunStatus.SUSPENDED and (state.resume_at or parked):
                remaining = (state.resume_at - ow.clock()).total_seconds() if state.resume_at else 0
                if remaining > 0 and not wait:
                    return
                if remaining > 0:
                    ow.sleep(remaining)
                ow.graph.update_state(
                    at, {"status": RunStatus.RUNNING, "resume_at": None}, as_node=GATE
                )
            ow.store.set_run_status(thread_id, RunStatus.RUNNING)
            limit = superstep_limit(state, ow.registry)
            # The last values are the end state: a finished run's view is built from
            # them instead of loading the thread again (a load walks its history).
            wanted = list(modes) if "values" in modes else [*modes, "values"]
            # LangGraph's task pool defaults to cpu_count + 4 threads: size it to the
            # run's concurrency (plus routing), or 10 parallel steps on 2 cores run in
            # two waves. Without the custom mode, nodes build no progress payloads.
            limited: RunnableConfig = {
                **at,
                "configurable": {
                    **at["configurable"],
                    QUIET: "custom" not in wanted,
                    AnswerRecorded.CONFIG_KEY: stop_after_answer,  # inside a step too
                },
                "recursion_limit": limit,
                "max_concurrency": max(state.max_concurrency + 2, 8),
            }
            last: Any = None
            # An API thread's run may be cancelled through the store by another process.
            watch = (
                CancelWatch(ow.store, thread_id, ow.deps)
                if served or api_thread(ow, thread_id, claimed)
                else None
            )
            try:
                with watch or nullcontext():
                    if watch is not None and watch.asked is not None:
                        raise DrainRequested("(start)")  # asked before the drive began
                    for mode, chunk in ow.graph.stream(
                        run_input,
                        limited,
                        context=ow.deps,  # the nodes' Runtime[NodeDeps]
                        stream_mode=wanted,
                        durability="sync",
                        interrupt_before=pause_at or None,
                        interrupt_after=pause_after or None,
                    ):
                        if beat.lost.is_set() or ow.store.fences.lost(thread_id):
                            raise LeaseLostError(thread_id)
                        if mode == "values":
                            last = chunk
                            if "values" not in modes:
                                continue
                        yield mode, chunk
                        cancels = ow.store.cancel_looks
                        if cancels.asked(thread_id) and apply_requested_cancel(ow, thread_id):
                            return  # what finished is saved; the rest will not run
            except AnswerRecorded:
                # Stopped inside a step once the answer was recorded: LangGraph keeps the
                # answer with the step's task; `onward resume` re-runs it and goes on.
                ow.store.held.make_durable()
                return
            except DrainRequested:
                if ow.deps.cancelling.is_set():
                    park_cancelled(ow, thread_id)
                if watch is not None and watch.asked is not None:
                    # Cancelled through the store (runs.cancel on another server): the
                    # last superstep is saved; the run's record says how it ended.
                    ow.store.held.make_durable()
                    settle_asked(ow.store, watch)
                    return
                # The process is stopping: the last superstep is saved, nothing of the
                # next one ran. Another driver resumes from here.
                ow.store.events.record(thread_id, EventKind.DRAINED, {"by": owner})
                return
            except GraphRecursionError:
                ow.store.events.record(thread_id, EventKind.LOOP_GUARD, {"limit": limit})
                raise LoopGuardError(
                    f"run {thread_id} took more than {limit} supersteps in one drive, more "
                    "than its plan can need: something loops. Its saved state is intact; "
                    "look at `onward status`, then resume or cancel it"
                ) from None
            # The drive's last supersteps may wait in the saver (verify, the end state):
            # commit them before the run's record says how it ended (a commit refused by
            # the lease's fence stops the drive here: its successor's record stands). A
            # finished run's record is written in that commit.
            finished = finished_state(last)
            if finished is not None:
                # A worker's run (claimed) is off its queue in the same commit.
                ow.store.make_durable_with_status(
                    thread_id, finished.status, dequeue=claimed is not None
                )
            else:
                ow.store.held.make_durable()
            ow.store.fences.check_lost(thread_id)
            if last is not None:
                # A checkpoint with the state is durable now: the request's big strings
                # are an extra copy of the checkpoint's (store/blobs.py).
                ow.store.settle_request(thread_id)
            ended: StateSnapshot | RunState
            if finished is not None:
                ended, status = finished, finished.status
            else:
                ended = ow.graph.get_state(config(thread_id))
                status = state_of(ow.store, thread_id, ended).status
                ow.store.set_run_status(thread_id, status)
            if final is not None:
                final.append((ended, status))
    except BaseException as exc:
        # A drive stopped by its reader (the generator closed), Ctrl-C or an error still
        # holds the lease: what it saved stands, as before. Only a drive whose lease passed
        # to another driver drops what its saver deferred (drop_held, below).
        if not isinstance(exc, LeaseLostError) and not ow.store.fences.lost(thread_id):
            with suppress(Exception):  # keep the first error
                ow.store.held.make_durable()
        if isinstance(exc, DiskFullError):
            suspend_on_full_disk(ow, thread_id, exc)
        raise
    finally:
        ow.store.cancel_looks.unwatch(thread_id)
        ow.store.drop_held(thread_id)
        ow.store.release_lease(thread_id, owner)  # whatever ended the drive, a full disk too


def park_cancelled(ow: Onward, thread_id: str) -> None:
    """A drive an API cancel stopped (the lease still held): the run is saved as stopped
    (*suspended* with no time, the graph at its end, a message saying what did not run),
    so a chat reads the thread as cancelled, not as a breakpoint or the question it had
    answered. A later run with no input goes on from here (:func:`stream`)."""
    at = config(thread_id)
    state = state_of(ow.store, thread_id, ow.graph.get_state(at))
    if state.status is not RunStatus.RUNNING:
        return  # it ended, or waits for a person: that state already says so
    ran = (StepStatus.DONE, StepStatus.SKIPPED)
    left = [s.id for s in state.plan.steps if state.status_of(s.id) not in ran]
    shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
    note = (
        f"Stopped: the run was cancelled; {len(left)} step(s) did not run ({shown}). "
        "Nothing more runs until a new run of this thread goes on from here."
        if left
        else "Stopped: the run was cancelled."
    )
    ow.graph.update_state(
        at,
        {
            "status": RunStatus.SUSPENDED,
            "resume_at": None,
            # The steps settled so far show before it in the chat (observe/chat.py).
            "messages": [
                AIMessage(note, additional_kwargs=report_marker(state, reported(state.messages)))
            ],
        },
        as_node=GATE,
    )
    ow.store.held.make_durable()
    ow.store.set_run_status(thread_id, RunStatus.SUSPENDED)


def suspend_on_full_disk(ow: Onward, thread_id: str, exc: DiskFullError) -> None:
    """A drive a full disk ended: the run is suspended, not left ``running``. SQLite's
    reserve is spent to make room for saying so (and for the lease's release after it),
    and the WAL folded back if the database has room to take it. The checkpoint is not
    touched: it stays where the last save left it, which is where ``resume`` goes on."""
    store = ow.store
    store.free_reserve()
    store.fold_back_wal()
    with suppress(Exception):  # still no room: the error said what to do
        store.set_run_status(thread_id, RunStatus.SUSPENDED)
        detail = {"reason": "disk_full", "message": str(exc)[:500]}
        store.events.record(thread_id, EventKind.RUN_SUSPENDED, detail)


def drive(
    ow: Onward,
    thread_id: str,
    on_event: Callable[[ProgressEvent], None] | None,
    *,
    takeover: bool,
    wait: bool,
    command: Command[Any] | None,
    stop_after_answer: bool,
    wake: bool,
    interrupt_before: Sequence[str] = (),
    claimed: Claimed | None = None,
) -> RunView:
    """:func:`stream` to the end; the view of where the run stopped. ``claimed``: what a
    worker's claim read of the run (see :func:`stream`)."""
    final: list[tuple[StateSnapshot | RunState, RunStatus]] = []
    # Progress is streamed only to a listener: with the custom stream mode on, LangGraph
    # runs even a lone task on a pool thread so it can stream while the task runs. The
    # event log records the same events either way.
    for mode, chunk in stream(
        ow,
        thread_id,
        ["custom"] if on_event is not None else ["values"],
        takeover=takeover,
        command=command,
        stop_after_answer=stop_after_answer,
        wait=wait,
        final=final,
        interrupt_before=interrupt_before,
        claimed=claimed,
    ):
        if on_event is not None and mode == "custom":
            on_event(ProgressEvent.model_validate(chunk))
    if wake:
        ow.store.wake(thread_id)
    if not final:  # cancelled, or not due yet: read what is there now
        return ow.get(thread_id)
    ended, status = final[0]
    if claimed is not None and claimed.run is not None:
        run = replace(claimed.run, status=status)  # the record as the drive left it
    else:
        run = row(ow.store, thread_id)
    return view(ow.store, thread_id, run, ended)


def api_thread(ow: Onward, thread_id: str, claimed: Claimed | None) -> bool:
    """Whether the driven run is a thread of ``onward serve`` (its cancels come through
    the API's run records): as the claim found, else read."""
    if claimed is not None and claimed.api_thread is not None:
        return claimed.api_thread
    return ow.store.serving() and ow.store.threads.get(thread_id) is not None


def pause_points(nodes: Sequence[str]) -> list[str]:
    """``interrupt_before`` checked against the graph's nodes (a typo would never pause)."""
    known = {n.value for n in Node}
    unknown = sorted(set(nodes) - known)
    if unknown:
        raise UsageError(
            f"interrupt_before: no node named {', '.join(map(repr, unknown))}; the graph's "
            f"nodes are {', '.join(sorted(known))}"
        )
    return list(dict.fromkeys(nodes))


def check_consistency(ow: Onward, thread_id: str, state: RunState) -> None:
    """Before driving on: every artifact a remaining step reads must still be intact.
    A pure producer is re-opened (recorded as a decision); otherwise the run stops."""
    if not state.plan.steps or state.status.finished:
        return
    producers: dict[str, PlanStep] | None = None
    reopen: dict[str, StepRecord] = {}
    decisions: list[Decision] = []
    for step in state.open_steps():
        for name in references.names(step.args):
            ref = state.artifacts.get(name)
            if ref is None:
                continue
            try:
                ow.store.artifacts.get(ref)
                continue
            except ArtifactError as exc:
                problem = str(exc)
            if producers is None:  # only when an artifact is damaged: read every step
                producers = {s.output: s for s in state.plan.steps if s.output}
            if name not in producers:
                continue
            producer = producers[name]
            spec = ow.registry.get(producer.tool)
            if spec is None or spec.side_effect is not SideEffect.PURE:
                raise InconsistentRunError(
                    f"cannot resume run {thread_id}: {problem}. It was produced by step "
                    f"{producer.id!r} ({producer.tool}), which has side effects, so onward "
                    "will not re-run it on its own. Restore the artifact (or start a new run)"
                )
            if producer.id not in reopen:
                reopen[producer.id] = transition(state.record(producer.id), StepStatus.PENDING)
                decisions.append(
                    Decision(
                        step_id=producer.id,
                        action=DecisionAction.REOPEN,
                        by="onward",
                        at=utcnow(),
                        reason=problem,
                    )
                )
    if reopen:
        ow.graph.update_state(
            config(thread_id), {"steps": reopen, "decisions": decisions}, as_node=GATE
        )


def finished_state(values: Any) -> RunState | None:
    """The graph's last ``values`` chunk as a state, if the run finished (a finished run
    has no pending questions, so these values are all its view needs)."""
    if isinstance(values, RunState):
        state = values
    elif isinstance(values, dict) and "__interrupt__" not in values:
        state = RunState.model_validate(values)
    else:
        return None
    return state if state.status.finished else None
