"""Plan revisions: what a changed plan must respect, whoever changes it (a person editing
the plan at approval, a person editing a step's args, later the replanner).

A revision is refused, with every problem listed, when it breaks the rules any plan
follows (known tools, valid args, acyclic, artifacts produced before use), uses a tool
outside the run's allowlist, or changes a step that is already done.
"""

from __future__ import annotations

from collections.abc import Mapping

from onward.errors import PlanProblem
from onward.model.state import Goal, Plan, StepRecord, StepStatus
from onward.planning.validate import plan_problems
from onward.tools.registry import Registry


def revision_problems(
    old: Plan,
    new: Plan,
    records: Mapping[str, StepRecord],
    registry: Registry,
    *,
    goal: Goal | None = None,
    allow_tools: frozenset[str] | None = None,
) -> list[PlanProblem]:
    problems = plan_problems(new, registry, goal, allow_tools=allow_tools)
    new_steps = {s.id: s for s in new.steps}
    for i, step in enumerate(old.steps):
        rec = records.get(step.id)
        if rec is None or rec.status is not StepStatus.DONE:
            continue
        kept = new_steps.get(step.id)
        if kept is None:
            problems.append(
                PlanProblem(f"steps ({step.id})", "a done step cannot be removed from the plan")
            )
        elif (kept.tool, kept.args, kept.output) != (step.tool, step.args, step.output):
            problems.append(
                PlanProblem(
                    f"steps[{i}] ({step.id})",
                    "a done step cannot be changed (its effect and output are final); "
                    "add a new step instead",
                )
            )
    return problems
