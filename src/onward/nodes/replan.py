"""replan (deterministic and validation failures): rules first — the tool's ``fix_args``
repairs the args, else its ``fallback`` tool replaces it; without a rule, the model (if
one is configured) revises the plan. A revision is validated like any plan (allowlist and
``max_plan_steps`` included) and bumps the plan version; the decision is logged. A model's
revision is explicit: the steps it does not name are kept as they were, the ones it
removes are skipped with its reason, and the decision (``changed``, ``added``,
``removed``) and the chat message say exactly what changed. Without a revision (no rule,
the model asks for help, refuses, or the budget is used up) the failure becomes
non-convergent and a person decides.

The same node expands a milestone that is due (onward.nodes.expand): the scheduler routes
here for it only when no failure is open, so the node revises for a failure first.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from onward.llm.planner import Replanned, revise_with_model
from onward.model import budget
from onward.model.state import (
    Decision,
    DecisionAction,
    FailureClass,
    Plan,
    PlanEdit,
    PlanStep,
    RunState,
    RunUpdate,
    StepRecord,
    StepStatus,
    Usage,
    transition,
    utcnow,
)
from onward.nodes.deps import NodeDeps, thread_of
from onward.nodes.expand import expand
from onward.observe.kinds import EventKind
from onward.observe.progress import emit
from onward.planning.milestones import ready_milestone
from onward.planning.revise import Revision, revision_problems
from onward.tools.registry import ToolSpec, load_tool_modules

REPLANNABLE = (FailureClass.DETERMINISTIC, FailureClass.VALIDATION)


def has_rule(spec: ToolSpec | None) -> bool:
    return spec is not None and (spec.fix_args is not None or spec.fallback is not None)


def replan(state: RunState, config: RunnableConfig, runtime: Runtime[NodeDeps]) -> RunUpdate:
    deps = runtime.context
    load_tool_modules(state.tool_modules)
    if not _replannable(state):
        milestone = ready_milestone(state)
        if milestone is not None:
            return expand(deps, state, milestone, thread_of(config))
    steps: dict[str, StepRecord] = {}
    edits: list[PlanEdit] = []
    decisions: list[Decision] = []
    plan = state.plan
    for sid, rec in state.steps.items():
        failure = rec.failure
        if rec.status is not StepStatus.FAILED or failure is None:
            continue
        if failure.failure_class not in REPLANNABLE:
            continue
        step = plan.step(sid)
        revised, why = _revise(deps, state, plan, step, rec)
        if revised is None and deps.model is not None:
            if edits:
                continue  # rules first; the model revises what is left on the next pass
            return _model_replan(deps, state, sid, thread_of(config))
        if revised is None:
            gave_up = failure.model_copy(
                update={
                    "failure_class": FailureClass.NON_CONVERGENT,
                    "message": f"{why}: {failure.message} (was {failure.failure_class.value})",
                }
            )
            steps[sid] = rec.model_copy(update={"failure": gave_up})
            continue
        plan = plan.with_step(revised)
        edits.append(PlanEdit(step=revised))
        steps[sid] = transition(rec, StepStatus.PENDING, replans=rec.replans + 1)
        decisions.append(
            Decision(
                step_id=sid,
                action=DecisionAction.REPLAN,
                by="onward-replanner",
                at=utcnow(),
                reason=f"{why} after {failure.failure_class.value} failure: {failure.message}",
            )
        )
    updates: RunUpdate = {"steps": steps, "decisions": decisions}
    if edits:
        emit(
            EventKind.PLAN_REVISED,
            detail={"version": state.plan.version + len(edits)},
            message="; ".join(d.reason for d in decisions),
        )
        updates["plan"] = edits
        version = state.plan.version + len(edits)
        updates["messages"] = [
            AIMessage(
                f"**Plan v{version}** (revised by onward's rules):\n"
                + "\n".join(f"- `{d.step_id}`: {d.reason}" for d in decisions)
            )
        ]
    return updates


def _replannable(state: RunState) -> bool:
    """Whether a failed step waits for a revision (failed deterministic or validation)."""
    for sid in state.steps.open_ids:
        rec = state.steps[sid]
        failure = rec.failure
        if rec.status is StepStatus.FAILED and failure and failure.failure_class in REPLANNABLE:
            return True
    return False


def _model_replan(deps: NodeDeps, state: RunState, sid: str, thread_id: str) -> RunUpdate:
    """The model's revision of the plan, applied; if it asks for help, refuses, or sends
    nothing valid within the budget, the failure becomes non-convergent, for a person."""
    assert deps.model is not None
    rec = state.record(sid)
    failure = rec.failure
    assert failure is not None
    spent = budget.model_budget_spent(state)
    if spent is not None:  # never call a model past its budget: a person decides instead
        r = Replanned(None, None, f"no replanning: {spent}", Usage())
    else:
        r = revise_with_model(deps, deps.model, state, sid, thread_id)
    if r.plan is None or r.revision is None:
        gave_up = failure.model_copy(
            update={
                "failure_class": FailureClass.NON_CONVERGENT,
                "message": f"{r.why}: {failure.message} (was {failure.failure_class.value})",
            }
        )
        return {"steps": {sid: rec.model_copy(update={"failure": gave_up})}, "usage": r.usage}
    revision = r.revision
    after = f"after {failure.failure_class.value} failure of {sid}: {failure.message}"
    decision = revision.decision(
        sid, DecisionAction.REPLAN, "onward-replanner (model)", f"{revision.summary()} ({after})"
    )
    emit(EventKind.PLAN_REVISED, detail={"version": r.plan.version}, message=revision.summary())
    headline = (
        f"**Plan v{revision.version}** (revised by the model after `{sid}` failed: "
        f"{failure.failure_class.value}), {len(r.plan.steps)} steps:"
    )
    return {
        "plan": r.plan,
        "steps": _records_for(state, revision, sid, rec),
        "decisions": [decision],
        "usage": r.usage,
        "messages": [AIMessage(revision.markdown(headline))],
    }


def _records_for(
    state: RunState, revision: Revision, sid: str, rec: StepRecord
) -> dict[str, StepRecord]:
    """Records that make the state agree with a revision: the steps it removed are skipped
    with its reason; the steps it changed or added run (again), one that reuses an old id
    from a fresh start; every other record stays as it was. New steps inherit the failed
    step's replan count, so renaming a step does not reset the replan budget."""
    out: dict[str, StepRecord] = {}
    for old_id, why in revision.removed.items():
        was = state.record(old_id)  # a step that never ran may have no record yet
        note = f"removed by the replanner: {why}"
        if was.status is StepStatus.SKIPPED:
            out[old_id] = was.model_copy(update={"note": note})
        else:
            out[old_id] = transition(was, StepStatus.SKIPPED, note=note)
    for step_id in (*revision.changed, *revision.added):
        old = state.steps.get(step_id)
        if step_id == sid:
            out[sid] = transition(rec, StepStatus.PENDING, replans=rec.replans + 1)
        elif old is None:
            out[step_id] = StepRecord(id=step_id, replans=rec.replans + 1)
        elif old.status in (StepStatus.SKIPPED, StepStatus.FAILED):
            # A revision, not a transition of the old record: the step starts over.
            out[step_id] = StepRecord(
                id=step_id,
                attempts=old.attempts,
                attempt_floor=old.attempts,
                history=old.history,
                replans=max(old.replans, rec.replans) + 1,
            )
    return out


