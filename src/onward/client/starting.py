"""Starting a run: read a declared plan, check the request, store it (nothing executes yet)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.messages import HumanMessage

from onward.errors import NoTemplateError, PlanValidationError, UsageError
from onward.model.state import Budget, Goal, Plan, RunState
from onward.observe.kinds import EventKind
from onward.planning.reading import read_plan_file
from onward.planning.templates import plan_from_template
from onward.planning.validate import parse_declared, request_problems
from onward.policies.confine import check_inputs
from onward.policies.run import RunPolicy
from onward.tools.registry import Registry, default_registry
from onward.verification.checks import Check

if TYPE_CHECKING:
    from onward.client.facade import Onward


def load_plan_file(
    path: str | Path, registry: Registry | None = None, allow_tools: frozenset[str] | None = None
) -> tuple[Goal, Plan, int | None]:
    """Read and validate a declared plan (YAML or JSON; JSON is YAML)."""
    data = read_plan_file(path)
    return parse_declared(
        data, registry or default_registry, source=str(path), allow_tools=allow_tools
    )


def start(
    ow: Onward,
    goal: str | None,
    *,
    plan: Plan | Mapping[str, Any] | str | Path | None,
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
) -> str:
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
    if isinstance(plan, (str, Path, Mapping)):
        # A path to a plan file, or a plan document already parsed (what the file holds).
        declared_goal, plan_obj, file_concurrency = (
            parse_declared(plan, ow.registry, source="plan", allow_tools=policy.allow_tools)
            if isinstance(plan, Mapping)
            else load_plan_file(plan, ow.registry, policy.allow_tools)
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
    elif plan is not None:
        raise UsageError(
            f"plan must be a Plan, a plan document (a mapping with 'goal' and 'steps') or "
            f"the path of a plan file, not {type(plan).__name__}"
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
    problems = request_problems(goal_obj, plan if isinstance(plan, Plan) else None)
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
    if ow.store.get_run(thread_id) is not None:
        raise UsageError(f"thread id {thread_id} is already used; resume it instead")
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
    ow.store.add_run(thread_id, goal_obj.objective, {"input": state.model_dump(mode="json")})
    ow.store.events.record(
        thread_id,
        EventKind.RUN_STARTED,
        {"objective": goal_obj.objective, "plan_steps": len(plan_obj.steps)},
    )
    return thread_id
