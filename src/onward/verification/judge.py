"""judge: a model's review of a step's output after its checks pass, and of the run's outcome
after the goal's acceptance checks pass.

The review is evidence, never the only evidence: it can fail what the checks passed (a
validation failure with its findings, routed like any other), never pass what they failed.
What it sees travels fenced as untrusted data (llm/context.build's ``data`` and ``bodies``,
never in the task's wording): for a step, its id, tool and description, its args as written
and with their artifact references resolved, the output, and the head of each file the
output names (``path``/``dst``, inside the work directory only); for the goal, bounded
excerpts of the run's artifacts and of the files they name.

A judge that gives no verdict says nothing about the output, so it never fails a step:
a call still failing after its own retries (an outage, a refused key), a refusal, a verdict
unreadable twice, no model, or a used-up model budget raise :class:`JudgeUnavailable` with
the reason and the usage of every call made (failed ones included). The caller pauses the
run for a person or passes the output with its review recorded as missing, as the run's
policy says (``judge_failure``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, Field

from onward.errors import DeterministicToolError, JudgeUnavailable, TransientToolError
from onward.llm import context
from onward.llm.calls import ask_json
from onward.model import references
from onward.model.budget import model_budget_spent
from onward.model.state import (
    ArtifactRef,
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
from onward.policies import confine
from onward.store.artifacts import canonical_json

FILE_KEYS = ("path", "dst")
"""Fields of an output that name a file the step wrote (its head is shown to the judge)."""
MAX_ARTIFACTS = 20
"""Artifacts the goal judge is shown excerpts of (the rest are counted)."""


class Verdict(BaseModel):
    ok: bool = Field(description="true if the output does what the step and goal need")
    findings: list[str] = Field(default_factory=list, description="what is wrong, if anything")


def unavailable(deps: NodeDeps, state: RunState) -> str | None:
    """Why no judge can be asked before any call (no model, a used-up model budget)."""
    if deps.model is None:
        return "no model is configured (set OPENAI_API_KEY or pass a model)"
    return model_budget_spent(state)


def goal_hash(state: RunState) -> str:
    """What a person's answer about the goal's review binds: the objective and the run's
    artifacts (by sha256), so an answer is never applied to another outcome."""
    reviewed = {
        "objective": state.goal.objective if state.goal else "",
        "artifacts": {n: r.sha256 for n, r in sorted(state.artifacts.items())},
    }
    return hashlib.sha256(canonical_json(reviewed)).hexdigest()


def judge_goal(deps: NodeDeps, state: RunState, thread_id: str) -> tuple[RunFailure | None, Usage]:
    """The run's outcome against the goal, after the acceptance checks passed: a "not ok"
    fails the run with the findings (it never passes a run whose checks failed)."""
    messages = context.build(
        state,
        "Every step is done and the acceptance checks passed. Judge the outcome against the "
        "goal: does it do what was asked? Look for what the checks cannot see. The run's "
        "artifacts (summaries and excerpts) are fenced above.",
        data=_artifact_excerpts(deps, state),
        key=thread_id,
    )
    verdict, usage = _ask(deps, messages, purpose="judge-goal", thread_id=thread_id)
    if verdict.ok:
        return None, usage
    findings = "; ".join(verdict.findings) or "not acceptable"
    return RunFailure(kind=RunFailureKind.ACCEPTANCE, message=f"judge: {findings}"), usage


def judge_step(
    deps: NodeDeps, task: ExecuteTask, output: Any, thread_id: str
) -> tuple[StepFailure | None, list[str], Usage]:
    """The model's verdict on an output its checks passed: (None, [], usage), or the
    failure and findings to record instead of "done"."""
    assert task.judge_goal is not None
    step = task.step
    state = RunState(goal=task.judge_goal, plan=Plan(steps=[step]), workdir=task.workdir)
    messages = context.build(
        state,
        "Review the output (the artifact above) of the step under review (fenced above, its "
        "args as written and resolved, and the head of any file it wrote). Does it do what "
        "the step and the goal need? Deterministic checks already passed; look for what they "
        "cannot see.",
        current=step.id,
        data=_step_evidence(deps, task, output),
        bodies={step.output or f"step:{step.id}": output},
        key=thread_id,
        status=False,
    )
    verdict, usage = _ask(deps, messages, purpose="judge", thread_id=thread_id, step_id=step.id)
    if verdict.ok:
        return None, [], usage
    findings = [f"judge: {f}" for f in verdict.findings] or ["judge: not acceptable"]
    failure = StepFailure(
        failure_class=FailureClass.VALIDATION,
        message="; ".join(findings),
        error_type="JudgeVerdict",
    )
    return failure, findings, usage


def _ask(
    deps: NodeDeps,
    messages: list[BaseMessage],
    *,
    purpose: str,
    thread_id: str,
    step_id: str | None = None,
) -> tuple[Verdict, Usage]:
    """A verdict, asked once more when the first answer is unreadable (a formatting slip is
    not a finding); :class:`JudgeUnavailable` when there is none."""
    assert deps.model is not None
    usage = Usage()
    why = "unreadable"
    for _ in range(2):
        try:
            answer = ask_json(
                deps,
                deps.model,
                messages,
                Verdict,
                purpose=purpose,
                thread_id=thread_id,
                step_id=step_id,
            )
        except (TransientToolError, DeterministicToolError) as exc:
            spent = getattr(exc, "usage", None)  # what the failed attempts cost
            raise JudgeUnavailable(str(exc), add_usage(usage, spent or Usage())) from exc
        usage = add_usage(usage, answer.usage)
        if refusal := getattr(answer, "refusal", None):
            raise JudgeUnavailable(f"the model refused to review: {refusal}", usage)
        if isinstance(answer.parsed, Verdict):
            return answer.parsed, usage
        why = answer.error or "unreadable"
        messages = [
            *messages,
            context.follow_up(
                messages,
                "Your answer was unreadable (why: fenced below). Answer in the schema.",
                [("why the answer was unreadable", why)],
            ),
        ]
    raise JudgeUnavailable(f"the judge's verdict was unreadable twice: {why}", usage)


def _step_evidence(deps: NodeDeps, task: ExecuteTask, output: Any) -> list[tuple[str, str]]:
    """The step under review (args as written and resolved), then the head of each file
    its output names: all data, fenced by the caller."""
    step = task.step
    shown: dict[str, Any] = {"id": step.id, "tool": step.tool, "args": step.args}
    if references.names(step.args):
        shown["args_resolved"] = _resolved(deps, step.args, task.inputs)
    if step.description:
        shown["description"] = step.description
    parts = [("step under review", json.dumps(shown, ensure_ascii=False, default=str))]
    return parts + _file_heads(task.workdir, output)


def _resolved(deps: NodeDeps, args: Any, inputs: Mapping[str, ArtifactRef]) -> Any:
    """``args`` with each reference replaced by the value it stood for when the step ran."""

    def value_of(name: str) -> Any:
        return deps.artifacts.get(inputs[name])

    try:
        return references.resolve(args, value_of)
    except Exception as exc:  # a reference that cannot be read is shown as such
        return f"(cannot be resolved: {type(exc).__name__}: {exc})"


def _file_heads(workdir: str, value: Any) -> list[tuple[str, str]]:
    """The head of each file ``value`` (an output) names, confined to the work directory
    and cut to the context budget (the context builder cuts it further to fit)."""
    if not isinstance(value, dict):
        return []
    limit = context.context_budget() * 4
    heads = []
    for key in FILE_KEYS:
        name = value.get(key)
        if isinstance(name, str) and name:
            heads.append(("file the step wrote (head)", f"{name}:\n{_head(workdir, name, limit)}"))
    return heads


def _head(workdir: str, name: str, limit: int) -> str:
    try:
        path = confine.confine(Path(workdir), name)
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except DeterministicToolError:
        return "(not shown: the path leaves the run's work directory)"
    except OSError as exc:
        return f"(cannot be read: {type(exc).__name__})"
    text = data[:limit].decode("utf-8", errors="replace")
    return text + (" …[cut]" if len(data) > limit else "")


def _artifact_excerpts(deps: NodeDeps, state: RunState) -> list[tuple[str, str]]:
    """Each artifact's summary and a bounded excerpt of its value (and of the file it
    names), at most :data:`MAX_ARTIFACTS` of them; the context builder shares the room."""
    items = sorted(state.artifacts.items())
    if not items:
        return [("artifacts of the run", "(none)")]
    room = context.context_budget() * 4 // min(len(items), MAX_ARTIFACTS)
    parts = []
    for name, ref in items[:MAX_ARTIFACTS]:
        try:
            value = deps.artifacts.get(ref)
            body = context.cut(json.dumps(value, ensure_ascii=False, default=str), room // 4)
        except Exception as exc:  # a body that cannot be read: its summary still counts
            value, body = None, f"(cannot be read: {type(exc).__name__})"
        text = f"{name}: {ref.summary or f'{ref.size} bytes'}\n{body}"
        parts.append(("artifact of the run (summary and excerpt)", text))
        parts += _file_heads(state.workdir, value)
    if len(items) > MAX_ARTIFACTS:
        parts.append(("artifacts not shown", f"{len(items) - MAX_ARTIFACTS} more"))
    return parts
