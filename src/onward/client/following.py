"""Follow-ups: a new goal in a thread whose run finished (a chat's next message).

The new goal is planned like a first one (the template rules, else the model); its steps
join the plan as a new version after the done steps of the earlier goals, which are kept
(their outputs stay artifacts a model planner can refer to). A new step whose id or output
name is taken gets a ``-N`` suffix (N = the goal's number in the thread), its references
renamed with it. Steps of an earlier goal that did not finish are skipped, with why. The
state is then updated *as the plan node*, so the next drive schedules the new steps; at a
past checkpoint (a person edited an earlier message) that update is a fork of the thread
from there; at the thread's first checkpoint (the first message edited) the fork is a new
first input (:func:`restart`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.constants import START

from onward.client.views import config
from onward.errors import NoTemplateError, UsageError
from onward.graph.routes import Node
from onward.model import references
from onward.model.state import (
    Goal,
    Plan,
    RunState,
    RunStatus,
    RunUpdate,
    StepStatus,
    Usage,
    migrate,
    transition,
)
from onward.planning.templates import plan_from_template
from onward.planning.validate import validate_plan

INPUT = "__input__"
"""``update_state``'s node for a new input (LangGraph's own constant is internal)."""

if TYPE_CHECKING:
    from onward.client.facade import Onward


def follow_up(
    ow: Onward, thread_id: str, text: str, *, checkpoint_id: str | None = None
) -> str | None:
    """Put ``text`` as the thread's next goal (planned, not yet run); the drive that
    follows runs it. Returns the checkpoint id the update made (a fork when
    ``checkpoint_id`` is a past one). A goal no planner handles raises NoTemplateError."""
    state, next_ = ow.state_at(thread_id, checkpoint_id)
    if checkpoint_id and next_ == [START]:
        return restart(ow, thread_id, text, checkpoint_id)
    if not state.status.finished and checkpoint_id:
        raise UsageError(
            f"checkpoint {checkpoint_id} of thread {thread_id} is not where a goal finished "
            f"(the run was {state.status.value} there): an edited message forks the thread "
            "from the end of the goal before it, or (the first message) from the thread's "
            "first checkpoint, before its input"
        )
    if not state.status.finished:
        raise UsageError(
            f"run {thread_id} is {state.status.value}: a new goal starts once it finished "
            "(answer its question, or cancel it)"
        )
    text = text.strip()
    if not text:
        raise UsageError("a follow-up needs the text of the next goal")
    turn = 1 + sum(1 for m in state.messages if isinstance(m, HumanMessage))
    goal, new, usage = _plan(ow, thread_id, state, text)
    plan = merged(state, new, turn)
    validate_plan(plan, ow.registry, goal, allow_tools=state.policy.allow_tools)
    left = {
        sid: transition(
            rec, StepStatus.SKIPPED, note=f"left unfinished by an earlier goal; goal {turn} is next"
        )
        for sid, rec in state.steps.items()
        if rec.status not in (StepStatus.DONE, StepStatus.SKIPPED)
    }
    listing = "\n".join(
        f"{i}. {s.id}: {s.tool}" + (f" ({s.description})" if s.description else "")
        for i, s in enumerate(new.steps[:20], 1)
    )
    kept = len(plan.steps) - len(new.steps)
    update: RunUpdate = {
        "goal": goal,
        "plan": plan,
        "status": RunStatus.RUNNING,
        "failure": None,
        "waiting": {k: None for k in state.waiting},
        "messages": [
            HumanMessage(text),
            AIMessage(
                f"Plan v{plan.version} ({new.source}), {len(new.steps)} new steps"
                + (f" after {kept} done" if kept else "")
                + f":\n{listing}"
            ),
        ],
    }
    if left:
        update["steps"] = left
    if usage != Usage():
        update["usage"] = usage
    at = config(thread_id)
    if checkpoint_id:
        at["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
    done = ow.graph.update_state(at, update, as_node=Node.PLAN.value)
    ow.store.set_run_status(thread_id, RunStatus.RUNNING)
    return str(done["configurable"].get("checkpoint_id") or "") or None


def restart(ow: Onward, thread_id: str, text: str, checkpoint_id: str) -> str | None:
    """The first message edited: the thread forks from its first checkpoint (before its
    input) with the run's first request, ``text`` as its goal, planned by the plan node
    like any first goal. The old branch stays in the thread's history."""
    text = text.strip()
    if not text:
        raise UsageError("an edited message needs text (the goal)")
    first = RunState.model_validate(migrate(dict(ow.store.run_request(thread_id)["input"])))
    base = first.goal or Goal(objective=text)
    again = first.model_copy(
        update={
            "goal": Goal(objective=text, constraints=base.constraints, judge=base.judge),
            "plan": Plan(),
            "messages": [HumanMessage(text)],
            "started_at": ow.clock(),
        }
    )
    at = config(thread_id)
    at["configurable"] |= {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""}
    done = ow.graph.update_state(at, again, as_node=INPUT)  # as if it were the first input
    ow.store.set_run_status(thread_id, RunStatus.PLANNING)
    return str(done["configurable"].get("checkpoint_id") or "") or None


def _plan(ow: Onward, thread_id: str, state: RunState, text: str) -> tuple[Goal, Plan, Usage]:
    base = state.goal or Goal(objective=text)
    try:
        goal, plan = plan_from_template(
            text, Path(state.workdir), [], confined=state.policy.confine_paths
        )
        goal = goal.model_copy(update={"constraints": base.constraints, "judge": base.judge})
        return goal, plan, Usage()
    except NoTemplateError:
        if ow.deps.model is None:
            raise
    from onward.llm.planner import plan_with_model

    goal = Goal(objective=text, constraints=base.constraints, judge=base.judge)
    plan, usage = plan_with_model(ow.deps, ow.deps.model, state, goal, thread_id)
    return goal, plan, usage


def merged(state: RunState, new: Plan, turn: int) -> Plan:
    """The earlier goals' done steps, then ``new``'s steps renamed where a name is taken."""
    done = [s for s in state.plan.steps if state.status_of(s.id) is StepStatus.DONE]
    taken_ids = {s.id for s in state.plan.steps} | set(state.steps.ids())
    taken_outputs = {s.output for s in state.plan.steps if s.output} | set(state.artifacts)
    ids = {s.id: _free(s.id, taken_ids, turn) for s in new.steps}
    outputs = {s.output: _free(s.output, taken_outputs, turn) for s in new.steps if s.output}
    steps = [
        s.model_copy(
            update={
                "id": ids[s.id],
                "depends_on": [ids.get(d, d) for d in s.depends_on],
                "output": outputs.get(s.output, s.output) if s.output else None,
                "args": _renamed(s.args, outputs),
            }
        )
        for s in new.steps
    ]
    return Plan(version=state.plan.version + 1, source=new.source, steps=[*done, *steps])


def _free(name: str, taken: set[str], turn: int) -> str:
    if name not in taken:
        return name
    candidate = f"{name}-{turn}"
    while candidate in taken:
        candidate += "x"
    return candidate


def _renamed(args: Any, outputs: dict[str, str]) -> Any:
    if isinstance(args, dict):
        return {k: _renamed(v, outputs) for k, v in args.items()}
    if isinstance(args, list):
        return [_renamed(v, outputs) for v in args]
    ref = references.parse(args)
    if ref is not None and ref[0] in outputs and outputs[ref[0]] != ref[0]:
        return re.sub(r"\$\{" + re.escape(ref[0]), "${" + outputs[ref[0]], str(args), count=1)
    return args
