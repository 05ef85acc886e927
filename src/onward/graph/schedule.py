"""The scheduler: what runs next, as a class of small methods, and the graph's routers.

:class:`Scheduler` is a pure function of state (plus the registry and the clock): verify
what was produced; ask a person about the plan if the run's policy wants that; escalate
steps that wait for a person, then ask about reviews the judge could not give (the approve
node, a ``judge`` question: the output stays produced); route failed steps by the route
table (graph/routes.py); expand a milestone that is due (the replan node, which revises
plans); otherwise pick ready steps (dependencies done) in plan order, at most
``max_concurrency`` of them, and fan them out with ``Send`` — to ``approve`` when the step
needs an approval it does not have, else to ``execute``; or route to finalize. Each part is
a method a unit test calls on a ``RunState`` without a graph (tests/unit/test_scheduler_unit.py).

Every node's next node is picked by the scheduler and checked against the route table's
labelled exits (``routes.check_exit``, so what runs is what the graph draws): through a
conditional edge (:meth:`Scheduler.router`, its path map ``routes.path_map``), or, for
execute and verify, by the node's own ``Command`` (:func:`routed_execute`,
:meth:`Scheduler.verify_node`), which saves the edge's fresh copy of every channel. After a
lone task the scheduler routes; after a task of a parallel wave it cannot (each task's
router sees only its own writes, not its siblings', so every task would re-send the
others), so the wave's tasks go to the ``gate`` *node*, a join that runs once the whole
wave has committed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Command, Send

from onward.graph.routes import FAILURE_ROUTES, TASK_NODES, Node, check_exit
from onward.model import budget
from onward.model.state import (
    PLAN_TARGET,
    SETTLED,
    ApproveTask,
    AskBatch,
    ExecuteTask,
    NoteTask,
    Plan,
    PlanStep,
    RunState,
    RunStatus,
    StepFailure,
    StepStatus,
    Waiting,
    WaitKind,
)
from onward.nodes.deps import NodeDeps
from onward.nodes.execute import execute
from onward.nodes.replan import has_rule
from onward.nodes.verify import inputs_of, verify
from onward.people.approvals import needs_approval, plan_hash, step_hash
from onward.store.breakers import BreakerPolicy
from onward.tools.registry import ToolSpec, load_tool_modules
from onward.verification.judge import goal_hash

EXECUTE = Node.EXECUTE.value
FINALIZE = Node.FINALIZE.value
GATE = Node.GATE.value
APPROVE = Node.APPROVE.value
ESCALATE = Node.ESCALATE.value
RETRY = Node.RETRY.value
REPLAN = Node.REPLAN.value
WAIT = Node.WAIT.value
NOTE = Node.NOTE.value
VERIFY = Node.VERIFY.value

Route = list[Send] | str
"""A node name (or ``END``), or the ``Send`` tasks of a wave."""


def downstream(plan: Plan, step_id: str) -> list[str]:
    """Every step that depends on ``step_id``, directly or not, in plan order."""
    index = plan.index()
    seen: set[str] = set()
    todo = list(index.children.get(step_id, []))
    while todo:
        sid = todo.pop()
        if sid not in seen:
            seen.add(sid)
            todo.extend(index.children.get(sid, []))
    return sorted(seen, key=index.position.__getitem__)


@dataclass
class Scan:
    """What one pass over the schedulable steps found, in plan order."""

    failed: list[tuple[str, StepFailure]] = field(default_factory=list)
    deferred: set[str] = field(default_factory=set)
    """Steps whose retry waits for a time."""
    blocked: list[str] = field(default_factory=list)
    """Steps with a record (a retry, a reopened step) whose dependencies are not settled:
    whether one is deferred matters only when nothing can run, so its record is read then."""
    ready: list[PlanStep] = field(default_factory=list)
    produced: bool = False
    due: bool = False
    """A milestone whose dependencies are settled (the replan node expands it)."""


class Scheduler:
    """Picks what runs next from a ``RunState``; ``scheduler(state)`` is the whole decision."""

    def __init__(self, deps: NodeDeps) -> None:
        self.deps = deps

    def __call__(self, state: RunState) -> Route:
        if state.status is RunStatus.SUSPENDED:
            return END  # waiting for a time (backoff, breaker); resume goes on from the gate
        if state.status is not RunStatus.RUNNING or not state.plan.steps:
            return FINALIZE
        load_tool_modules(state.tool_modules)
        now = self.deps.clock()
        question = self.plan_question(state)
        if question is not None:
            return [Send(APPROVE, question)]
        if state.waiting:
            return self.waiting_route(state)
        scan = self.scan(state, now)
        if scan.produced:
            return VERIFY  # a wave's or a person's output: verified before anything else
        if scan.failed:
            return self.failure_route(state, scan.failed)
        if scan.due:
            return REPLAN  # a milestone is due: no failure is open, so it is expanded now
        return self.dispatch(state, scan, now)

    # -- questions -------------------------------------------------------------------

    def ask(
        self, state: RunState, kind: WaitKind, step: PlanStep | None, args_hash: str, **extra: Any
    ) -> ApproveTask:
        """A question for a person (the approve or escalate node's task)."""
        spec = self.deps.registry.get(step.tool) if step else None
        return ApproveTask(
            kind=kind,
            step=step,
            record=state.record(step.id) if step else None,
            dependants=[state.record(d) for d in downstream(state.plan, step.id)] if step else [],
            args_hash=args_hash,
            workdir=state.workdir,
            tool_modules=state.tool_modules,
            asked_at=self.deps.clock(),
            deadline=state.policy.deadline_for(
                step.tool if step else None, spec.deadline if spec else None
            ),
            allow_tools=state.policy.allow_tools,
            confine_paths=state.policy.confine_paths,
            **extra,
        )

    def plan_question(self, state: RunState) -> ApproveTask | None:
        """The question about the plan, when the policy wants one and the plan as it is
        now has no approval."""
        if not state.policy.approve_plan:
            return None
        h = plan_hash(state.plan)
        if state.plan_approval is not None and state.plan_approval.args_hash == h:
            return None
        done = {k: r for k, r in state.steps.items() if r.status is StepStatus.DONE}
        return self.ask(
            state,
            WaitKind.PLAN,
            None,
            h,
            plan=state.plan,
            done=done,
            max_plan_steps=state.policy.max_plan_steps,
        )

    def escalation(self, state: RunState, step: PlanStep, waiting: Waiting) -> ApproveTask:
        """The question for a person about a step whose outcome is unknown or failed."""
        inputs = inputs_of(state, step)
        h = step_hash(step, inputs)
        return self.ask(state, WaitKind.ESCALATION, step, h, waiting=waiting, inputs=inputs)

    def review(self, state: RunState, waiting: Waiting) -> ApproveTask:
        """The question about an output the judge could not review (the goal's for
        ``(plan)``)."""
        if waiting.step_id == PLAN_TARGET:
            return self.ask(state, WaitKind.JUDGE, None, goal_hash(state), waiting=waiting)
        step = state.plan.step(waiting.step_id)
        inputs = inputs_of(state, step)
        h = step_hash(step, inputs)
        return self.ask(state, WaitKind.JUDGE, step, h, waiting=waiting, inputs=inputs)

    def waiting_route(self, state: RunState) -> list[Send]:
        """Someone waits: an unknown outcome stops the run and is asked before anything
        else runs; then the reviews the judge could not give."""
        waits = [w for w in state.waiting.values() if w is not None]
        asks = [self.escalation(state, state.plan.step(w.step_id), w) for w in waits if not w.judge]
        if asks:
            return _wave([_one_interrupt(ESCALATE, asks)])
        reviews = [self.review(state, w) for w in waits if w.judge]
        return _wave([_one_interrupt(APPROVE, reviews)] if reviews else [])

    # -- the scan --------------------------------------------------------------------

    def scan(self, state: RunState, now: datetime) -> Scan:
        """Only the steps not done or skipped (a long run's resume decodes only these):
        failures, produced outputs, steps deferred to a time, due milestones and ready
        steps. Of the steps never started, only those whose dependencies are all settled
        are looked at (kept up to date by the writes), and statuses are read without
        decoding records."""
        found = Scan()
        steps = state.steps
        index = state.plan.index()
        status_of = steps.statuses.get
        for i in state.schedulable_positions():
            sid = index.ids[i]
            status = status_of(sid)
            if status is StepStatus.FAILED:
                failure = steps[sid].failure
                if failure is not None:
                    found.failed.append((sid, failure))
            elif status is StepStatus.PRODUCED:
                found.produced = True
            elif status is None or status is StepStatus.PENDING:  # else: running
                self._scan_pending(state, index[i], status, now, found)
        return found

    def _scan_pending(
        self, state: RunState, step: PlanStep, status: StepStatus | None, now: datetime, found: Scan
    ) -> None:
        status_of = state.steps.statuses.get
        if any(status_of(d) not in SETTLED for d in step.depends_on):
            if status is not None:
                found.blocked.append(step.id)  # a retry or a reopened step waiting again
        elif status is not None and (later := state.steps[step.id].not_before) and later > now:
            found.deferred.add(step.id)
        elif step.milestone is not None:
            found.due = True  # expanded by the model (in the replan node) before it runs
        else:
            found.ready.append(step)

    # -- ready work ------------------------------------------------------------------

    def dispatch(self, state: RunState, scan: Scan, now: datetime) -> Route:
        """The ready steps' tasks (and their questions and budget warnings), or a wait for
        the deferred steps, or finalize when nothing is left."""
        sends, deferred = self.ready_tasks(state, scan)
        if not sends:
            steps = state.steps
            if not deferred:
                deferred = {s for s in scan.blocked if (t := steps[s].not_before) and t > now}
            return WAIT if deferred else FINALIZE
        uses = budget.usage(state, now)
        notes = self.warnings(state, uses)
        spent = budget.exhausted(uses)
        if spent:  # only when something would run: a run may end exactly on its budget
            # A step that jumps past 80 % straight to 100 % still gives its warnings.
            return _wave([Send(APPROVE, self.budget_question(state, spent)), *notes])
        return _wave([*sends, *notes], state.wave)

    def ready_tasks(self, state: RunState, scan: Scan) -> tuple[list[Send], set[str]]:
        """At most ``max_concurrency`` tasks for the ready steps, in plan order (one
        interrupt for the wave's approvals first), and every deferred step (a step whose
        service's breaker is open joins them: other steps go on)."""
        sends: list[Send] = []
        questions: list[ApproveTask] = []
        deferred = set(scan.deferred)
        for step in scan.ready:
            spec = self.deps.registry.get(step.tool)
            if self.breaker_open(spec, step):
                deferred.add(step.id)
                continue
            inputs = inputs_of(state, step)
            required = needs_approval(step, spec, state.policy)
            approval = state.approvals.get(step.id) if required else None
            if required and approval is None:
                h = step_hash(step, inputs)
                questions.append(self.ask(state, WaitKind.APPROVAL, step, h, inputs=inputs))
            else:
                task = self.execute_task(state, step, spec, inputs, required)
                sends.append(Send(EXECUTE, task))
            if len(sends) + len(questions) >= state.max_concurrency:
                break
        if questions:  # the wave's questions: one interrupt, asked with its executes
            sends.insert(0, _one_interrupt(APPROVE, questions))
        return sends, deferred

    def execute_task(
        self,
        state: RunState,
        step: PlanStep,
        spec: ToolSpec | None,
        inputs: dict[str, Any],
        required: bool,
    ) -> ExecuteTask:
        """The execute node's task for a ready step."""
        return ExecuteTask(
            step=step,
            record=state.record(step.id),
            workdir=state.workdir,
            tool_modules=state.tool_modules,
            inputs=inputs,
            approval_required=required,
            approval=state.approvals.get(step.id) if required else None,
            max_replans=state.budget.max_replans,
            confine_paths=state.policy.confine_paths,
            policy=state.policy if spec is not None and spec.calls_tools else None,
        )

    def warnings(self, state: RunState, uses: list[budget.Use]) -> list[Send]:
        """A note task for the budget thresholds newly passed (none if none)."""
        new = budget.new_warnings(uses, state.budget_warnings)
        if not new:
            return []
        task = NoteTask(markers=[m for m, _ in new], texts=[u.text() for _, u in new])
        return [Send(NOTE, task)]

    def budget_question(self, state: RunState, spent: list[budget.Use]) -> ApproveTask:
        """The question for a person when the budget is used up."""
        text = "; ".join(u.text() for u in spent)
        waiting = Waiting(step_id=PLAN_TARGET, reason=f"budget used up: {text}")
        return self.ask(
            state,
            WaitKind.BUDGET,
            None,
            "",
            waiting=waiting,
            budget=state.budget,
            spent={u.metric: u.used for u in spent},
        )

    def breaker_open(self, spec: ToolSpec | None, step: PlanStep) -> bool:
        """Whether the step's service rests (an open breaker) or its backoff runs."""
        service = spec.service_for(step.args) if spec else None
        if spec is None or not service or self.deps.breakers is None:
            return False
        policy = spec.breaker or BreakerPolicy()
        return self.deps.breakers.blocked_until(service, policy) is not None

    # -- failures --------------------------------------------------------------------

    def failure_route(self, state: RunState, failed: list[tuple[str, StepFailure]]) -> Route:
        """Each failed step takes the first route of its class (routes.FAILURE_ROUTES) that
        is open: replan needs a rule or a model, a person needs a policy that lets the run
        ask one (else the run fails: finalize). People first: their questions go out at
        once, as one interrupt; then retry before replan."""
        asks: list[ApproveTask] = []
        routes: set[Node] = set()
        for sid, failure in failed:
            step = state.plan.step(sid)
            cls = failure.failure_class
            route = next((r for r in FAILURE_ROUTES[cls] if self.is_open(state, step, r)), None)
            if route is None:
                return FINALIZE  # --no-escalate: what needs a person fails the run
            if route == ESCALATE:
                reason = f"step failed ({cls.value}): {failure.message}"
                if failure.hint:
                    reason += f" (hint: {failure.hint})"
                waiting = Waiting(step_id=sid, reason=reason, args=step.args)
                asks.append(self.escalation(state, step, waiting))
            else:
                routes.add(route)
        if asks:
            return _wave([_one_interrupt(ESCALATE, asks)])
        return RETRY if RETRY in routes else REPLAN

    def is_open(self, state: RunState, step: PlanStep, route: Node) -> bool:
        """Whether a failed ``step`` may take ``route``."""
        if route == REPLAN:
            return self.deps.model is not None or has_rule(self.deps.registry.get(step.tool))
        if route == ESCALATE:
            return state.policy.escalate_failures
        return True

    # -- routers ---------------------------------------------------------------------

    def on(self, context: object) -> Scheduler:
        """The scheduler of the run whose context is ``context``: on the run's own
        dependencies (the ``context=`` every drive passes), so a graph compiled once serves
        every client that drives it; on this one's when the host gives none (``langgraph
        dev``, an edit's ``update_state``, a unit test calling a router)."""
        if isinstance(context, NodeDeps) and context is not self.deps:
            return Scheduler(context)
        return self

    def router(self, source: Node) -> Callable[[RunState], Route]:
        """The conditional edge after ``source`` (its path map: ``routes.path_map``): a task
        in a parallel wave joins at the gate node; finalize ends a finished run; everything
        else is scheduled."""
        schedule = self

        def route(state: RunState) -> Route:
            if source in TASK_NODES and state.wave > 1:
                return routed(source, GATE)
            if source is Node.FINALIZE and state.status.finished:
                return routed(source, END)
            return routed(source, schedule.on(_run_context())(state))

        route.__name__ = f"after_{source}"
        return route

    def verify_node(self) -> Callable[[RunState, RunnableConfig, Runtime[NodeDeps]], Command[str]]:
        """The verify node with its own exit: the scheduler's route on the state as
        verify's writes leave it (:func:`after_writes`, what its conditional edge would
        read, without the edge's fresh copy of every channel)."""
        schedule = self

        def routed_verify(
            state: RunState, config: RunnableConfig, runtime: Runtime[NodeDeps]
        ) -> Command[str]:
            update = verify(state, config, runtime)
            route = schedule.on(runtime.context)(after_writes(state, update))
            routed(Node.VERIFY, route)  # a route verify does not declare is refused
            return Command(update=update, goto=route)

        routed_verify.__name__ = "verify"
        return routed_verify


def routed_execute(task: Any, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> Command[str]:
    """The execute node with its own exit: a task of a parallel wave joins at the gate
    node, a lone one goes to verify (the wave's size is the task's, the value its write
    leaves in the state: what :meth:`Scheduler.router` reads after the other task nodes)."""
    update = execute(task, config, runtime)
    target = GATE if task.wave > 1 else VERIFY
    check_exit(Node.EXECUTE, target)
    return Command(update=update, goto=target)


def _run_context() -> object:
    """The running graph's context, or None outside a run's step (LangGraph injects no
    runtime into a router called by ``update_state``)."""
    try:
        runtime = get_runtime()
    except RuntimeError:  # not inside a graph's runnable at all
        return None
    return getattr(runtime, "context", None)


def _one_interrupt(node: str, questions: list[ApproveTask]) -> Send:
    """The questions of one wave as one task, so they are ONE interrupt (a single
    question keeps the single-question payload older checkpoints hold)."""
    if len(questions) == 1:
        return Send(node, questions[0])
    return Send(node, AskBatch(questions=questions))


def _wave(sends: list[Send], current: int | None = None) -> list[Send]:
    """Tell each task how many siblings it has, so its routing knows whether to join; and
    an execute task whether the run's ``wave`` (``current``) already says so."""
    n = len(sends)
    for send in sends:
        update: dict[str, Any] = {"wave": n} if n > 1 else {}
        if current == n and isinstance(send.arg, ExecuteTask):
            update["wave_in_state"] = True
        if update:
            send.arg = send.arg.model_copy(update=update)
    return sends


def routed(source: Node, route: Route) -> Route:
    """``route`` as ``source``'s conditional edge takes it: a label of the route table, or
    Sends to declared exits (anything else is a bug, refused before it runs)."""
    if isinstance(route, str):
        return check_exit(source, route)
    for send in route:
        check_exit(source, send.node)
    return route


def join(state: RunState) -> dict[str, object]:
    """The gate node: no work of its own; its outgoing edge is the scheduler."""
    return {}


def _reducer(name: str) -> Callable[[Any, Any], Any]:
    """How a write to channel ``name`` folds into its value, read from ``RunState``'s own
    annotations: a delta channel's batch reducer, a binary operator, or the last value."""
    for meta in RunState.model_fields[name].metadata:
        if isinstance(meta, DeltaChannel):
            batch = meta.reducer
            return lambda current, value: batch(current, [value])
        if callable(meta):
            return meta  # type: ignore[no-any-return]
    return lambda current, value: value


_REDUCERS: dict[str, Callable[[Any, Any], Any]] = {}


def after_writes(state: RunState, update: Mapping[str, Any]) -> RunState:
    """``state`` with one task's ``update`` applied through the channels' reducers: what
    a conditional edge after the task reads (LangGraph's fresh read of its writes)."""
    changes: dict[str, Any] = {}
    for name, value in update.items():
        reduce = _REDUCERS.get(name)
        if reduce is None:
            reduce = _REDUCERS[name] = _reducer(name)
        changes[name] = reduce(getattr(state, name), value)
    return state.model_copy(update=changes)
