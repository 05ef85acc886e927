"""The Python API: open a store, start runs, stream progress, read state, resume by thread id.

>>> from onward import Onward
>>> with Onward("sqlite:///.onward/onward.db") as ow:          # doctest: +SKIP
...     view = ow.run("copy every file in inbox/ to archive/")
...     print(view.thread_id, view.status)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ConfigDict

from onward import refs
from onward.checkpointing.leases import Heartbeat, new_owner
from onward.checkpointing.store import RunRow, Store
from onward.errors import (
    ArtifactError,
    InconsistentRunError,
    LeaseLostError,
    PlanProblem,
    PlanValidationError,
    RunBusyError,
    UnknownThreadError,
    UsageError,
)
from onward.graph.build import compile_graph
from onward.nodes.deps import NodeDeps
from onward.nodes.verify import verify_step
from onward.planning.templates import plan_from_template
from onward.planning.validate import parse_declared
from onward.progress import ProgressEvent
from onward.state import (
    ArtifactRef,
    Decision,
    DecisionAction,
    ExecuteTask,
    Goal,
    Plan,
    RunFailure,
    RunState,
    RunStatus,
    SideEffect,
    StepRecord,
    StepStatus,
    Waiting,
    migrate,
    transition,
    utcnow,
)
from onward.tools.registry import (
    Registry,
    default_registry,
    load_tool_modules,
    normalize_tool_refs,
    tool_modules_from_env,
)

RECURSION_LIMIT = 1_000_000  # bounded by the plan, not by LangGraph's default of 25


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
    waiting: list[Waiting] = []
    """What the run waits for a human about (``onward resolve`` settles it)."""
    decisions: list[Decision] = []

    @property
    def finished(self) -> bool:
        return self.status.finished

    def artifact_value(self, ow: Onward, name: str) -> Any:
        return ow.store.artifacts.get(self.artifacts[name])


def load_plan_file(
    path: str | Path, registry: Registry | None = None
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
    return parse_declared(data, registry or default_registry, source=str(path))


class Onward:
    """One open store plus the compiled graph. Not thread-safe; one per thread or process."""

    def __init__(
        self,
        db: str | None = None,
        *,
        registry: Registry | None = None,
        tool_modules: Sequence[str] = (),
    ) -> None:
        self.tool_modules = normalize_tool_refs([*tool_modules_from_env(), *tool_modules])
        load_tool_modules(self.tool_modules)
        self.registry = registry or default_registry
        self.store = Store(db)
        self.deps = NodeDeps(
            registry=self.registry, artifacts=self.store.artifacts, ledger=self.store.ledger
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
    ) -> str:
        """Create a run (nothing executes yet) and return its thread id.

        ``plan`` is a :class:`Plan` or a path to a declared plan file; without
        one, the goal is planned by the template rules when the run starts.
        """
        if goal is None and plan is None:
            raise UsageError("give a goal, or a declared plan (--plan FILE)")
        wd = Path(workdir or Path.cwd()).absolute()
        if not wd.is_dir():
            raise UsageError(f"work directory {wd} does not exist")
        goal_obj = Goal(objective=goal or "", inputs=list(inputs))
        plan_obj = Plan()
        concurrency = max_concurrency
        if isinstance(plan, (str, Path)):
            declared_goal, plan_obj, file_concurrency = load_plan_file(plan, self.registry)
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
        for name in inputs:
            if not (wd / name).exists():
                raise UsageError(f"input file {name} not found in {wd}; check --input")
        if not plan_obj.steps:
            # Fail fast, before a run exists: the rules are cheap and deterministic. The plan
            # node plans again inside the graph, durably.
            plan_from_template(goal_obj.objective, wd, list(goal_obj.inputs))
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
        )
        self.store.add_run(thread_id, goal_obj.objective, {"input": state.model_dump(mode="json")})
        return thread_id

    # -- driving ----------------------------------------------------------

    def stream(self, thread_id: str, *, takeover: bool = False) -> Iterator[ProgressEvent]:
        """Drive a run until it stops, yielding progress events. Resumes where it stopped.

        Holds the run's lease while driving: a run another live process drives raises
        :class:`RunBusyError`; ``takeover=True`` waits for that lease to expire instead.
        """
        row = self._row(thread_id)
        load_tool_modules(row.request["input"].get("tool_modules", []))
        owner = new_owner()
        self._acquire(thread_id, owner, takeover)
        try:
            with Heartbeat(self.store.leases, thread_id, owner) as beat:
                config = self._config(thread_id)
                run_input: Any = None
                if not self.graph.get_state(config).values:
                    # Killed before the first checkpoint: start from the stored request.
                    run_input = RunState.model_validate(migrate(dict(row.request["input"])))
                else:
                    self._check_consistency(thread_id)
                self.store.set_run_status(thread_id, RunStatus.RUNNING)
                for _mode, chunk in self.graph.stream(
                    run_input, config, stream_mode=["custom"], durability="sync"
                ):
                    if beat.lost.is_set():
                        raise LeaseLostError(thread_id)
                    yield ProgressEvent.model_validate(chunk)
                self.store.set_run_status(thread_id, self.state(thread_id).status)
        finally:
            self.store.leases.release(thread_id, owner)

    # -- deciding ---------------------------------------------------------

    def resolve(
        self,
        thread_id: str,
        step_id: str,
        action: DecisionAction | str,
        *,
        result: Any = None,
        by: str | None = None,
        reason: str = "",
    ) -> RunView:
        """Settle a step that waits for a human (an effect whose outcome is unknown).

        ``done``: the effect happened; ``result`` (JSON) is its result, verified by the
        step's checks like any output. ``retry``: it did not happen; run it again.
        ``skip``: leave it; dependants run without it. Drive the run on with :meth:`resume`.
        """
        action = DecisionAction(action)
        if action is DecisionAction.REOPEN:
            raise UsageError("reopen is decided by onward's consistency check, not by resolve")
        state = self.state(thread_id)
        load_tool_modules(state.tool_modules)  # the tool's default checks verify --as done
        waiting = state.waiting.get(step_id)
        if waiting is None:
            known = ", ".join(state.waiting) or "none"
            raise UsageError(
                f"step {step_id!r} of run {thread_id} is not waiting for a decision "
                f"(waiting steps: {known})"
            )
        owner = new_owner()
        self._acquire(thread_id, owner, takeover=False)
        try:
            rec = state.record(step_id)
            key = waiting.key
            decision = Decision(
                step_id=step_id,
                action=action,
                by=by or _whoami(),
                at=utcnow(),
                reason=reason,
                key=key,
            )
            updates: dict[str, Any] = {
                "waiting": {step_id: None},
                "decisions": [decision],
                "status": RunStatus.RUNNING,
            }
            if action is DecisionAction.DONE:
                step = state.plan.step(step_id)
                if key:
                    self.store.ledger.complete(key, result)
                ref = self.store.artifacts.put(step.output or f"step:{step_id}", result)
                task = ExecuteTask(
                    step=step, record=rec, workdir=state.workdir, inputs=dict(state.artifacts)
                )
                executed = rec.model_copy(update={"output": ref, "ended_at": utcnow()})
                done = verify_step(self.deps, task, executed, result)
                updates["steps"] = {step_id: done}
                if done.status is StepStatus.DONE and step.output:
                    updates["artifacts"] = {step.output: ref}
            elif action is DecisionAction.RETRY:
                if key:
                    self.store.ledger.allow_retry(key)
                updates["steps"] = {step_id: transition(rec, StepStatus.PENDING)}
            else:
                if key:
                    self.store.ledger.skip(key)
                updates["steps"] = {step_id: transition(rec, StepStatus.SKIPPED)}
            self.graph.update_state(self._config(thread_id), updates, as_node="gate")
            self.store.set_run_status(thread_id, RunStatus.RUNNING)
        finally:
            self.store.leases.release(thread_id, owner)
        return self.get(thread_id)

    def _check_consistency(self, thread_id: str) -> None:
        """Before driving on: every artifact a remaining step reads must still be intact.
        A pure producer is re-opened (recorded as a decision); otherwise the run stops."""
        state = self.state(thread_id)
        if not state.plan.steps or state.status.finished:
            return
        producers = {s.output: s for s in state.plan.steps if s.output}
        reopen: dict[str, StepRecord] = {}
        decisions: list[Decision] = []
        for step in state.plan.steps:
            if state.status_of(step.id) in (StepStatus.DONE, StepStatus.SKIPPED):
                continue
            for name in refs.names(step.args):
                ref = state.artifacts.get(name)
                if ref is None or name not in producers:
                    continue
                try:
                    self.store.artifacts.get(ref)
                    continue
                except ArtifactError as exc:
                    problem = str(exc)
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
                time.sleep(min(max(wait, 0.0) + 0.05, 5.0))

    def drive(
        self,
        thread_id: str,
        on_event: Callable[[ProgressEvent], None] | None = None,
        *,
        takeover: bool = False,
    ) -> RunView:
        for event in self.stream(thread_id, takeover=takeover):
            if on_event is not None:
                on_event(event)
        return self.get(thread_id)

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
        """The run's current typed state (the latest checkpoint)."""
        row = self._row(thread_id)
        values = self.graph.get_state(self._config(thread_id)).values
        if not values:
            return RunState.model_validate(migrate(dict(row.request["input"])))
        if isinstance(values, RunState):
            return values
        return RunState.model_validate(migrate(dict(values)))

    def get(self, thread_id: str) -> RunView:
        state = self.state(thread_id)
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
            waiting=[w for w in state.waiting.values() if w is not None],
            decisions=list(state.decisions),
            driver=lease.owner if lease else None,
            heartbeat_at=lease.heartbeat_at if lease else None,
            stalled=lease is not None
            and not state.status.finished
            and self.store.leases.policy.stale(lease.heartbeat_at, self.store.leases.clock()),
        )

    def list_runs(self, limit: int = 100) -> list[RunRow]:
        return self.store.list_runs(limit)

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


def _whoami() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
