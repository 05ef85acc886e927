"""gate: the scheduler, as a routing function wherever it can be.

``gate`` is a pure function of state (plus the registry and the clock): ask a person
about the plan if the run's policy wants that; escalate steps that wait for a person;
otherwise pick ready steps (dependencies done) in plan order, at most
``max_concurrency`` of them, and fan them out with ``Send`` — to ``approve`` when the
step needs an approval it does not have, else to ``execute``; or route to finalize.
This is the single place later routes (retry, replan) plug in, keyed by the failed
step's FailureClass.

After a lone task, gate routes straight from it: one superstep per step. After a
parallel wave it cannot: each task's routing sees only its own writes, not its
siblings', so every task would re-send the others. Then the tasks go to the ``gate``
*node*, a join that runs once the whole wave has committed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.graph import END
from langgraph.types import Send

from onward import budget, refs
from onward.approvals import needs_approval, plan_hash, step_hash
from onward.checkpointing.breakers import BreakerPolicy
from onward.checks import artifact_names
from onward.nodes.deps import NodeDeps
from onward.nodes.recover import REPLANNABLE, has_rule
from onward.state import (
    PLAN_TARGET,
    ApproveTask,
    ArtifactRef,
    ExecuteTask,
    FailureClass,
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
from onward.tools.registry import ToolSpec, load_tool_modules

EXECUTE = "execute"
FINALIZE = "finalize"
GATE = "gate"
APPROVE = "approve"
ESCALATE = "escalate"
RETRY = "retry"
REPLAN = "replan"
WAIT = "wait"
NOTE = "note"
TASK_NODES = [APPROVE, EXECUTE, ESCALATE, NOTE]
"""Nodes fed by ``Send`` (one task per step or question); after them, ``after_task``."""
STATE_NODES = [RETRY, REPLAN, WAIT]
"""Nodes that read the whole state; after them, ``gate``."""
ROUTES = [*TASK_NODES, *STATE_NODES, FINALIZE, END]
_SETTLED = (StepStatus.DONE, StepStatus.SKIPPED)


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


def make_gate(deps: NodeDeps) -> Callable[[RunState], list[Send] | str]:
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

    def escalation(state: RunState, step: PlanStep, waiting: Waiting) -> Send:
        inputs = _inputs(state, step)
        task = ask(
            state,
            WaitKind.ESCALATION,
            step,
            step_hash(step, inputs),
            waiting=waiting,
            inputs=inputs,
        )
        return Send(ESCALATE, task)

    def gate(state: RunState) -> list[Send] | str:
        if state.status is RunStatus.SUSPENDED:
            return END  # waiting for a time (backoff, breaker); resume goes on from gate
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
                task = ask(state, WaitKind.PLAN, None, h, plan=state.plan, done=done)
                return [Send(APPROVE, task)]
        if state.waiting:
            # An unknown outcome: stop and ask before anything else runs.
            asks = []
            for w in state.waiting.values():
                if w is None:
                    continue
                asks.append(escalation(state, state.plan.step(w.step_id), w))
            return _wave(asks)
        # Only the steps not done or skipped (a long run's resume decodes only these):
        # failures, steps deferred to a time, and ready steps, in plan order.
        steps = state.steps
        failed: list[tuple[str, StepFailure]] = []
        deferred: set[str] = set()
        ready: list[PlanStep] = []
        index = state.plan.index()
        ids = index.ids
        status_of = steps.statuses.get  # read without decoding records or steps
        for i in state.open_positions():
            sid = ids[i]
            status = status_of(sid)
            if status is StepStatus.FAILED:
                failure = steps[sid].failure
                if failure is not None:
                    failed.append((sid, failure))
                continue
            if status is not None and status is not StepStatus.PENDING:
                continue  # running
            if status is not None and (later := steps[sid].not_before) and later > now:
                deferred.add(sid)
                continue
            step = index[i]
            for d in step.depends_on:
                if status_of(d) not in _SETTLED:
                    break
            else:
                ready.append(step)
        if failed:
            return _route_failures(state, failed)
        sends: list[Send] = []
        for step in ready:
            spec = deps.registry.get(step.tool)
            if _breaker_open(spec, step):
                deferred.add(step.id)
                continue  # its service rests or its backoff runs; other steps go on
            inputs = _inputs(state, step)
            required = needs_approval(step, spec, policy)
            approval = state.approvals.get(step.id) if required else None
            if required and approval is None:
                task = ask(state, WaitKind.APPROVAL, step, step_hash(step, inputs), inputs=inputs)
                sends.append(Send(APPROVE, task))
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
                            judge_goal=state.goal
                            if deps.model is not None
                            and (step.judge or (state.goal is not None and state.goal.judge))
                            and budget.model_budget_spent(state) is None
                            else None,
                        ),
                    )
                )
            if len(sends) >= state.max_concurrency:
                break
        if not sends:
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
        return _wave([*sends, *notes])

    def _breaker_open(spec: ToolSpec | None, step: PlanStep) -> bool:
        service = spec.service_for(step.args) if spec else None
        if spec is None or not service or deps.breakers is None:
            return False
        return deps.breakers.blocked_until(service, spec.breaker or BreakerPolicy()) is not None

    def _route_failures(state: RunState, failed: list[tuple[str, StepFailure]]) -> list[Send] | str:
        """transient → retry; deterministic / validation with a rule → replan; the rest (no
        rule, non-convergent) → a person. People first: their questions go out at once."""
        asks: list[Send] = []
        route = None
        escalate = state.policy.escalate_failures
        for sid, failure in failed:
            step = state.plan.step(sid)
            cls = failure.failure_class
            if cls is FailureClass.TRANSIENT:
                route = route or RETRY
            elif cls in REPLANNABLE and (
                deps.model is not None or has_rule(deps.registry.get(step.tool))
            ):
                route = REPLAN if route in (None, REPLAN) else route
            elif not escalate:
                return FINALIZE  # --no-escalate: what needs a person fails the run
            else:
                reason = f"step failed ({cls.value}): {failure.message}"
                if failure.hint:
                    reason += f" (hint: {failure.hint})"
                waiting = Waiting(step_id=sid, reason=reason, args=step.args)
                asks.append(escalation(state, step, waiting))
        if asks:
            return _wave(asks)
        assert route is not None
        return route

    return gate


def _inputs(state: RunState, step: PlanStep) -> dict[str, ArtifactRef]:
    wanted = refs.names(step.args) | {n for c in step.checks for n in artifact_names(c)}
    return {n: state.artifacts[n] for n in wanted if n in state.artifacts}


def _wave(sends: list[Send]) -> list[Send]:
    """Tell each task how many siblings it has, so its routing knows whether to join."""
    if len(sends) > 1:
        for send in sends:
            send.arg = send.arg.model_copy(update={"wave": len(sends)})
    return sends


def make_after_task(
    gate: Callable[[RunState], list[Send] | str],
) -> Callable[[RunState], list[Send] | str]:
    def after_task(state: RunState) -> list[Send] | str:
        """Route a finished task: straight on if it ran alone, else join at the gate node."""
        return GATE if state.wave > 1 else gate(state)

    return after_task


def join(state: RunState) -> dict[str, object]:
    """The gate node: no work of its own; its outgoing edge is ``gate``."""
    return {}
