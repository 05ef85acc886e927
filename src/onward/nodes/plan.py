"""plan: goal → validated Plan (a declared plan is re-validated; otherwise the template
rules, else the model), within the policy's ``max_plan_steps``. The chat hears of it
either way: the plan as a Markdown list, or why planning failed."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.errors import (
    NoTemplateError,
    PlanningError,
    PlanProblem,
    PlanValidationError,
    ToolError,
)
from onward.llm.context import cut
from onward.llm.planner import plan_with_model
from onward.model.state import (
    Plan,
    RunFailure,
    RunFailureKind,
    RunState,
    RunStatus,
    RunUpdate,
    Usage,
)
from onward.nodes.deps import NodeDeps, thread_of
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.planning.templates import plan_from_template
from onward.planning.validate import validate_plan
from onward.tools.registry import load_tool_modules


def plan(state: RunState, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> RunUpdate:
    deps = runtime.context
    assert state.goal is not None, "a run starts with a goal"
    goal, the_plan = state.goal, state.plan
    # A declared plan arrived in the run's input, which is saved before this node runs:
    # its values are ones the store holds (start() checked them), so only the rest is
    # checked here (a second walk of every value cost a tenth of a no-op step).
    declared = bool(the_plan.steps)
    usage = Usage()
    try:
        load_tool_modules(state.tool_modules)
        if not the_plan.steps:
            try:
                goal, the_plan = plan_from_template(
                    goal.objective,
                    Path(state.workdir),
                    list(goal.inputs),
                    confined=state.policy.confine_paths,
                )
                goal = goal.model_copy(
                    update={
                        "acceptance": [*goal.acceptance, *state.goal.acceptance],
                        "constraints": state.goal.constraints,
                        "judge": state.goal.judge,
                    }
                )
            except NoTemplateError:
                if deps.model is None:
                    raise
                thread_id = thread_of(config)
                the_plan, usage = plan_with_model(deps, deps.model, state, goal, thread_id)
        validate_plan(
            the_plan,
            deps.registry,
            goal,
            allow_tools=state.policy.allow_tools,
            values_checked=declared,
            max_steps=state.policy.max_plan_steps,
        )
        if deps.model is None:
            _milestones_need_a_model(the_plan)
    except (PlanningError, PlanValidationError, ToolError) as exc:
        usage = getattr(exc, "usage", usage)  # what the model's attempts cost
        emit(EventKind.PLAN_FAILED, message=str(exc))
        return {
            "status": RunStatus.FAILED,
            "failure": RunFailure(kind=RunFailureKind.PLANNING, message=str(exc)),
            "usage": usage,
            "messages": [AIMessage(f"**Planning failed.** {exc}")],
        }
    emit(
        EventKind.PLAN_CREATED,
        detail={"version": the_plan.version, "source": the_plan.source.value},
        total_steps=len(the_plan.steps),
        message=f"{len(the_plan.steps)} steps ({the_plan.source})",
    )
    updates: RunUpdate = {
        "status": RunStatus.RUNNING,
        "usage": usage,
        "messages": [AIMessage(plan_message(the_plan))],
    }
    if not state.plan.steps:  # a declared plan is already in state; don't store it twice
        updates["goal"] = goal
        updates["plan"] = the_plan
    return updates


def _milestones_need_a_model(plan: Plan) -> None:
    """A plan with milestones is refused up front when no model can expand them."""
    problems = [
        PlanProblem(
            f"steps[{i}] ({s.id}).milestone",
            "a milestone is expanded by a model when its dependencies are done, and this "
            "run has none: run with a model (--model, ONWARD_MODEL or Onward(model=...)), "
            "or write the milestone's steps into the plan",
        )
        for i, s in enumerate(plan.steps)
        if s.milestone is not None
    ]
    if problems:
        raise PlanValidationError(problems, source="plan")


SHOWN = 20
"""Steps listed in the chat's plan message (the rest are counted)."""


def plan_message(plan: Plan) -> str:
    """The plan as a chat message (Markdown): a headline, then a numbered list of steps."""
    n = len(plan.steps)
    lines = [f"**Plan v{plan.version}** ({plan.source.value}), {n} step{'s' if n != 1 else ''}:"]
    for i, s in enumerate(plan.steps[:SHOWN], 1):
        about = f" — {s.description}" if s.description else ""
        does = s.tool if s.milestone is None else f"milestone ({cut(s.milestone, 30)})"
        lines.append(f"{i}. `{s.id.replace('`', chr(39))}`: {does}{about}")
    if n > SHOWN:
        lines.append(f"\n… and {n - SHOWN} more")
    return "\n".join(lines)
