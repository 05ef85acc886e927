"""The Python API: open a store, start runs, stream progress, read state, resume by thread id.

>>> from onward import Onward
>>> with Onward("sqlite:///.onward/onward.db") as ow:          # doctest: +SKIP
...     view = ow.run("copy every file in inbox/ to archive/")
...     print(view.thread_id, view.status)
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphRecursionError
from langgraph.types import Command, StateSnapshot, StreamMode
from pydantic import BaseModel, ConfigDict

from onward import refs, tokens
from onward.approvals import (
    AnswerType,
    edited_budget,
    edited_plan,
    edited_step,
    parse_answer,
)
from onward.checkpointing.events import AuditKind
from onward.checkpointing.leases import Heartbeat, new_owner
from onward.checkpointing.store import RunRow, Store
from onward.checks import Check
from onward.compensation import Compensation, CompensationStatus, compensate_run
from onward.confine import check_inputs
from onward.errors import (
    ArtifactError,
    DrainRequested,
    InconsistentRunError,
    LeaseLostError,
    LoopGuardError,
    NoTemplateError,
    OnwardError,
    PlanProblem,
    PlanValidationError,
    RunBusyError,
    UnknownThreadError,
    UsageError,
)
from onward.graph.build import compile_graph
from onward.graph.routing import APPROVE, ESCALATE, FINALIZE, GATE
from onward.inbox import PendingDecision
from onward.llm.models import check_model, model_from_env
from onward.nodes.deps import NodeDeps
from onward.planning.templates import plan_from_template
from onward.planning.validate import parse_declared, step_problems
from onward.policy import ExpiryAction, RunPolicy
from onward.progress import ProgressEvent
from onward.report import render_html
from onward.retry import DEFAULT_RETRY
from onward.state import (
    ArtifactRef,
    Budget,
    Decision,
    DecisionAction,
    Goal,
    Plan,
    PlanStep,
    RunFailure,
    RunFailureKind,
    RunState,
    RunStatus,
    SideEffect,
    StepFailure,
    StepRecord,
    StepStatus,
    Usage,
    Waiting,
    WaitKind,
    migrate,
    transition,
    utcnow,
)
from onward.timeline import Summary, TimelineEvent, summarise, timeline
from onward.tools.registry import (
    Registry,
    default_registry,
    load_tool_modules,
    normalize_tool_refs,
    tool_modules_from_env,
)

RECURSION_LIMIT = 1_000_000  # reads and edits; a drive gets a limit derived from its plan
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

    @property
    def finished(self) -> bool:
        return self.status.finished

    def artifact_value(self, ow: Onward, name: str) -> Any:
        return ow.store.artifacts.get(self.artifacts[name])


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelReport:
    """What ``cancel`` did."""

    view: RunView
    compensations: list[Compensation] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every completed effect was undone (none failed, none of unknown outcome)."""
        bad = (CompensationStatus.FAILED, CompensationStatus.UNKNOWN)
        return all(c.status not in bad for c in self.compensations)


@dataclass(kw_only=True, slots=True)
class SweepReport:
    """What ``sweep`` did at ``now``."""

    now: datetime
    reminded: list[PendingDecision] = field(default_factory=list)
    rejected: list[PendingDecision] = field(default_factory=list)
    suspended: list[PendingDecision] = field(default_factory=list)
    errors: list[tuple[PendingDecision, str]] = field(default_factory=list)
    """Defaults that could not be applied now (e.g. the run is busy); the next sweep retries."""


class PruneReport(BaseModel):
    """What ``prune`` removed (or, with ``dry_run``, would remove)."""

    cutoff: datetime
    dry_run: bool
    removed: list[str] = []
    """Thread ids of the finished runs removed."""
    kept: int = 0
    """Finished runs kept (newer than the cutoff, or among the ``keep_last`` newest)."""
    skipped: int = 0
    """Runs left alone because they are not finished (waiting, resumable, being driven)."""
    rows: int = 0
    """Database rows deleted from onward's tables (checkpoints not counted)."""
    artifact_bytes: int = 0
    """Bytes of artifact bodies deleted (only bodies no kept run references)."""
    db_bytes_before: int = 0
    db_bytes_after: int = 0


