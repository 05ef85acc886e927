"""Expanding a milestone, in the replan node (the node that revises plans): a milestone
that is due (its dependencies done) becomes the steps the model sends
(:func:`onward.llm.planner.expand_with_model`), a validated plan revision that only adds,
within ``max_plan_steps`` and the model budget: the plan's version goes up, an ``expand``
decision records what was added (and which waiting steps now wait for the new ones), and
the chat says so. Without an expansion (no model, the budget used up, the model asks for
help or refuses, or its drafts stay invalid) the milestone fails as ``non_convergent`` and
is routed like any such failure: a person decides (``retry`` asks the model again, ``skip``
skips it and what waits for it), or, with no one to ask, the run fails.

Durable in two parts. The node's writes (the new plan, the decision, the usage, the
message) are one commit: a kill after it leaves no milestone to expand, so the model is
never asked again. Before it, each of the model's answers is recorded in the effect
ledger as it arrives (like a tool-calling step's turns; :func:`onward.llm.planner._answer`,
keyed by the milestone, the plan's version and the person's retries): a kill between the
answer and the checkpoint resumes with the recorded answer, checked again the same way,
and its usage counted then, so the model is asked once and the plan expanded once. A kill
while the model answers asks again, under the same key.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage

from onward import faults
from onward.llm.planner import Replanned, expand_with_model
from onward.model.state import (
    DecisionAction,
    FailureClass,
    PlanStep,
    RunState,
    RunUpdate,
    StepFailure,
    StepStatus,
    Usage,
    transition,
    utcnow,
)
from onward.nodes.deps import NodeDeps
from onward.observe.kinds import EventKind
from onward.observe.progress import emit

NO_MODEL = (
    "no model is configured to expand it; run with a model (--model, ONWARD_MODEL or "
    "Onward(model=...))"
)


def expand(deps: NodeDeps, state: RunState, milestone: PlanStep, thread_id: str) -> RunUpdate:
    """The state's writes for the expansion of ``milestone`` (or for its failure)."""
    if deps.model is None:
        r = Replanned(None, None, NO_MODEL, Usage())
    else:
        r = expand_with_model(deps, deps.model, state, milestone, thread_id)
        faults.reach(faults.Fault.AFTER_RECORD, milestone.id)  # recorded, not checkpointed
    if r.plan is None or r.revision is None:
        return _not_expanded(state, milestone, r)
    revision = r.revision
    mid = milestone.id
    decision = revision.decision(
        mid,
        DecisionAction.EXPAND,
        "onward-expander (model)",
        f"milestone {mid} expanded: {revision.summary()}",
    )
    emit(
        EventKind.PLAN_REVISED,
        step_id=mid,
        detail={"version": r.plan.version, "milestone": mid},
        message=decision.reason,
    )
    headline = (
        f"**Plan v{revision.version}** (milestone {_code(mid)} expanded by the model), "
        f"{len(r.plan.steps)} steps:"
    )
    updates: RunUpdate = {
        "plan": r.plan,
        "decisions": [decision],
        "usage": r.usage,
        "messages": [AIMessage(revision.markdown(headline))],
    }
    rec = state.steps.get(mid)
    if rec is not None:  # given back by a person's retry after a failed expansion
        note = f"expanded into {len(revision.added)} steps"
        updates["steps"] = {mid: transition(rec, StepStatus.SKIPPED, note=note)}
    return updates


def _not_expanded(state: RunState, milestone: PlanStep, r: Replanned) -> RunUpdate:
    """The milestone failed as non-convergent, with why (a person decides)."""
    mid = milestone.id
    rec = state.record(mid)
    tries = 1 + sum(
        1 for d in state.decisions if d.step_id == mid and d.action is DecisionAction.RETRY
    )
    failure = StepFailure(
        failure_class=FailureClass.NON_CONVERGENT,
        message=f"the milestone was not expanded: {r.why}",
        error_type="MilestoneNotExpanded",
        signature=f"non_convergent:milestone:{mid}",
        attempt=tries,
        at=utcnow(),
    )
    emit(EventKind.STEP_FAILED, step_id=mid, attempt=tries, message=failure.message)
    failed = transition(rec, StepStatus.FAILED, failure=failure, ended_at=utcnow())
    return {
        "steps": {mid: failed},
        "usage": r.usage,
        "messages": [AIMessage(f"**Milestone {_code(mid)} not expanded.** {r.why}")],
    }


def _code(step_id: str) -> str:
    return "`" + step_id.replace("`", "'") + "`"
