"""judge: a model's second opinion on a step's output, after its deterministic checks pass.

It can fail a step (a validation failure with its findings, routed like any other),
never pass one: it only runs on output the checks already passed. The output is
shown fenced as untrusted data, against the pinned goal header.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from pydantic import BaseModel, Field

from onward.llm import context
from onward.llm.calls import ask_json
from onward.nodes.deps import NodeDeps
from onward.state import (
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
    messages = context.build(
        state,
        f"Review the output of step {step.id!r} ({step.tool}"
        + (f": {step.description}" if step.description else "")
        + "). Does it do what the step and the goal need? Deterministic checks already "
        "passed; look for what they cannot see.",
        current=step.id,
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
        messages = [*messages, HumanMessage(f"Unreadable: {answer.error}. Answer in the schema.")]
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
