"""Milestones (rolling plans): a plan step that says *what* is to be done once the steps it
depends on are done, and that the model expands into concrete steps then, when the facts
are known ("coarse plan first, detail later").

A milestone has an id, the text of what it is to do (``milestone``), ``depends_on`` (at
least one step) and optionally an ``output``: an artifact its expansion promises to the
steps after it (one of the expanded steps must produce it). It has no tool, args or checks:
those belong to the steps it becomes (:func:`onward.planning.validate.milestone_problems`).

An expansion is a plan revision that only adds (:func:`expanded_plan`): the milestone is
replaced, at its place, by the new steps; every step that depended on the milestone now
depends on all of them (it waits for the milestone to be complete); the version goes up.
New steps get new ids (never one the plan holds or held), so an expansion cannot touch a
done step, and the result is checked like any revision (known and allowed tools, args,
acyclic, artifacts produced upstream, ``max_plan_steps``).

Depth: a plan's own milestones are at depth 1; an expansion may hold milestones of its
own, one level down, up to :data:`MAX_DEPTH`; an expansion at that depth holds concrete
steps only. The depth is read from the decision log (the ``expand`` decision that added a
milestone names its parent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from onward.errors import PlanProblem
from onward.model.state import (
    SETTLED,
    Decision,
    DecisionAction,
    Plan,
    PlanSource,
    PlanStep,
    RunState,
    StepRecord,
    StepStatus,
)
from onward.planning.revise import Revision

MAX_DEPTH = 2
"""How deep milestones nest: a plan's milestones (depth 1) may expand into milestones
(depth 2), which expand into concrete steps only."""


def ready_milestone(state: RunState) -> PlanStep | None:
    """The first milestone, in plan order, that is due: not started (or given back by a
    person's retry) and every step it depends on done or skipped."""
    index = state.plan.index()
    status_of = state.steps.statuses.get
    for i in state.schedulable_positions():
        step = index[i]
        if step.milestone is None:
            continue
        if status_of(step.id) not in (None, StepStatus.PENDING):
            continue
        if all(status_of(d) in SETTLED for d in step.depends_on):
            return step
    return None


def milestone_depth(decisions: Sequence[Decision], step_id: str) -> int:
    """1 for a milestone of the plan as given; one more per expansion it came from."""
    parent = {
        added: d.step_id
        for d in decisions
        if d.action is DecisionAction.EXPAND
        for added in d.added
    }
    depth, at = 1, step_id
    while at in parent and depth <= MAX_DEPTH:
        depth, at = depth + 1, parent[at]
    return depth


def expanded_plan(
    old: Plan,
    records: Mapping[str, StepRecord],
    milestone: PlanStep,
    sent: Sequence[PlanStep],
    *,
    depth: int,
) -> tuple[Plan, Revision, list[PlanProblem]]:
    """``old`` with ``milestone`` replaced by the steps ``sent`` and its dependants waiting
    for all of them; the revision (added, the dependants changed, the milestone removed)
    and the problems of the expansion itself (the caller checks the result as a plan with
    :func:`onward.planning.revise.revision_problems`). ``depth``: the milestone's."""
    problems = _sent_problems(old, records, milestone, sent, depth)
    ids = [s.id for s in sent]
    steps: list[PlanStep] = []
    changed: list[str] = []
    for step in old.steps:
        if step.id == milestone.id:
            steps.extend(sent)
            continue
        if milestone.id in step.depends_on:
            waits = [x for d in step.depends_on for x in (ids if d == milestone.id else [d])]
            step = step.model_copy(update={"depends_on": list(dict.fromkeys(waits))})
            changed.append(step.id)
        steps.append(step)
    plan = Plan(version=old.version + 1, source=PlanSource.LLM, steps=steps)
    n = len(ids)
    removed = {milestone.id: f"expanded into {n} step{'s' if n != 1 else ''}"}
    return plan, Revision(plan.version, tuple(changed), tuple(ids), removed), problems


def _sent_problems(
    old: Plan,
    records: Mapping[str, StepRecord],
    milestone: PlanStep,
    sent: Sequence[PlanStep],
    depth: int,
) -> list[PlanProblem]:
    problems: list[PlanProblem] = []
    if not sent:
        problems.append(
            PlanProblem("steps", "an expansion needs at least one step (or set need_help)")
        )
    known = old.index().id_set
    for i, step in enumerate(sent):
        where = f"steps[{i}] ({step.id})"
        if step.id in known or step.id in records:
            problems.append(
                PlanProblem(
                    f"{where}.id",
                    f"the plan holds (or held) a step {step.id!r}: an expansion only adds "
                    "steps, never changes one; give this step a new id",
                )
            )
        if step.milestone is not None and depth >= MAX_DEPTH:
            problems.append(
                PlanProblem(
                    where,
                    f"milestones nest at most {MAX_DEPTH} deep and this expansion is at depth "
                    f"{depth}: send concrete steps, each with its tool",
                )
            )
    promised = milestone.output
    if promised and not any(s.output == promised for s in sent):
        problems.append(
            PlanProblem(
                "steps",
                f"the milestone promises the artifact {promised!r} to the steps after it: "
                f"one of the steps sent must have output {promised!r}",
            )
        )
    return problems
