"""The scheduler, as a routing function wherever it can be.

``schedule`` is a pure function of state (plus the registry and the clock): verify what
was produced; ask a person about the plan if the run's policy wants that; escalate steps
that wait for a person, then ask about reviews the judge could not give (the approve
node, a ``judge`` question: the output stays produced); route failed steps by the route
table (graph/routes.py); expand a milestone that is due (the replan node, which revises
plans); otherwise pick ready steps (dependencies done) in plan order, at
most ``max_concurrency`` of them, and fan them out with ``Send`` — to ``approve`` when the
step needs an approval it does not have, else to ``execute``; or route to finalize.

After a lone task, the scheduler routes straight from it (a lone execute goes straight to
verify). After a parallel wave it cannot: each task's routing sees only its own writes,
not its siblings', so every task would re-send the others. Then the tasks go to the
``gate`` *node*, a join that runs once the whole wave has committed.

Each node's routing is checked against the exits it declares (``routes.check_exit``) and
returns the edge's label, so what runs is what the graph draws.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END
from langgraph.runtime import Runtime
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


def make_scheduler(deps: NodeDeps) -> Callable[[RunState], list[Send] | str]:
    def ask(
        state: RunState, kind: WaitKind, step: PlanStep | None, args_hash: str, **extra: Any
    ) -> ApproveTask:
        spec = deps.registry.get(step.tool) if step else None
        return ApproveTask(
            kind=kind,
            step=step,
            record=state.record(step.id) if step else None,
            dependants=[state.record(d) for d in downstream(state.plan, step.id)] if step else [],
            args_hash=args_hash,
            workdir=state.workdir,
            tool_modules=state.tool_modules,
            asked_at=deps.clock(),
            deadline=state.policy.deadline_for(
                step.tool if step else None, spec.deadline if spec else None
            ),
            allow_tools=state.policy.allow_tools,
            confine_paths=state.policy.confine_paths,
            **extra,
        )

    def escalation(state: RunState, step: PlanStep, waiting: Waiting) -> ApproveTask:
        inputs = inputs_of(state, step)
        return ask(
            state,
            WaitKind.ESCALATION,
            step,
            step_hash(step, inputs),
            waiting=waiting,
            inputs=inputs,
        )

    def review(state: RunState, waiting: Waiting) -> ApproveTask:
        """The question about an output the judge could not review (the goal's for
        ``(plan)``)."""
        if waiting.step_id == PLAN_TARGET:
            return ask(state, WaitKind.JUDGE, None, goal_hash(state), waiting=waiting)
        step = state.plan.step(waiting.step_id)
        inputs = inputs_of(state, step)
        return ask(
            state, WaitKind.JUDGE, step, step_hash(step, inputs), waiting=waiting, inputs=inputs
        )

    def schedule(state: RunState) -> list[Send] | str:
        if state.status is RunStatus.SUSPENDED:
            return END  # waiting for a time (backoff, breaker); resume goes on from the gate
        if state.status is not RunStatus.RUNNING or not state.plan.steps:
            return FINALIZE
        load_tool_modules(state.tool_modules)
        policy = state.policy
        now = deps.clock()
        uses = budget.usage(state, now)
        if policy.approve_plan:
            h = plan_hash(state.plan)
            if state.plan_approval is None or state.plan_approval.args_hash != h:
                done = {k: r for k, r in state.steps.items() if r.status is StepStatus.DONE}
                task = ask(
                    state,
                    WaitKind.PLAN,
                    None,
                    h,
                    plan=state.plan,
                    done=done,
                    max_plan_steps=state.policy.max_plan_steps,
                )
                return [Send(APPROVE, task)]
        if state.waiting:
            # An unknown outcome: stop and ask before anything else runs; then the
            # reviews the judge could not give.
            waits = [w for w in state.waiting.values() if w is not None]
            asks = [escalation(state, state.plan.step(w.step_id), w) for w in waits if not w.judge]
            if asks:
                return _wave([_one_interrupt(ESCALATE, asks)])
            reviews = [review(state, w) for w in waits if w.judge]
            return _wave([_one_interrupt(APPROVE, reviews)] if reviews else [])
        # Only the steps not done or skipped (a long run's resume decodes only these):
        # failures, steps deferred to a time, and ready steps, in plan order.
        steps = state.steps
        failed: list[tuple[str, StepFailure]] = []
        deferred: set[str] = set()
        # Pending steps with a record whose dependencies are not settled: whether one is
        # deferred to a time matters only when nothing can run (read then, below), so the
        # scan decodes no record of a step that cannot run yet.
        blocked: list[str] = []
        ready: list[PlanStep] = []
        produced = due = False
        index = state.plan.index()
        ids = index.ids
        status_of = steps.statuses.get  # read without decoding records or steps
        # Of the steps never started, only those whose dependencies are all settled
        # (kept up to date by the writes: a long chain's waiting steps are not scanned).
        for i in state.schedulable_positions():
            sid = ids[i]
            status = status_of(sid)
            if status is StepStatus.FAILED:
                failure = steps[sid].failure
                if failure is not None:
                    failed.append((sid, failure))
                continue
            if status is StepStatus.PRODUCED:
                produced = True
                continue
            if status is not None and status is not StepStatus.PENDING:
                continue  # running
            step = index[i]
            if any(status_of(d) not in SETTLED for d in step.depends_on):
                if status is not None:
                    blocked.append(sid)  # a retry or a reopened step waiting again
                continue
            if status is not None and (later := steps[sid].not_before) and later > now:
                deferred.add(sid)
                continue
            if step.milestone is not None:
                due = True  # expanded by the model (in the replan node) before it runs
                continue
            ready.append(step)
        if produced:
            return VERIFY  # a wave's or a person's output: verified before anything else
        if failed:
            return _route_failures(state, failed)
        if due:
            return REPLAN  # a milestone is due: no failure is open, so it is expanded now
        sends: list[Send] = []
        questions: list[ApproveTask] = []
        for step in ready:
            spec = deps.registry.get(step.tool)
            if _breaker_open(spec, step):
                deferred.add(step.id)
                continue  # its service rests or its backoff runs; other steps go on
            inputs = inputs_of(state, step)
            required = needs_approval(step, spec, policy)
            approval = state.approvals.get(step.id) if required else None
            if required and approval is None:
                questions.append(
                    ask(state, WaitKind.APPROVAL, step, step_hash(step, inputs), inputs=inputs)
                )
            else:
                sends.append(
                    Send(
                        EXECUTE,
                        ExecuteTask(
                            step=step,
                            record=state.record(step.id),
                            workdir=state.workdir,
                            tool_modules=state.tool_modules,
                            inputs=inputs,
                            approval_required=required,
                            approval=approval,
                            max_replans=state.budget.max_replans,
                            confine_paths=state.policy.confine_paths,
                            policy=policy if spec is not None and spec.calls_tools else None,
                        ),
                    )
                )
            if len(sends) + len(questions) >= state.max_concurrency:
                break
        if questions:  # the wave's questions: one interrupt, asked with its executes
            sends.insert(0, _one_interrupt(APPROVE, questions))
        if not sends:
            if not deferred:
                deferred = {s for s in blocked if (t := steps[s].not_before) and t > now}
            return WAIT if deferred else FINALIZE
        spent = budget.exhausted(uses)
        warnings = budget.new_warnings(uses, state.budget_warnings)
        notes = (
            [
                Send(
                    NOTE,
                    NoteTask(
                        markers=[m for m, _ in warnings], texts=[u.text() for _, u in warnings]
                    ),
                )
            ]
            if warnings
            else []
        )
        if spent:  # only when something would run: a run may end exactly on its budget
            text = "; ".join(u.text() for u in spent)
            waiting = Waiting(step_id=PLAN_TARGET, reason=f"budget used up: {text}")
            question = ask(
                state,
                WaitKind.BUDGET,
                None,
                "",
                waiting=waiting,
                budget=state.budget,
                spent={u.metric: u.used for u in spent},
            )
            # A step that jumps past 80 % straight to 100 % still gives its warnings.
            return _wave([Send(APPROVE, question), *notes])
        return _wave([*sends, *notes], state.wave)

    def _breaker_open(spec: ToolSpec | None, step: PlanStep) -> bool:
        service = spec.service_for(step.args) if spec else None
        if spec is None or not service or deps.breakers is None:
            return False
        return deps.breakers.blocked_until(service, spec.breaker or BreakerPolicy()) is not None

    def _route_failures(state: RunState, failed: list[tuple[str, StepFailure]]) -> list[Send] | str:
        """Each failed step takes the first route of its class (routes.FAILURE_ROUTES) that
        is open: replan needs a rule or a model, a person needs a policy that lets the run
        ask one (else the run fails: finalize). People first: their questions go out at
        once; then retry before replan."""
        asks: list[ApproveTask] = []
        routes: set[Node] = set()
        for sid, failure in failed:
            step = state.plan.step(sid)
            cls = failure.failure_class
            route = next((r for r in FAILURE_ROUTES[cls] if _open(state, step, r)), None)
            if route is None:
                return FINALIZE  # --no-escalate: what needs a person fails the run
            if route == ESCALATE:
                reason = f"step failed ({cls.value}): {failure.message}"
                if failure.hint:
                    reason += f" (hint: {failure.hint})"
                waiting = Waiting(step_id=sid, reason=reason, args=step.args)
                asks.append(escalation(state, step, waiting))
            else:
                routes.add(route)
        if asks:
            # The wave's escalations: one interrupt, like approvals. (An old checkpoint's
            # pending escalations, one task each, still join at the gate.)
            return _wave([_one_interrupt(ESCALATE, asks)])
        return RETRY if RETRY in routes else REPLAN

    def _open(state: RunState, step: PlanStep, route: Node) -> bool:
        if route == REPLAN:
            return deps.model is not None or has_rule(deps.registry.get(step.tool))
        if route == ESCALATE:
            return state.policy.escalate_failures
        return True

    return schedule


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


def routed(source: Node, route: list[Send] | str) -> list[Send] | str:
    """``route`` as ``source``'s conditional edge takes it: a label of the route table, or
    Sends to declared exits (anything else is a bug, refused before it runs)."""
    if isinstance(route, str):
        return check_exit(source, route)
    for send in route:
        check_exit(source, send.node)
    return route


def make_router(
    source: Node, schedule: Callable[[RunState], list[Send] | str]
) -> Callable[[RunState], list[Send] | str]:
    """The conditional edge after ``source``: a task in a parallel wave joins at the gate
    node; everything else is scheduled (execute routes itself: :func:`routed_execute`)."""

    def route(state: RunState) -> list[Send] | str:
        if source in TASK_NODES and state.wave > 1:
            return routed(source, GATE)
        return routed(source, schedule(state))

    route.__name__ = f"after_{source}"
    return route


def make_after_finalize(
    schedule: Callable[[RunState], list[Send] | str],
) -> Callable[[RunState], list[Send] | str]:
    """finalize's conditional edge: END once the run is finished; else the goal's review
    could not run and a person is asked (the scheduler's ``judge`` question)."""

    def after_finalize(state: RunState) -> list[Send] | str:
        if state.status.finished:
            return check_exit(Node.FINALIZE, END)
        return routed(Node.FINALIZE, schedule(state))

    return after_finalize


def routed_execute(task: Any, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> Command[str]:
    """The execute node with its own exit: a task in a parallel wave joins at the gate
    node, a lone one goes to verify (as :func:`make_router` routes the other nodes; the
    wave's size is the task's, the value its write leaves in the state)."""
    update = execute(task, config, runtime)
    target = GATE if task.wave > 1 else VERIFY
    check_exit(Node.EXECUTE, target)
    return Command(update=update, goto=target)


def make_verify(
    schedule: Callable[[RunState], list[Send] | str],
) -> Callable[[RunState, RunnableConfig, Runtime[NodeDeps]], Command[str]]:
    """The verify node with its own exit: the scheduler's route, on the state as verify's
    writes leave it (what its conditional edge read, without the edge's copy of every
    channel: the only superstep of every plan step that needs the whole state)."""

    def routed_verify(
        state: RunState, config: RunnableConfig, runtime: Runtime[NodeDeps]
    ) -> Command[str]:
        update = verify(state, config, runtime)
        route = schedule(after_writes(state, update))
        if isinstance(route, str):
            check_exit(Node.VERIFY, route)
        else:
            routed(Node.VERIFY, route)
        return Command(update=update, goto=route)

    routed_verify.__name__ = "verify"
    return routed_verify


def _reducer(field: str) -> Callable[[Any, Any], Any]:
    """How a write to ``field`` folds into its value, as its channel does: a delta
    channel's batch reducer, a binary operator, or the last value."""
    for meta in RunState.model_fields[field].metadata:
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
    for field, value in update.items():
        reduce = _REDUCERS.get(field)
        if reduce is None:
            reduce = _REDUCERS[field] = _reducer(field)
        changes[field] = reduce(getattr(state, field), value)
    return state.model_copy(update=changes)


def join(state: RunState) -> dict[str, object]:
    """The gate node: no work of its own; its outgoing edge is the scheduler."""
    return {}