def load_plan_file(
    path: str | Path, registry: Registry | None = None, allow_tools: frozenset[str] | None = None
) -> tuple[Goal, Plan, int | None]:
    """Read and validate a declared plan (YAML or JSON; JSON is YAML)."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"plan file {path} not found; check the --plan path")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise PlanValidationError(
            [PlanProblem("(file)", f"not UTF-8 text ({exc}); save the plan as UTF-8")],
            source=str(path),
        ) from None
    except yaml.YAMLError as exc:
        raise PlanValidationError(
            [PlanProblem("(file)", f"not valid YAML/JSON: {exc}")], source=str(path)
        ) from None
    return parse_declared(
        data, registry or default_registry, source=str(path), allow_tools=allow_tools
    )


class Onward:
    """One open store plus the compiled graph. Not thread-safe; one per thread or process."""

    def __init__(
        self,
        db: str | None = None,
        *,
        registry: Registry | None = None,
        tool_modules: Sequence[str] = (),
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        model: BaseChatModel | Literal["env"] | None = "env",
        max_wait: float | None = None,
    ) -> None:
        """``model``: the chat model for goals outside the templates, replanning and
        judging; by default from the environment (OPENAI_API_KEY...), None for none.
        ``max_wait``: longest in-process wait for a retry or breaker before the run is
        suspended instead ($ONWARD_MAX_WAIT, 60 s; workers use 0 and requeue)."""
        self.tool_modules = normalize_tool_refs([*tool_modules_from_env(), *tool_modules])
        load_tool_modules(self.tool_modules)
        self.registry = registry or default_registry
        self.store = Store(db)
        self.clock, self.sleep = clock, sleep
        self.store.breakers.clock = clock
        self.deps = NodeDeps(
            registry=self.registry,
            artifacts=self.store.artifacts,
            ledger=self.store.ledger,
            events=self.store.events,
            held=self.store.held,
            clock=clock,
            breakers=self.store.breakers,
            sleep=sleep,
            rng=rng or random.Random(),
            max_wait=max_wait
            if max_wait is not None
            else float(os.environ.get("ONWARD_MAX_WAIT") or 60.0),
            model=check_model(model_from_env() if model == "env" else model),
        )
        self.graph = compile_graph(self.deps, checkpointer=self.store.saver)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Onward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- starting ---------------------------------------------------------

    def start(
        self,
        goal: str | None = None,
        *,
        plan: Plan | str | Path | None = None,
        inputs: Sequence[str] = (),
        workdir: str | Path | None = None,
        max_concurrency: int | None = None,
        thread_id: str | None = None,
        policy: RunPolicy | None = None,
        budget: Budget | None = None,
        judge: bool = False,
        acceptance: Sequence[Check] = (),
        constraints: Mapping[str, str] | None = None,
    ) -> str:
        """Create a run (nothing executes yet) and return its thread id.

        ``plan`` is a :class:`Plan` or a path to a declared plan file; without
        one, the goal is planned by the template rules when the run starts.
        ``policy``: which tools need approval or may run at all, and wait deadlines.
        ``acceptance`` and ``constraints``: the goal's own checks and constraints (a plan
        file carries its own; these add to them).
        """
        policy = policy or RunPolicy()
        # ``judge``: a model reviews every step's output (when a model is configured).
        if goal is None and plan is None:
            raise UsageError("give a goal, or a declared plan (--plan FILE)")
        wd = Path(workdir or Path.cwd()).absolute()
        if not wd.is_dir():
            raise UsageError(f"work directory {wd} does not exist")
        goal_obj = Goal(objective=goal or "", inputs=list(inputs))
        plan_obj = Plan()
        concurrency = max_concurrency
        if isinstance(plan, (str, Path)):
            declared_goal, plan_obj, file_concurrency = load_plan_file(
                plan, self.registry, policy.allow_tools
            )
            goal_obj = declared_goal.model_copy(
                update={
                    "objective": goal or declared_goal.objective,
                    "inputs": [*declared_goal.inputs, *inputs],
                }
            )
            concurrency = max_concurrency or file_concurrency
        elif isinstance(plan, Plan):
            plan_obj = plan
            goal_obj = goal_obj.model_copy(update={"objective": goal or "run plan"})
        if acceptance or constraints:
            goal_obj = goal_obj.model_copy(
                update={
                    "acceptance": [*goal_obj.acceptance, *acceptance],
                    "constraints": {**goal_obj.constraints, **(constraints or {})},
                }
            )
        if judge:
            if self.deps.model is None:
                raise UsageError(
                    "--judge needs a model: set OPENAI_API_KEY (and OPENAI_BASE_URL, "
                    "ONWARD_MODEL), or pass Onward(model=...)"
                )
            goal_obj = goal_obj.model_copy(update={"judge": True})
        check_inputs(wd, inputs, confined=policy.confine_paths)
        if not plan_obj.steps:
            # Fail fast, before a run exists: the rules are cheap and deterministic. The plan
            # node plans again inside the graph, durably (with the model when no template fits).
            try:
                plan_from_template(
                    goal_obj.objective,
                    wd,
                    list(goal_obj.inputs),
                    confined=policy.confine_paths,
                )
            except NoTemplateError:
                if self.deps.model is None:
                    raise
        thread_id = thread_id or str(uuid.uuid4())
        if self.store.get_run(thread_id) is not None:
            raise UsageError(f"thread id {thread_id} is already used; resume it instead")
        state = RunState(
            workdir=str(wd),
            goal=goal_obj,
            plan=plan_obj,
            tool_modules=self.tool_modules,
            max_concurrency=concurrency or 4,
            messages=[HumanMessage(goal_obj.objective)],
            policy=policy,
            budget=budget or Budget(),
            started_at=self.clock(),
        )
        self.store.add_run(thread_id, goal_obj.objective, {"input": state.model_dump(mode="json")})
        self.store.events.record(
            thread_id,
            "run_started",
            {"objective": goal_obj.objective, "plan_steps": len(plan_obj.steps)},
        )
        return thread_id

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
    ) -> Iterator[ProgressEvent]:
        """Drive a run until it stops, yielding progress events. Resumes where it stopped.

        Holds the run's lease while driving: a run another live process drives raises
        :class:`RunBusyError`; ``takeover=True`` waits for that lease to expire instead.
        A cancel requested by another process (``onward cancel``) stops the drive at the
        next superstep. A run suspended until a time (backoff, open breaker) is waited for
        first; ``wait=False`` returns at once instead (the view says when).
        """
        for _mode, chunk in self._stream(
            thread_id,
            ["custom"],
            takeover=takeover,
            command=command,
            stop_after_answer=stop_after_answer,
            wait=wait,
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
    ) -> Iterator[tuple[str, Any]]:
        """:meth:`stream` with LangGraph's stream modes (``values``, ``updates``,
        ``messages``, ``custom``, ``debug``...): yields ``(mode, chunk)`` as the graph
        emits them (the server streams these). ``checkpoint_id`` resumes from a past
        checkpoint of the thread (time travel: a new branch of the same thread)."""
        yield from self._stream(
            thread_id,
            modes,
            takeover=takeover,
            command=command,
            stop_after_answer=stop_after_answer,
            wait=wait,
            checkpoint_id=checkpoint_id,
        )

    def _stream(
        self,
        thread_id: str,
        modes: Sequence[StreamMode],
        *,
        takeover: bool = False,
        command: Command[Any] | None = None,
        stop_after_answer: bool = False,
        wait: bool = True,
        checkpoint_id: str | None = None,
        final: list[StateSnapshot | RunState] | None = None,
    ) -> Iterator[tuple[str, Any]]:
        """:meth:`stream_modes`; a drive that ends normally appends the state it ended in
        to ``final``, so the caller's view needs no second load: the graph's last values
        when the run finished, else the saved snapshot (it holds the pending questions)."""
        row = self._row(thread_id)
        owner = new_owner()
        self._acquire(thread_id, owner, takeover)
        try:
            with Heartbeat(self.store.leases, thread_id, owner) as beat:
                config = self._config(thread_id)
                if checkpoint_id:
                    config["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
                run_input: Any = command
                snapshot = self.graph.get_state(config)
                # One load per drive: the state is read from this snapshot below (a load
                # walks the delta channels' history, so it is the costly part of a resume).
                state = self._state_of(thread_id, row, snapshot)
                load_tool_modules(state.tool_modules)
                if not snapshot.values:
                    # Killed before the first checkpoint: start from the stored request.
                    run_input = state
                else:
                    self._check_consistency(thread_id, state)
                    if snapshot.next:
                        self.store.events.record(
                            thread_id, "run_resumed", {"by": owner, "answer": command is not None}
                        )
                if self._apply_requested_cancel(thread_id):
                    return
                if state.status is RunStatus.SUSPENDED and state.resume_at is not None:
                    remaining = (state.resume_at - self.clock()).total_seconds()
                    if remaining > 0 and not wait:
                        return
                    if remaining > 0:
                        self.sleep(remaining)
                    self.graph.update_state(
                        config, {"status": RunStatus.RUNNING, "resume_at": None}, as_node=GATE
                    )
                self.store.set_run_status(thread_id, RunStatus.RUNNING)
                limit = superstep_limit(state, self.registry)
                # LangGraph's task pool defaults to cpu_count + 4 threads: size it to the
                # run's concurrency (plus routing), or 10 parallel steps on 2 cores run in
                # two waves.
                limited: RunnableConfig = {
                    **config,
                    "recursion_limit": limit,
                    "max_concurrency": max(state.max_concurrency + 2, 8),
                }
                checked = time.monotonic()
                # The last values are the end state: a finished run's view is built from
                # them instead of loading the thread again (a load walks its history).
                wanted = list(modes) if "values" in modes else [*modes, "values"]
                last: Any = None
                try:
                    for mode, chunk in self.graph.stream(
                        run_input,
                        limited,
                        stream_mode=wanted,
                        durability="sync",
                        interrupt_after=[APPROVE, ESCALATE] if stop_after_answer else None,
                    ):
                        if beat.lost.is_set():
                            raise LeaseLostError(thread_id)
                        if mode == "values":
                            last = chunk
                            if "values" not in modes:
                                continue
                        yield mode, chunk
                        if time.monotonic() - checked > 0.2:
                            checked = time.monotonic()
                            if self._apply_requested_cancel(thread_id):
                                return  # what finished is saved; the rest will not run
                except DrainRequested:
                    # The process is stopping: the last superstep is saved, nothing of the
                    # next one ran. Another driver resumes from here.
                    self.store.events.record(thread_id, "drained", {"by": owner})
                    return
                except GraphRecursionError:
                    self.store.events.record(thread_id, "loop_guard", {"limit": limit})
                    raise LoopGuardError(
                        f"run {thread_id} took more than {limit} supersteps in one drive, more "
                        "than its plan can need: something loops. Its saved state is intact; "
                        "look at `onward status`, then resume or cancel it"
                    ) from None
                finished = _finished_state(last)
                if finished is not None:
                    self.store.set_run_status(thread_id, finished.status)
                else:
                    snap = self.graph.get_state(self._config(thread_id))
                    ended = self._state_of(thread_id, row, snap)
                    self.store.set_run_status(thread_id, ended.status)
                if final is not None:
                    final.append(finished if finished is not None else snap)
        finally:
            self.store.drop_held(thread_id)
            self.store.leases.release(thread_id, owner)

    def _apply_requested_cancel(self, thread_id: str) -> bool:
        """If another process asked to cancel this run, cancel it now (we hold the lease)."""
        requests = self.store.events.list(thread_id, [AuditKind.CANCEL_REQUESTED])
        if not requests:
            return False
        state = self.state(thread_id)
        if not state.status.finished:
            detail = requests[-1].detail
            self._mark_cancelled(
                thread_id, state, detail.get("by") or "unknown", detail.get("reason") or ""
            )
        return True

    def _mark_cancelled(self, thread_id: str, state: RunState, by: str, reason: str) -> None:
        why = f"cancelled by {by}" + (f": {reason}" if reason else "")
        self.graph.update_state(
            self._config(thread_id),
            {
                "status": RunStatus.CANCELLED,
                "failure": RunFailure(kind=RunFailureKind.CANCELLED, message=why),
                "waiting": {k: None for k in state.waiting},
                "decisions": [
                    Decision(
                        step_id="(run)",
                        action=DecisionAction.CANCEL,
                        by=by,
                        at=utcnow(),
                        reason=reason,
                    )
                ],
                "messages": [AIMessage(f"Run {why}.")],
            },
            as_node=FINALIZE,
        )
        self.store.events.record(thread_id, AuditKind.CANCELLED, {"by": by, "reason": why})
        self.store.set_run_status(thread_id, RunStatus.CANCELLED)

    # -- deciding ---------------------------------------------------------

    def pending(self, thread_id: str) -> list[PendingDecision]:
        """The questions one run waits on, oldest first."""
        row = self._row(thread_id)
        return self._pending_of(thread_id, row, self.graph.get_state(self._config(thread_id)))

    def _pending_of(
        self, thread_id: str, row: RunRow, snap: StateSnapshot
    ) -> list[PendingDecision]:
        found = [
            PendingDecision.from_interrupt(thread_id, i.id, i.value, row.objective)
            for i in snap.interrupts
        ]
        return sorted((p for p in found if p is not None), key=lambda p: p.asked_at)

    def inbox(self, *, user: str | None = None) -> list[PendingDecision]:
        """Every pending decision across all runs of the store, oldest first. With
        ``ONWARD_SECRET`` set, each carries a resume token minted for ``user``."""
        key = tokens.secret()
        user = user or whoami()
        items: list[PendingDecision] = []
        for row in self.store.unfinished_runs():
            items += self.pending(row.thread_id)
        if key:
            expires = self.clock() + tokens.ttl()
            items = [
                p.model_copy(
                    update={"token": tokens.mint(key, p.thread_id, p.interrupt_id, user, expires)}
                )
                for p in items
            ]
        return sorted(items, key=lambda p: p.asked_at)

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
        """Answer one pending question of a run, in any of the accepted shapes (see
        :mod:`onward.approvals`). Which one: ``interrupt_id``, or ``step``, or the only
        one. The answer is checked before anything changes; then the run continues in
        this process, or with ``continue_run=False`` stops right after recording it."""
        return self._decide(
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

    def _decide(
        self,
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
        target = self._pick(thread_id, step, interrupt_id)
        by = by or whoami()
        key = tokens.secret()
        if key and check_token:
            tokens.verify(
                key,
                token,
                thread_id=thread_id,
                interrupt_id=target.interrupt_id,
                user=by,
                now=self.clock(),
            )
        decisions = answer if isinstance(answer, list) else answer.get("decisions", [answer])
        value = {"decisions": decisions, "by": by, "interrupt_id": target.interrupt_id}
        self._preflight(thread_id, target, value)
        command: Command[Any] = Command(resume={target.interrupt_id: value})
        return self.drive(
            thread_id,
            on_event,
            command=command,
            stop_after_answer=not continue_run,
            wake=True,  # a queued run: a worker drives it on
        )

    def _pick(self, thread_id: str, step: str | None, interrupt_id: str | None) -> PendingDecision:
        pending = self.pending(thread_id)
        listing = ", ".join(
            f"{p.step_id or 'plan'} ({p.kind.value}, id {p.interrupt_id})" for p in pending
        )
        if interrupt_id is not None:
            chosen = [p for p in pending if p.interrupt_id == interrupt_id]
        elif step is not None:
            chosen = [
                p for p in pending if p.step_id == step or (step == "plan" and p.step_id is None)
            ]
        else:
            chosen = pending
        if not pending:
            status = self.state(thread_id).status.value
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

    def _preflight(self, thread_id: str, target: PendingDecision, value: dict[str, Any]) -> None:
        """Refuse an answer the node would refuse, before resuming: same checks, clear error."""
        answer = parse_answer(value, target.kind)
        if answer.type is not AnswerType.EDIT:
            return
        state = self.state(thread_id)
        allow = state.policy.allow_tools
        if target.kind is WaitKind.BUDGET:
            edited_budget(state.budget, answer)
        elif target.kind is WaitKind.PLAN:
            edited_plan(state.plan, answer, self.registry, allow, state.steps)
        else:
            assert target.step_id is not None
            edited_step(state.plan.step(target.step_id), answer, self.registry, allow)

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
        if edit is None and args is None:
            return self.decide(thread_id, {"type": "approve", "message": reason}, step=step, **how)
        target = self._pick(thread_id, step, how.get("interrupt_id"))
        new_args = dict(args) if args is not None else {**target.args, **(edit or {})}
        answer = {
            "type": "edit",
            "edited_action": {"name": target.tool, "args": new_args},
            "message": reason,
        }
        return self.decide(thread_id, answer, step=step, **how)

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
        action = DecisionAction(action)
        if action not in (DecisionAction.DONE, DecisionAction.RETRY, DecisionAction.SKIP):
            raise UsageError("resolve settles an effect as done, retry or skip")
        answer: dict[str, Any] = {"type": action.value, "message": reason}
        if action is DecisionAction.DONE:
            answer["result"] = result
        return self.decide(
            thread_id, answer, step=step_id, by=by, token=token, continue_run=continue_run
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
        state = self.state(thread_id)
        if state.status.finished and state.status is not RunStatus.CANCELLED:
            raise UsageError(
                f"run {thread_id} already finished ({state.status.value}); there is nothing "
                "to cancel"
            )
        by = by or whoami()
        owner = new_owner()
        if state.status is not RunStatus.CANCELLED:
            self.store.events.record(
                thread_id, AuditKind.CANCEL_REQUESTED, {"by": by, "reason": reason}
            )
        self._acquire(thread_id, owner, takeover=True)
        try:
            state = self.state(thread_id)
            if state.status.finished and state.status is not RunStatus.CANCELLED:
                # It finished while we waited for the driver: nothing to cancel or undo.
                raise UsageError(
                    f"run {thread_id} finished ({state.status.value}) before the cancel took "
                    "effect; nothing was cancelled or compensated"
                )
            if not state.status.finished:
                self._mark_cancelled(thread_id, state, by, reason)
            done: list[Compensation] = []
            if compensate:
                load_tool_modules(state.tool_modules)
                done = compensate_run(
                    thread_id, self.store.ledger, self.registry, self.store.events
                )
        finally:
            self.store.leases.release(thread_id, owner)
        return CancelReport(view=self.get(thread_id), compensations=done)

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
        now = now or self.clock()
        report = SweepReport(now=now)
        items = (
            self.inbox()
            if thread_ids is None
            else [p for tid in thread_ids for p in self.pending(tid)]
        )
        for item in items:
            seen = {
                (e.kind, e.detail.get("interrupt_id"))
                for e in self.store.events.list(item.thread_id)
            }
            detail = {
                "interrupt_id": item.interrupt_id,
                "step_id": item.step_id,
                "kind": item.kind.value,
                "asked_at": item.asked_at.isoformat(),
            }
            if now >= item.remind_at and (AuditKind.REMINDER, item.interrupt_id) not in seen:
                self.store.events.record(item.thread_id, AuditKind.REMINDER, detail, at=now)
                report.reminded.append(item)
            if now < item.expire_at or (AuditKind.EXPIRED, item.interrupt_id) in seen:
                continue
            expired = detail | {"applied": item.on_expiry.value}
            if item.on_expiry is ExpiryAction.SUSPEND:
                self.store.set_run_status(item.thread_id, RunStatus.SUSPENDED)
                self.store.events.record(item.thread_id, AuditKind.SUSPENDED, detail, at=now)
                self.store.events.record(item.thread_id, AuditKind.EXPIRED, expired, at=now)
                report.suspended.append(item)
                continue
            answer = {
                "type": "skip" if item.kind is WaitKind.ESCALATION else "reject",
                "message": f"no answer by {item.expire_at.isoformat()} (deadline default)",
            }
            try:
                self._decide(
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
            self.store.events.record(item.thread_id, AuditKind.EXPIRED, expired, at=now)
            report.rejected.append(item)
        return report

    def _check_consistency(self, thread_id: str, state: RunState) -> None:
        """Before driving on: every artifact a remaining step reads must still be intact.
        A pure producer is re-opened (recorded as a decision); otherwise the run stops."""
        if not state.plan.steps or state.status.finished:
            return
        producers: dict[str, PlanStep] | None = None
        reopen: dict[str, StepRecord] = {}
        decisions: list[Decision] = []
        for step in state.open_steps():
            for name in refs.names(step.args):
                ref = state.artifacts.get(name)
                if ref is None:
                    continue
                try:
                    self.store.artifacts.get(ref)
                    continue
                except ArtifactError as exc:
                    problem = str(exc)
                if producers is None:  # only when an artifact is damaged: read every step
                    producers = {s.output: s for s in state.plan.steps if s.output}
                if name not in producers:
                    continue
                producer = producers[name]
                spec = self.registry.get(producer.tool)
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
            self.graph.update_state(
                self._config(thread_id), {"steps": reopen, "decisions": decisions}, as_node="gate"
            )

    def _acquire(self, thread_id: str, owner: str, takeover: bool) -> None:
        while True:
            try:
                self.store.leases.acquire(thread_id, owner)
                return
            except RunBusyError as busy:
                if not takeover:
                    raise
                wait = (busy.expires_at - self.store.leases.clock()).total_seconds()
                # Poll: a live driver asked to stop (cancel) releases long before expiry.
                time.sleep(min(max(wait, 0.0) + 0.05, 0.5))

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
    ) -> RunView:
        """:meth:`stream` to the end, passing each event to ``on_event``; returns the view
        of where the run stopped. ``wake``: put a queued run back in line for workers."""
        final: list[StateSnapshot | RunState] = []
        # Progress is streamed only to a listener: with the custom stream mode on, LangGraph
        # runs even a lone task on a pool thread so it can stream while the task runs. The
        # event log records the same events either way.
        for mode, chunk in self._stream(
            thread_id,
            ["custom"] if on_event is not None else ["values"],
            takeover=takeover,
            command=command,
            stop_after_answer=stop_after_answer,
            wait=wait,
            final=final,
        ):
            if on_event is not None and mode == "custom":
                on_event(ProgressEvent.model_validate(chunk))
        if wake:
            self.store.wake(thread_id)
        if not final:  # cancelled, or not due yet: read what is there now
            return self.get(thread_id)
        return self._view(thread_id, self._row(thread_id), final[0])

    def run(
        self,
        goal: str | None = None,
        *,
        on_event: Callable[[ProgressEvent], None] | None = None,
        **start: Any,
    ) -> RunView:
        """Start a run and drive it to its end (or until it waits for a human)."""
        return self.drive(self.start(goal, **start), on_event)

    def resume(
        self,
        thread_id: str,
        on_event: Callable[[ProgressEvent], None] | None = None,
        *,
        takeover: bool = False,
    ) -> RunView:
        """Finish a run that stopped (crash, kill, interrupt). A finished run is returned as is.
        ``takeover=True`` waits for a dead driver's lease to expire, then takes the run over."""
        return self.drive(thread_id, on_event, takeover=takeover)

    # -- reading ----------------------------------------------------------

    def _config(self, thread_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": RECURSION_LIMIT}

    def _row(self, thread_id: str) -> RunRow:
        row = self.store.get_run(thread_id)
        if row is None:
            raise UnknownThreadError(thread_id, self.store.url)
        return row

    def state(self, thread_id: str) -> RunState:
        """The run's current typed state (the latest checkpoint). A run with pending
        questions reads as ``waiting_for_human`` (``suspended`` once a deadline suspended
        it): the interrupt is the state's truth, whatever the status channel last held."""
        row = self._row(thread_id)
        return self._state_of(thread_id, row, self.graph.get_state(self._config(thread_id)))

    def _state_of(self, thread_id: str, row: RunRow, snap: StateSnapshot) -> RunState:
        values = snap.values
        if not values:
            return RunState.model_validate(
                migrate(dict(self.store.run_request(thread_id)["input"]))
            )
        state = (
            values
            if isinstance(values, RunState)
            else RunState.model_validate(migrate(dict(values)))
        )
        if snap.interrupts and not state.status.finished:
            asked = {i.id for i in snap.interrupts}
            budget_stop = any(
                isinstance(i.value, dict) and i.value.get("onward", {}).get("kind") == "budget"
                for i in snap.interrupts
            )
            suspended = budget_stop or any(
                e.detail.get("interrupt_id") in asked
                for e in self.store.events.list(thread_id, [AuditKind.SUSPENDED])
            )
            status = RunStatus.SUSPENDED if suspended else RunStatus.WAITING_FOR_HUMAN
            state = state.model_copy(update={"status": status})
        return state

    def get(self, thread_id: str) -> RunView:
        row = self._row(thread_id)
        return self._view(thread_id, row, self.graph.get_state(self._config(thread_id)))

    def _view(self, thread_id: str, row: RunRow, snap: StateSnapshot | RunState) -> RunView:
        """The view of a snapshot, or of a finished run's final state (no questions)."""
        state = snap if isinstance(snap, RunState) else self._state_of(thread_id, row, snap)
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
        lease = self.store.leases.get(thread_id)
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
            pending=self._pending_of(thread_id, row, snap)
            if state.status.waiting and not isinstance(snap, RunState)
            else [],
            decisions=list(state.decisions),
            driver=lease.owner if lease else None,
            heartbeat_at=lease.heartbeat_at if lease else None,
            stalled=lease is not None
            and not state.status.finished
            and self.store.leases.policy.stale(lease.heartbeat_at, self.store.leases.clock()),
        )

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        return self.store.list_runs(limit)

    # -- looking back -----------------------------------------------------

    def timeline(
        self, thread_id: str, *, step: str | None = None, kinds: Sequence[str] = ()
    ) -> list[TimelineEvent]:
        """The run's event log, in order (filtered by step and/or event kinds)."""
        self._row(thread_id)
        return timeline(self.store.events.list(thread_id), step=step, kinds=set(kinds) or None)

    def summary(self, thread_id: str) -> Summary:
        """Totals computed from the event log: time busy and waiting, retries, failures by
        class, human interventions, tokens and cost (by step and tool)."""
        self._row(thread_id)
        return summarise(
            thread_id, self.state(thread_id), self.store.events.list(thread_id), utcnow()
        )

    def history(self, thread_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """LangGraph's checkpoints of the run, newest first: id, node, step, status, time."""
        self._row(thread_id)
        snaps = list(self.graph.get_state_history(self._config(thread_id), limit=limit))
        out = []
        for i, snap in enumerate(snaps):
            meta = snap.metadata or {}
            older = snaps[i + 1] if i + 1 < len(snaps) else None
            # The node(s) whose writes made this checkpoint ran as the older one's "next";
            # an edit (update_state: a decision, a cancel) made it itself.
            source = str(meta.get("source", ""))
            node = source if source == "update" or older is None else ",".join(older.next)
            values = snap.values
            status = values.status if isinstance(values, RunState) else (values or {}).get("status")
            out.append(
                {
                    "checkpoint_id": snap.config["configurable"]["checkpoint_id"],
                    "step": meta.get("step"),
                    "node": node or str(meta.get("source", "")),
                    "next": list(snap.next),
                    "status": str(status.value if isinstance(status, RunStatus) else status or ""),
                    "created_at": snap.created_at,
                }
            )
        return out

    def state_at(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> tuple[RunState, list[str]]:
        """The run's state at a checkpoint (the latest without one), and what runs next."""
        self._row(thread_id)
        config = self._config(thread_id)
        if checkpoint_id:
            config = {
                **config,
                "configurable": {**config["configurable"], "checkpoint_id": checkpoint_id},
            }
        snap = self.graph.get_state(config)
        if checkpoint_id and snap.created_at is None:
            raise UsageError(
                f"run {thread_id} has no checkpoint {checkpoint_id}; list them with "
                f"`onward history {thread_id}`"
            )
        values = snap.values
        state = (
            values
            if isinstance(values, RunState)
            else RunState.model_validate(migrate(dict(values or {})))
        )
        return state, list(snap.next)

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
        state, _ = self.state_at(thread_id, checkpoint_id)
        if state.goal is None:
            raise UsageError(
                f"checkpoint {checkpoint_id} holds no run state yet (it is the run's input); "
                "fork from a later one"
            )
        in_flight = [s for s, r in state.steps.items() if r.status is StepStatus.RUNNING]
        if state.waiting or in_flight:
            raise UsageError(
                f"at checkpoint {checkpoint_id} an effect is in flight or its outcome unknown "
                f"({', '.join(sorted({*state.waiting, *in_flight}))}); its ledger entry belongs "
                "to the original run, so fork from a checkpoint before or after it"
            )
        load_tool_modules(state.tool_modules)
        plan = state.plan
        for path, value in (edits or {}).items():
            step_id, _, arg = path.partition(".")
            if not arg:
                raise UsageError(f"--edit {path!r}: write STEP.ARG=VALUE")
            try:
                step = plan.step(step_id)
            except KeyError:
                raise UsageError(
                    f"--edit {path!r}: no step {step_id!r} in the plan at that checkpoint"
                ) from None
            if (status := state.status_of(step_id)) in (StepStatus.DONE, StepStatus.PRODUCED):
                raise UsageError(
                    f"step {step_id!r} is already {status.value} at checkpoint {checkpoint_id}; "
                    "fork from an earlier checkpoint to change it"
                )
            changed = step.model_copy(update={"args": {**step.args, arg: value}})
            problems = step_problems(
                changed, f"step {step_id}", self.registry, state.policy.allow_tools
            )
            if problems:
                raise UsageError("; ".join(map(str, problems)))
            plan = plan.with_step(changed)
        new_id = new_thread_id or str(uuid.uuid4())
        if self.store.get_run(new_id) is not None:
            raise UsageError(f"thread id {new_id} is already used")
        forked = state.model_copy(
            update={
                "plan": plan,
                "status": RunStatus.RUNNING if not state.status.finished else state.status,
                "approvals": {},  # approvals bind to the original run's args
                "resume_at": None,
            }
        )
        if forked.status.finished:
            raise UsageError(
                f"checkpoint {checkpoint_id} is the end of the run ({state.status.value}); fork "
                "from an earlier one"
            )
        objective = f"{state.goal.objective if state.goal else ''} (fork of {thread_id})"
        self.store.add_run(new_id, objective, {"input": forked.model_dump(mode="json")})
        for ref in forked.artifacts.values():  # the fork reads them too: retention keeps them
            self.store.use_artifact(ref.sha256, new_id)
        values = {k: getattr(forked, k) for k in type(forked).model_fields}
        self.graph.update_state(self._config(new_id), values, as_node=GATE)
        self.store.events.record(
            new_id,
            "run_started",
            {"forked_from": thread_id, "checkpoint_id": checkpoint_id, "edits": edits or {}},
        )
        self.store.events.record(
            thread_id, "forked", {"to": new_id, "checkpoint_id": checkpoint_id}
        )
        return new_id

    def prune(
        self, older_than: timedelta, *, keep_last: int = 0, dry_run: bool = False
    ) -> PruneReport:
        """Remove finished runs last updated more than ``older_than`` ago, except the
        ``keep_last`` newest: their checkpoints, events, ledger rows, queue and lease rows,
        and the artifact bodies no remaining run references. A run is only removed when its
        checkpoint says it finished, no question is pending and no live lease holds it;
        then the database is vacuumed."""
        cutoff = self.clock() - older_than
        report = PruneReport(cutoff=cutoff, dry_run=dry_run, db_bytes_before=self.store.size())
        finished = self.store.finished_runs()  # newest first
        report.skipped = len(self.store.unfinished_runs())
        leases = self.store.leases.all()
        now = self.store.leases.clock()
        candidates: set[str] = set()
        for i, row in enumerate(finished):
            if i < keep_last or row.updated_at >= cutoff:
                report.kept += 1
                continue
            lease = leases.get(row.thread_id)
            state = self.state(row.thread_id)
            if (
                not state.status.finished
                or self.pending(row.thread_id)
                or (lease is not None and lease.expires_at > now)
            ):
                report.skipped += 1  # the runs table lags the checkpoint: trust the latter
                continue
            report.removed.append(row.thread_id)
            if not dry_run:
                rows, shas = self.store.delete_run(row.thread_id)
                report.rows += rows
                candidates |= shas
        if report.removed and not dry_run:
            report.artifact_bytes = self.store.delete_unused_bodies(candidates)
            self.store.vacuum()
        report.db_bytes_after = self.store.size()
        return report

    def report_html(self, thread_id: str) -> str:
        """The run as one self-contained HTML page."""
        events = self.timeline(thread_id)
        return render_html(thread_id, self.state(thread_id), events, self.summary(thread_id))

    def stalled_threads(self) -> set[str]:
        """Unfinished runs whose driver's heartbeat is stale."""
        leases = self.store.leases
        now = leases.clock()
        return {
            tid
            for tid, lease in leases.all().items()
            if leases.policy.stale(lease.heartbeat_at, now)
            and not ((row := self.store.get_run(tid)) and row.status.finished)
        }


def whoami() -> str:
    """Who is deciding: $ONWARD_USER, else login@host."""
    import getpass
    import os
    import socket

    if os.environ.get("ONWARD_USER"):
        return os.environ["ONWARD_USER"]
    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _finished_state(values: Any) -> RunState | None:
    """The graph's last ``values`` chunk as a state, if the run finished (a finished run
    has no pending questions, so these values are all its view needs)."""
    if isinstance(values, RunState):
        state = values
    elif isinstance(values, dict) and "__interrupt__" not in values:
        state = RunState.model_validate(values)
    else:
        return None
    return state if state.status.finished else None
