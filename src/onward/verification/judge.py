"""judge: a model's second opinion on a step's output, after its deterministic checks pass.

It can fail a step (a validation failure with its findings, routed like any other),
never pass one: it only runs on output the checks already passed. The output, the
step (id, tool, args, description) and the goal are shown fenced as untrusted data.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from onward.llm import context
from onward.llm.calls import ask_json
from onward.model.state import (
    ExecuteTask,
    FailureClass,
    Plan,
    RunFailure,
    RunFailureKind,
    RunState,
    StepFailure,
    Usage,
    add_usage,
)
from onward.nodes.deps import NodeDeps


class Verdict(BaseModel):
    ok: bool = Field(description="true if the output does what the step and goal need")
    findings: list[str] = Field(default_factory=list, description="what is wrong, if anything")


def judge_goal(deps: NodeDeps, state: RunState, thread_id: str) -> tuple[RunFailure | None, Usage]:
    """The run's outcome against the goal, after the acceptance checks passed: a "not ok"
    fails the run with the findings (it never passes a run whose checks failed)."""
    assert deps.model is not None
    summaries = "\n".join(f"{n}: {r.summary}" for n, r in sorted(state.artifacts.items()))
    messages = context.build(
        state,
        "Every step is done and the acceptance checks passed. Judge the outcome against the "
        "goal: does it do what was asked? Look for what the checks cannot see.",
        data=[("artifacts of the run (summaries)", summaries or "(none)")],
    )
    answer = ask_json(
        deps, deps.model, messages, Verdict, purpose="judge-goal", thread_id=thread_id
    )
    verdict: Verdict | None = answer.parsed
    if verdict is None or verdict.ok:
        return None, answer.usage  # an unreadable verdict does not fail a verified run
    findings = "; ".join(verdict.findings) or "not acceptable"
    return RunFailure(kind=RunFailureKind.ACCEPTANCE, message=f"judge: {findings}"), answer.usage


def judge_step(
    deps: NodeDeps, task: ExecuteTask, output: Any, thread_id: str
) -> tuple[StepFailure | None, list[str], Usage]:
    """The model's verdict on an output its checks passed: (None, [], usage), or the
    failure and findings to record instead of "done" (execute applies them before the
    step is saved)."""
    assert deps.model is not None
    assert task.judge_goal is not None
    step = task.step
    state = RunState(goal=task.judge_goal, plan=Plan(steps=[step]), workdir=task.workdir)
    name = step.output or f"step:{step.id}"
    # The step's id, description and args come from a plan, and plans from files and
    # models: they are data, shown fenced like the output, never in the task's wording.
    under_review = {"id": step.id, "tool": step.tool, "args": step.args}
    if step.description:
        under_review["description"] = step.description
    messages = context.build(
        state,
        "Review the output (the artifact above) of the step under review (fenced above). "
        "Does it do what the step and the goal need? Deterministic checks already "
        "passed; look for what they cannot see.",
        current=step.id,
        data=[("step under review", json.dumps(under_review, ensure_ascii=False, default=str))],
        bodies={name: output},
        status=False,
    )
    usage = Usage()
    for _ in range(2):  # a formatting slip is not a finding: ask once more
        answer = ask_json(
            deps,
            deps.model,
            messages,
            Verdict,
            purpose="judge",
            thread_id=thread_id,
            step_id=step.id,
        )
        usage = add_usage(usage, answer.usage)
        if answer.parsed is not None:
            break
        why = answer.error or "unreadable"
        unreadable = context.follow_up(
            messages,
            "Your answer was unreadable (why: fenced below). Answer in the schema.",
            [("why the answer was unreadable", why)],
        )
        messages = [*messages, unreadable]
    verdict: Verdict | None = answer.parsed
    if verdict is None:
        message = f"the judge's verdict was unreadable: {answer.error}"
        failure = StepFailure(
            failure_class=FailureClass.TRANSIENT, message=message, error_type="JudgeVerdict"
        )
        return failure, [], usage
    if verdict.ok:
        return None, [], usage
    findings = [f"judge: {f}" for f in verdict.findings] or ["judge: not acceptable"]
    failure = StepFailure(
        failure_class=FailureClass.VALIDATION,
        message="; ".join(findings),
        error_type="JudgeVerdict",
    )
    return failure, findings, usage
