"""Plan revisions: what a changed plan must respect, whoever changes it (a person editing
the plan at approval, a person editing a step's args, the replanner).

A revision is refused, with every problem listed, when it breaks the rules any plan
follows (known tools, valid args, acyclic, artifacts produced before use), uses a tool
outside the run's allowlist, changes a step that is already done, or grows the plan past
the run's ``max_plan_steps``.

The replanner's revision is explicit (:func:`revised_plan`): it names the steps it changes
or adds, and the steps it removes, each with a reason. Every step it does not name is kept
as it was; removing a step that a kept step depends on is refused. :class:`Revision` says
what changed, for the decision log and the chat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from onward.errors import PlanProblem
from onward.model.state import (
    Decision,
    DecisionAction,
    Goal,
    Plan,
    PlanSource,
    PlanStep,
    StepRecord,
    StepStatus,
    utcnow,
)
from onward.planning.limits import plan_size_problem
from onward.planning.validate import plan_problems
from onward.tools.registry import Registry

SHOWN = 10
"""Steps named one by one in a revision's summary (the decision holds them all)."""


def revision_problems(
    old: Plan,
    new: Plan,
    records: Mapping[str, StepRecord],
    registry: Registry,
    *,
    goal: Goal | None = None,
    allow_tools: frozenset[str] | None = None,
    max_steps: int | None = None,
    hint: str = "add fewer steps",
) -> list[PlanProblem]:
    """Problems of ``new`` as a revision of ``old``; ``max_steps``: the run's
    ``max_plan_steps`` (a revision may not grow a plan past it; ``hint`` says what to do)."""
    if max_steps is not None and len(new.steps) > len(old.steps):
        too_big = plan_size_problem(len(new.steps), max_steps, hint)
        if too_big is not None:
            return [too_big]
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


@dataclass(frozen=True, slots=True)
class Revision:
    """What a revision changed: step ids, and each removed step's reason."""

    version: int
    changed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    removed: Mapping[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: ``plan v2: s5 changed; 1 step added: s5b; 2 steps removed: s6 (…)``."""
        parts = [
            _ids(self.changed, "changed"),
            _ids(self.added, "added"),
            _ids([f"{k} ({why})" for k, why in self.removed.items()], "removed"),
        ]
        return f"plan v{self.version}: " + ("; ".join(p for p in parts if p) or "no change")

    def decision(self, step_id: str, action: DecisionAction, by: str, reason: str) -> Decision:
        """The decision log's entry for this revision, made now."""
        return Decision(
            step_id=step_id,
            action=action,
            by=by,
            at=utcnow(),
            reason=reason,
            changed=list(self.changed),
            added=list(self.added),
            removed=dict(self.removed),
        )

    def markdown(self, headline: str) -> str:
        """The chat's message: ``headline``, then a list of what changed."""
        lines = [headline]
        for what, ids in (("Changed", self.changed), ("Added", self.added)):
            if ids:
                lines.append(f"- {what}: " + _listed([_code(i) for i in ids]))
        if self.removed:
            lines.append(
                "- Removed: " + _listed([f"{_code(k)} ({why})" for k, why in self.removed.items()])
            )
        return "\n".join(lines)


def _ids(ids: Sequence[str], what: str) -> str:
    if not ids:
        return ""
    if len(ids) == 1 and what == "changed":
        return f"{ids[0]} changed"
    step = "step" if len(ids) == 1 else "steps"
    return f"{len(ids)} {step} {what}: {_listed(ids)}"


def _listed(items: Sequence[str]) -> str:
    more = len(items) - SHOWN
    return ", ".join(items[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def _code(step_id: str) -> str:
    return "`" + step_id.replace("`", "'") + "`"


def revised_plan(
    old: Plan,
    records: Mapping[str, StepRecord],
    sent: Sequence[PlanStep],
    removals: Mapping[str, str],
    failed: str,
) -> tuple[Plan, Revision, list[PlanProblem]]:
    """``old`` with the steps ``sent`` (changed in place: their checks, retry policy and
    judge flag stay; new ones after the step sent before them, else after ``failed``) and
    without ``removals`` (id → reason); every other step kept. The problems are the
    revision's own (what it removes, what it leaves depending on a removed step, a failed
    step left as it was); the caller checks the result as a plan with
    :func:`revision_problems`."""
    by_id = {s.id: s for s in old.steps}
    problems = _removal_problems(by_id, records, sent, removals)
    steps = [s for s in old.steps if s.id not in removals]
    at = next((i for i, s in enumerate(steps) if s.id == failed), len(steps) - 1)
    changed: list[str] = []
    added: list[str] = []
    for step in sent:
        where = next((i for i, s in enumerate(steps) if s.id == step.id), None)
        if where is None:
            at += 1
            steps.insert(at, step)
            added.append(step.id)
            continue
        at = where
        merged = _merged(steps[where], step)
        if merged != steps[where]:
            steps[where] = merged
            changed.append(step.id)
    plan = Plan(version=old.version + 1, source=PlanSource.LLM, steps=steps)
    problems += _dangling(plan, removals)
    if failed not in removals and failed not in changed:
        problems.append(
            PlanProblem(
                f"steps ({failed})",
                f"the failed step {failed!r} is neither changed nor removed, so it would fail "
                "again: send it changed, or list it in remove with a reason",
            )
        )
    return plan, Revision(plan.version, tuple(changed), tuple(added), dict(removals)), problems


def _merged(old: PlanStep, sent: PlanStep) -> PlanStep:
    """``old`` with what a draft step says (tool, args, depends_on, output, a description
    if given); its checks, retry policy and judge flag stay."""
    update = {k: getattr(sent, k) for k in ("tool", "args", "depends_on", "output")}
    if sent.description:
        update["description"] = sent.description
    return old.model_copy(update=update)


def _removal_problems(
    by_id: Mapping[str, PlanStep],
    records: Mapping[str, StepRecord],
    sent: Sequence[PlanStep],
    removals: Mapping[str, str],
) -> list[PlanProblem]:
    problems = []
    sent_ids = {s.id for s in sent}
    for sid, why in removals.items():
        where = f"remove ({sid})"
        rec = records.get(sid)
        if sid not in by_id:
            problems.append(PlanProblem(where, f"the plan has no step {sid!r} to remove"))
        elif rec is not None and rec.status is StepStatus.DONE:
            problems.append(PlanProblem(where, "a done step is final and cannot be removed"))
        elif sid in sent_ids:
            problems.append(PlanProblem(where, "the step is both sent and removed: do one"))
        elif not why.strip():
            problems.append(PlanProblem(where, "say why the step is removed (reason)"))
    return problems


def _dangling(plan: Plan, removals: Mapping[str, str]) -> list[PlanProblem]:
    """Kept steps that depend on a removed one."""
    return [
        PlanProblem(
            f"steps ({step.id}).depends_on",
            f"depends on {dep!r}, which this revision removes: change {step.id!r} "
            f"(send it with other depends_on) or remove it too",
        )
        for step in plan.steps
        for dep in step.depends_on
        if dep in removals
    ]