def _revise(
    deps: NodeDeps, state: RunState, plan: Plan, step: PlanStep, rec: StepRecord
) -> tuple[PlanStep | None, str]:
    """The step changed by the tool's rules, or (None, why not)."""
    assert rec.failure is not None
    spec = deps.registry.get(step.tool)
    candidates: list[tuple[PlanStep, str]] = []
    why = "no replan rule applies (the tool declares no fix_args / fallback that helps)"
    if spec is not None and spec.fix_args is not None:
        try:
            fixed = spec.fix_args(dict(step.args), rec.failure)
        except Exception as exc:  # a broken rule must not break the run
            fixed = None
            why = f"{step.tool}.fix_args raised {type(exc).__name__}: {exc}"
        if fixed is not None and fixed != step.args:
            candidates.append((step.model_copy(update={"args": fixed}), f"{step.tool}.fix_args"))
    if spec is not None and spec.fallback and spec.fallback != step.tool:
        candidates.append(
            (
                step.model_copy(update={"tool": spec.fallback}),
                f"fallback {step.tool} → {spec.fallback}",
            )
        )
    for candidate, how in candidates:
        new_plan = plan.with_step(candidate)
        problems = revision_problems(
            plan, new_plan, state.steps, deps.registry, allow_tools=state.policy.allow_tools
        )
        if not problems:
            return candidate, how
        why = f"the revision by {how} was refused: " + "; ".join(map(str, problems))
    return None, why
