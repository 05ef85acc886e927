"""Starting a run: read a declared plan, check the request, store it (nothing executes yet)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from langchain_core.messages import HumanMessage

from onward.errors import NoTemplateError, PlanValidationError, UsageError
from onward.model.clock import utcnow
from onward.model.state import Budget, Goal, Plan, RunState
from onward.observe.kinds import EventKind
from onward.planning.reading import read_plan_file
from onward.planning.templates import plan_from_template
from onward.planning.validate import parse_declared, request_problems, validate_plan
from onward.policies.confine import check_inputs
from onward.policies.run import RunPolicy
from onward.tools.registry import Registry, default_registry
from onward.verification.checks import Check

if TYPE_CHECKING:
    from onward.client.facade import Onward


class DeclaredPlan(NamedTuple):
    """A declared plan, read and validated: what :func:`load_plan_file` returns and
    ``Onward.start(plan=...)`` takes. A tuple, so ``goal, plan, concurrency = ...`` works."""

    goal: Goal
    """The plan file's goal: objective, acceptance checks, constraints, inputs."""
    plan: Plan
    max_concurrency: int | None
    """The file's ``max_concurrency``, if it sets one."""


def load_plan_file(
    path: str | Path, registry: Registry | None = None, allow_tools: frozenset[str] | None = None
) -> DeclaredPlan:
    """Read and validate a declared plan (YAML or JSON; JSON is YAML). Pass the result to
    ``Onward.start(plan=...)`` or ``Onward.run(plan=...)`` to run it."""
    data = read_plan_file(path)
    return DeclaredPlan(
        *parse_declared(
            data, registry or default_registry, source=str(path), allow_tools=allow_tools
        )
    )


def _unused(ow: Onward, thread_id: str) -> None:
    """A run may only be started under a thread id no run has: else say what to do with
    the run that has it (resume an unfinished one; a finished one is left as it ended)."""
    found = ow.store.get_run(thread_id)
    if found is None:
        return
    if not found.status.finished:
        raise UsageError(
            f"thread id {thread_id} is already used by a run that is {found.status.value}; "
            f"resume it instead (`onward resume {thread_id}`, Onward.resume)"
        )
    raise UsageError(
        f"thread id {thread_id} is already used by a run that finished "
        f"({found.status.value}). For a new run give another thread id, or none (a new one "
        f"is made); to go on from one of its checkpoints as a new run, fork it (`onward "
        f"history {thread_id}`, then `onward fork {thread_id} --at CHECKPOINT`; Onward.fork)"
    )


def _declared(ow: Onward, plan: object, allow_tools: frozenset[str] | None) -> DeclaredPlan | None:
    """``plan`` as a declared plan, validated for this client's tools and the run's
    allowlist, if it is one: the path of a plan file, a plan document already parsed (what
    the file holds), or what :func:`load_plan_file` returned (a :class:`DeclaredPlan`, or
    the same three values as a plain tuple)."""
    if isinstance(plan, Mapping):
        return DeclaredPlan(
            *parse_declared(plan, ow.registry, source="plan", allow_tools=allow_tools)
        )
    if isinstance(plan, str | Path):
        return load_plan_file(plan, ow.registry, allow_tools)
    if not isinstance(plan, tuple) or len(plan) != 3:
        return None
    loaded = DeclaredPlan(*plan)
    if not isinstance(loaded.goal, Goal) or not isinstance(loaded.plan, Plan):
        return None
    validate_plan(loaded.plan, ow.registry, loaded.goal, allow_tools=allow_tools)
    return loaded


def start(
    ow: Onward,
    goal: str | None,
    *,
    plan: Plan | DeclaredPlan | Mapping[str, Any] | str | Path | None,
    inputs: Sequence[str],
    workdir: str | Path | None,
    max_concurrency: int | None,
    thread_id: str | None,
    policy: RunPolicy | None,
    budget: Budget | None,
    judge: bool,
    acceptance: Sequence[Check],
    constraints: Mapping[str, str] | None,
    fail_fast: bool = True,
    fresh: bool = False,
) -> str:
    """:meth:`Onward.start`; ``fresh``: the caller read, under the thread's lock, that no
    run has ``thread_id`` (``onward serve``'s run request): it is not read again (a run
    that took the id since fails the insert: a StoreError)."""
    policy = policy or RunPolicy()
    # ``judge``: a model reviews every step's output (when a model is configured).
    if goal is None and plan is None:
        raise UsageError("give a goal, or a declared plan (--plan FILE)")
    wd = Path(workdir or Path.cwd()).absolute()
    if not wd.is_dir():
        raise UsageError(f"work directory {wd} does not exist")
    if thread_id is not None and not fresh:
        _unused(ow, thread_id)
    goal_obj = Goal(objective=goal or "", inputs=list(inputs))
    plan_obj = Plan()
    concurrency = max_concurrency
    declared = _declared(ow, plan, policy.allow_tools)
    if declared is not None:
        goal_obj = declared.goal.model_copy(
            update={
                "objective": goal or declared.goal.objective,
                "inputs": [*declared.goal.inputs, *inputs],
            }
        )
        plan_obj, concurrency = declared.plan, max_concurrency or declared.max_concurrency
    elif isinstance(plan, Plan):
        plan_obj = plan
        goal_obj = goal_obj.model_copy(update={"objective": goal or "run plan"})
    elif plan is not None:
        raise UsageError(
            f"plan must be a Plan, a plan document (a mapping with 'goal' and 'steps'), "
            f"the path of a plan file or what load_plan_file returned, not "
            f"{type(plan).__name__}"
        )
    if acceptance or constraints:
        goal_obj = goal_obj.model_copy(
            update={
                "acceptance": [*goal_obj.acceptance, *acceptance],
                "constraints": {**goal_obj.constraints, **(constraints or {})},
            }
        )
    if judge:
        if ow.deps.model is None:
            raise UsageError(
                "--judge needs a model: set OPENAI_API_KEY (and OPENAI_BASE_URL, "
                "ONWARD_MODEL), or pass Onward(model=...)"
            )
        goal_obj = goal_obj.model_copy(update={"judge": True})
    # Before anything is stored: text the store cannot hold is an error, not a traceback.
    problems = request_problems(
        goal_obj,
        plan if isinstance(plan, Plan) else None,
        size=(len(plan_obj.steps), policy.max_plan_steps),
    )
    if problems:
        raise PlanValidationError(problems, source="the run's request")
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
            if ow.deps.model is None and fail_fast:
                raise
    thread_id = thread_id or str(uuid.uuid4())
    state = RunState(
        workdir=str(wd),
        goal=goal_obj,
        plan=plan_obj,
        tool_modules=ow.tool_modules,
        max_concurrency=concurrency or 4,
        messages=[HumanMessage(goal_obj.objective)],
        policy=policy,
        budget=budget or Budget(),
        started_at=ow.clock(),
    )
    started = {"objective": goal_obj.objective, "plan_steps": len(plan_obj.steps)}
    ow.store.add_run(
        thread_id,
        goal_obj.objective,
        {"input": state.model_dump(mode="json")},
        events=[(utcnow(), str(EventKind.RUN_STARTED), started, None)],
    )
    from onward.llm.usage import warn_unpriced

    warn_unpriced(ow.deps.model, state.budget.max_cost, ow.store.events, thread_id)
    return thread_id
