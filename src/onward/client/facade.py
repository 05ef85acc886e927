"""The :class:`Onward` facade: it holds what every call shares (the store, the registry,
the compiled graph, the clock) and hands each call to the module of its topic."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StreamMode

from onward.checkpointing.savers import FlushedReads
from onward.client import deciding, driving, history, lifecycle, starting, views
from onward.client.deciding import SweepReport
from onward.client.lifecycle import CancelReport, PruneReport
from onward.client.views import RunView
from onward.errors import UnknownThreadError, UsageError
from onward.graph.build import compile_graph
from onward.llm.models import check_model, model_from_env
from onward.model.state import Budget, DecisionAction, Plan, RunState, utcnow
from onward.nodes.deps import NodeDeps
from onward.notebook.diagram import Diagram
from onward.observe import reading
from onward.observe.progress import ProgressEvent
from onward.observe.timeline import Summary, Timeline
from onward.people.inbox import Questions
from onward.policies.durations import as_duration
from onward.policies.run import RunPolicy
from onward.settings import settings
from onward.store.database import RunRow, Store, default_url
from onward.store.sql import redact, require_store, store_exists
from onward.tools.registry import (
    Registry,
    default_registry,
    load_tool_modules,
    normalize_tool_refs,
    tool_modules_from_env,
)
from onward.verification.checks import Check


class Onward:
    """One open store plus the compiled graph. Not thread-safe; one per thread or process.

    A store that is not at ``db`` yet is created by the first call that writes (``start``,
    ``submit``…); a call that only reads (``list_runs``, ``get``, ``inbox``…) raises
    :class:`StoreError` or :class:`UnknownThreadError` instead, and creates nothing."""

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        registry: Registry | None = None,
        tool_modules: Sequence[str] = (),
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        model: BaseChatModel | Literal["env"] | None = "env",
        max_wait: timedelta | float | None = None,
        graph_of: Onward | None = None,
    ) -> None:
        """``db``: the store, a SQLite file (a path, ``str`` or ``pathlib.Path``, or a
        ``sqlite:///`` URL) or a ``postgresql://`` URL; by default $ONWARD_DB's.
        ``model``: the chat model for goals outside the templates, replanning and
        judging; by default from the environment (OPENAI_API_KEY...), None for none.
        ``max_wait``: longest in-process wait for a retry or breaker before the run is
        suspended instead (a timedelta, or seconds; $ONWARD_MAX_WAIT, 60 s; workers use 0 and
        requeue). ``graph_of``: a client of the same store, tools, model and clock whose
        compiled graph this one runs, with its own saver (a server's pool of clients
        compiles the graph once: compiling is most of what opening a client costs). Its
        nodes and routes run on the driving client's ``deps`` (the run's context)."""
        self.tool_modules = normalize_tool_refs([*tool_modules_from_env(), *tool_modules])
        load_tool_modules(self.tool_modules)
        self.registry = registry or default_registry
        self.url = default_url() if db is None or db == "" else _store_url(db)
        self.clock, self.sleep = clock, sleep
        self._rng = rng or random.Random()
        self._max_wait = (
            settings().max_wait if max_wait is None else as_duration(max_wait, "max_wait")
        )
        self._model = check_model(model_from_env() if model == "env" else model)
        self._store: Store | None = None
        self._deps: NodeDeps | None = None
        self._graph: CompiledStateGraph[Any, Any, Any, Any] | None = None
        self._graph_of = graph_of
        # A store that is not there yet is made by the first call that writes (start,
        # submit...), never by one that only reads: Onward(url).list_runs() creates nothing.
        if store_exists(self.url):
            self._open()

    def _open(self) -> Store:
        if self._store is None:
            store = Store(self.url)
            store.breakers.clock = self.clock
            self._deps = NodeDeps(
                registry=self.registry,
                artifacts=store.artifacts,
                ledger=store.ledger,
                events=store.events,
                held=store.held,
                clock=self.clock,
                breakers=store.breakers,
                sleep=self.sleep,
                rng=self._rng,
                max_wait=self._max_wait,
                model=self._model,
            )
            if self._graph_of is not None:
                self._graph = self._graph_of.graph.copy(update={"checkpointer": store.saver})
                if isinstance(store.saver, FlushedReads):  # as compile_graph teaches it
                    store.saver.learn_channels(self._graph.channels)
            else:
                self._graph = compile_graph(self._deps, checkpointer=store.saver)
            self._store = store
        return self._store

    @property
    def store(self) -> Store:
        """The open store (opened, and created if need be, on first use)."""
        return self._store or self._open()

    @property
    def deps(self) -> NodeDeps:
        self._open()
        assert self._deps is not None
        return self._deps

    @property
    def graph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        self._open()
        assert self._graph is not None
        return self._graph

    def _existing(self, thread_id: str | None = None) -> None:
        """Before a call that reads (or drives a given run): a store that is not there is
        an error, and is not created. ``thread_id``: the run asked for, which cannot be in
        a store that does not exist."""
        if self._store is not None or store_exists(self.url):
            return
        if thread_id is not None:
            raise UnknownThreadError(thread_id, f"{redact(self.url)} (no store is there)")
        require_store(self.url)  # raises the StoreError that says so

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> Onward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- starting ---------------------------------------------------------

    def start(
        self,
        goal: str | None = None,
        *,
        plan: Plan | starting.DeclaredPlan | Mapping[str, Any] | str | Path | None = None,
        inputs: Sequence[str] = (),
        workdir: str | Path | None = None,
        max_concurrency: int | None = None,
        thread_id: str | None = None,
        policy: RunPolicy | None = None,
        budget: Budget | None = None,
        judge: bool = False,
        acceptance: Sequence[Check] = (),
        constraints: Mapping[str, str] | None = None,
        fail_fast: bool = True,
    ) -> str:
        """Create a run (nothing executes yet) and return its thread id.

        ``plan`` is a :class:`Plan`, a declared plan document (the mapping a plan file
        holds: ``{"goal": ..., "steps": [...]}``, validated the same way), the path of a
        plan file, or what :func:`onward.load_plan_file` returned (its goal, plan and
        ``max_concurrency``); without one, the goal is planned by the template rules when
        the run starts.
        ``policy``: which tools need approval or may run at all, and wait deadlines.
        ``acceptance`` and ``constraints``: the goal's own checks and constraints (a plan
        file carries its own; these add to them). ``fail_fast=False``: a goal no planner
        handles is no error here; the run fails at planning, its final message saying why
        and what to do (what a chat shows).
        """
        return starting.start(
            self,
            goal,
            plan=plan,
            inputs=inputs,
            workdir=workdir,
            max_concurrency=max_concurrency,
            thread_id=thread_id,
            policy=policy,
            budget=budget,
            judge=judge,
            acceptance=acceptance,
            constraints=constraints,
            fail_fast=fail_fast,
        )

    def submit(self, goal: str | None = None, **start: Any) -> str:
        """Create a run (like :meth:`start`) and put it on the work queue, where any
        ``onward worker`` on the same store claims it. Returns the thread id."""
        thread_id = self.start(goal, **start)
        self.store.enqueue(thread_id)
        return thread_id

    # -- driving ----------------------------------------------------------

    def stream(
        self,
        thread_id: str,
        *,
        takeover: bool = False,
        command: Command[Any] | None = None,
        stop_after_answer: bool = False,
        wait: bool = True,
        interrupt_before: Sequence[str] = (),
    ) -> Iterator[ProgressEvent]:
        """Drive a run until it stops, yielding progress events. Resumes where it stopped.

        Holds the run's lease while driving: a run another live process drives raises
        :class:`RunBusyError`; ``takeover=True`` waits for that lease to expire instead.
        A cancel requested by another process (``onward cancel``) stops the drive at the
        next superstep. A run suspended until a time (backoff, open breaker) is waited for
        first; ``wait=False`` returns at once instead (the view says when).
        ``interrupt_before``: pause before these nodes (e.g. ``["verify"]``), LangGraph's way
        of stepping through a run; the view's ``paused_before`` says where, and a later
        drive goes on.
        """
        self._existing(thread_id)
        for _mode, chunk in driving.stream(
            self,
            thread_id,
            ["custom"],
            takeover=takeover,
            command=command,
            stop_after_answer=stop_after_answer,
            wait=wait,
            interrupt_before=interrupt_before,
        ):
            yield ProgressEvent.model_validate(chunk)

    def stream_modes(
        self,
        thread_id: str,
        modes: Sequence[StreamMode],
        *,
        takeover: bool = False,
        command: Command[Any] | None = None,
        stop_after_answer: bool = False,
        wait: bool = True,
        checkpoint_id: str | None = None,
        interrupt_before: Sequence[str] = (),
        interrupt_after: Sequence[str] = (),
        served: bool = False,
    ) -> Iterator[tuple[str, Any]]:
        """:meth:`stream` with LangGraph's stream modes (``values``, ``updates``,
        ``messages``, ``custom``, ``debug``...): yields ``(mode, chunk)`` as the graph
        emits them (the server streams these). ``checkpoint_id`` resumes from a past
        checkpoint of the thread (time travel: a new branch of the same thread).
        ``served``: the run is a thread of ``onward serve`` (its drive says so: the
        store's cancels of API runs are watched without reading the thread's row, and
        the run's record, which the drive's request stored, is not read again)."""
        self._existing(thread_id)
        yield from driving.stream(
            self,
            thread_id,
            modes,
            takeover=takeover,
            command=command,
            stop_after_answer=stop_after_answer,
            wait=wait,
            checkpoint_id=checkpoint_id,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            served=served,
        )

    def drive(
        self,
        thread_id: str,
        on_event: Callable[[ProgressEvent], None] | None = None,
        *,
        takeover: bool = False,
        wait: bool = True,
        command: Command[Any] | None = None,
        stop_after_answer: bool = False,
        wake: bool = False,
        interrupt_before: Sequence[str] = (),
    ) -> RunView:
        """:meth:`stream` to the end, passing each event to ``on_event``; returns the view
        of where the run stopped. ``wake``: put a queued run back in line for workers.
        ``interrupt_before``: pause before these nodes (see :meth:`stream`)."""
        self._existing(thread_id)
        return driving.drive(
            self,
            thread_id,
            on_event,
            takeover=takeover,
            wait=wait,
            command=command,
            stop_after_answer=stop_after_answer,
            wake=wake,
            interrupt_before=interrupt_before,
        )

    def run(
        self,
        goal: str | None = None,
        *,
        on_event: Callable[[ProgressEvent], None] | None = None,
        interrupt_before: Sequence[str] = (),
        **start: Any,
    ) -> RunView:
        """Start a run and drive it to its end (or until it waits for a human, or reaches
        a node of ``interrupt_before``)."""
        return self.drive(self.start(goal, **start), on_event, interrupt_before=interrupt_before)

    def resume(
        self,
        thread_id: str,
        on_event: Callable[[ProgressEvent], None] | None = None,
        *,
        takeover: bool = False,
        interrupt_before: Sequence[str] = (),
    ) -> RunView:
        """Finish a run that stopped (crash, kill, interrupt). A finished run is returned as is.
        ``takeover=True`` waits for a dead driver's lease to expire, then takes the run over.
        ``interrupt_before``: pause again before these nodes."""
        return self.drive(thread_id, on_event, takeover=takeover, interrupt_before=interrupt_before)

    # -- deciding ---------------------------------------------------------

    def pending(self, thread_id: str) -> Questions:
        """The questions one run waits on, oldest first (a list; a table in Jupyter)."""
        self._existing(thread_id)
        return Questions(reading.pending(self, thread_id))

    def inbox(self, *, user: str | None = None) -> Questions:
        """Every pending decision across all runs of the store, oldest first. With
        ``ONWARD_SECRET`` set, each carries a resume token minted for ``user``."""
        self._existing()
        return Questions(deciding.inbox(self, user))

    def decide(
        self,
        thread_id: str,
        answer: dict[str, Any] | list[Any],
        *,
        step: str | None = None,
        interrupt_id: str | None = None,
        by: str | None = None,
        token: str | None = None,
        continue_run: bool = True,
        on_event: Callable[[ProgressEvent], None] | None = None,
    ) -> RunView:
        """Answer a run's pending question, in any of the accepted shapes (see
        :mod:`onward.people.approvals`). Which one: ``interrupt_id``, or ``step``, or the only
        one. A wave's questions are one interrupt: a list of N decisions answers them in
        order; with ``step`` one decision answers that step only. The answer is checked
        before anything changes; then the run continues in this process, or with
        ``continue_run=False`` stops right after recording it."""
        self._existing(thread_id)
        return deciding.decide(
            self,
            thread_id,
            answer,
            step=step,
            interrupt_id=interrupt_id,
            by=by,
            token=token,
            continue_run=continue_run,
            on_event=on_event,
            check_token=True,
        )

    def follow_up(
        self,
        thread_id: str,
        text: str,
        *,
        checkpoint_id: str | None = None,
        on_event: Callable[[ProgressEvent], None] | None = None,
    ) -> RunView:
        """The thread's next goal, as a chat's next message: planned as a new version of the
        plan after the done steps (kept, and referenceable), then driven. At a past
        ``checkpoint_id`` it forks the thread from there (an edited earlier message)."""
        from onward.client.following import follow_up

        follow_up(self, thread_id, text, checkpoint_id=checkpoint_id)
        return self.drive(thread_id, on_event)  # the update is the thread's newest checkpoint

    def approve(
        self,
        thread_id: str,
        step: str | None = None,
        *,
        edit: dict[str, Any] | None = None,
        args: dict[str, Any] | None = None,
        reason: str = "",
        **how: Any,
    ) -> RunView:
        """Approve a pending step (or plan, or escalation: run it again). ``edit`` changes
        some args, ``args`` replaces them all; the run then executes exactly those."""
        self._existing(thread_id)
        return deciding.approve(self, thread_id, step, edit=edit, args=args, reason=reason, how=how)

    def reject(
        self, thread_id: str, step: str | None = None, *, reason: str, **how: Any
    ) -> RunView:
        """Reject: the step is skipped, and so is every step that depends on it."""
        return self.decide(thread_id, {"type": "reject", "message": reason}, step=step, **how)

    def respond(self, thread_id: str, text: str, step: str | None = None, **how: Any) -> RunView:
        """Answer with feedback instead of a decision; recorded for replanning."""
        return self.decide(thread_id, {"type": "respond", "message": text}, step=step, **how)

    def resolve(
        self,
        thread_id: str,
        step_id: str,
        action: DecisionAction | str,
        *,
        result: Any = None,
        by: str | None = None,
        reason: str = "",
        token: str | None = None,
        continue_run: bool = False,
    ) -> RunView:
        """Settle a step whose effect's outcome is unknown (an escalation).

        ``done``: the effect happened; ``result`` (JSON) is its result, verified by the
        step's checks like any output. ``retry``: it did not happen; run it again.
        ``skip``: leave it out (and the steps that depend on it). By default only records
        the decision; drive the run on with :meth:`resume`.
        """
        self._existing(thread_id)
        return deciding.resolve(
            self,
            thread_id,
            step_id,
            action,
            result=result,
            by=by,
            reason=reason,
            token=token,
            continue_run=continue_run,
        )

    def cancel(
        self,
        thread_id: str,
        *,
        compensate: bool = False,
        reason: str = "",
        by: str | None = None,
    ) -> CancelReport:
        """Stop a run for good (status ``cancelled``). A live driver is asked to stop at its
        next superstep and this waits for it; a dead driver's lease is waited out. With
        ``compensate``, completed effects are undone newest first, each at most once; call
        again after a crash (or a failed compensation) to finish the job."""
        self._existing(thread_id)
        return lifecycle.cancel(self, thread_id, compensate=compensate, reason=reason, by=by)

    def sweep(
        self,
        now: datetime | None = None,
        *,
        continue_runs: bool = True,
        thread_ids: Sequence[str] | None = None,
    ) -> SweepReport:
        """Apply deadlines to every pending decision (of ``thread_ids`` only, if given):
        record a reminder once at ``remind_at``; at ``expire_at`` apply the default
        (reject, or suspend the run)."""
        return deciding.sweep(self, now, continue_runs=continue_runs, thread_ids=thread_ids)

    # -- reading ----------------------------------------------------------

    def _config(self, thread_id: str) -> RunnableConfig:
        return views.config(thread_id)

    def state(self, thread_id: str) -> RunState:
        """The run's current typed state (the latest checkpoint). A run with pending
        questions reads as ``waiting_for_human`` (``suspended`` once a deadline suspended
        it): the interrupt is the state's truth, whatever the status channel last held."""
        self._existing(thread_id)
        return reading.state(self, thread_id)

    def get(self, thread_id: str) -> RunView:
        """The run as it is now (onward.observe.reading: without LangGraph's state where
        that read is exact)."""
        self._existing(thread_id)
        return reading.get(self, thread_id)

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        self._existing()
        return self.store.list_runs(limit)

    # -- looking back -----------------------------------------------------

    def timeline(
        self, thread_id: str, *, step: str | None = None, kinds: Sequence[str] = ()
    ) -> Timeline:
        """The run's event log, in order (filtered by step and/or event kinds): a list of
        :class:`~onward.observe.timeline.TimelineEvent` that Jupyter shows as a table."""
        self._existing(thread_id)
        return history.events(self, thread_id, step, kinds)

    def summary(self, thread_id: str) -> Summary:
        """Totals computed from the event log: time busy and waiting, retries, failures by
        class, human interventions, tokens and cost (by step and tool)."""
        self._existing(thread_id)
        return history.summary(self, thread_id)

    def history(self, thread_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """LangGraph's checkpoints of the run, newest first: id, node, step, status, time."""
        self._existing(thread_id)
        return history.checkpoints(self, thread_id, limit)

    def state_at(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> tuple[RunState, list[str]]:
        """The run's state at a checkpoint (the latest without one), and what runs next."""
        self._existing(thread_id)
        return history.state_at(self, thread_id, checkpoint_id)

    def fork(
        self,
        thread_id: str,
        checkpoint_id: str,
        edits: dict[str, Any] | None = None,
        *,
        new_thread_id: str | None = None,
    ) -> str:
        """A new run that continues from a past state of this one, with step args changed
        (``{"step.arg": value}``). The original run and its history stay as they are.
        Effects of the fork are its own (the ledger keys by thread)."""
        self._existing(thread_id)
        return lifecycle.fork(self, thread_id, checkpoint_id, edits, new_thread_id=new_thread_id)

    def prune(
        self, older_than: timedelta, *, keep_last: int = 0, dry_run: bool = False
    ) -> PruneReport:
        """Remove finished runs last updated more than ``older_than`` ago, except the
        ``keep_last`` newest: their checkpoints, events, ledger rows, queue and lease rows,
        and the artifact bodies no remaining run references. A run is only removed when its
        checkpoint says it finished, no question is pending and no live lease holds it;
        then the database is vacuumed."""
        return lifecycle.prune(self, older_than, keep_last=keep_last, dry_run=dry_run)

    def diagram(self, *, flow: bool = False) -> Diagram:
        """The graph as Mermaid: Jupyter (JupyterLab 4.1+) draws it inline, offline;
        ``str()`` of it is the Mermaid text (what ``onward graph`` prints). ``flow=True``:
        how a step flows, the scheduler drawn as one node (``onward graph --flow``, the
        README's view) instead of every edge of the compiled graph."""
        if flow:
            from onward.graph.build import flow_mermaid

            return Diagram(flow_mermaid())
        return Diagram(self.graph.get_graph().draw_mermaid())

    def report_html(self, thread_id: str) -> str:
        """The run as one self-contained HTML page."""
        self._existing(thread_id)
        return history.report_html(self, thread_id)

    def stalled_threads(self) -> set[str]:
        """Unfinished runs whose driver's heartbeat is stale."""
        self._existing()
        return views.stalled_threads(self.store)


def _store_url(db: str | os.PathLike[str]) -> str:
    """``db`` as the store's URL or file path: a ``pathlib.Path`` reads as its path."""
    url = os.fspath(db) if isinstance(db, os.PathLike) else db
    if not isinstance(url, str):
        raise UsageError(
            f"db must be a database URL or a file path (str or pathlib.Path), not "
            f"{type(db).__name__}: e.g. Onward('onward.db') or Onward('postgresql://...')"
        )
    return url
