"""The LLM planner and replanner: model drafts go through the same normaliser and
validator as declared plans; invalid drafts are sent back with every problem, a
bounded number of times, then planning fails with a clear message.

Hybrid: a draft step may say ``for_each: "inbox/*.txt"``; the rules expand it into one
step per matching file (``{file}``, ``{name}``, ``{stem}`` in its args), so a model
plans "copy every file" in one line and never miscounts the files. Tool names are
normalised (case, dashes, spaces) to the registered ones.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel, Field, model_validator

from onward.errors import ModelPlanningError as ModelPlanningError
from onward.errors import PlanProblem, ToolError
from onward.llm import context
from onward.llm.calls import ask_json
from onward.model.state import Goal, Plan, PlanSource, PlanStep, RunState, StepStatus, Usage
from onward.nodes.deps import NodeDeps
from onward.planning.revise import revision_problems
from onward.planning.validate import plan_problems
from onward.policies import confine
from onward.tools.registry import Registry

TRIES = 3
"""Drafts a model may send before planning fails (the first one included)."""
LISTED = 200
"""Files of the work directory shown to the planner (the first found)."""
NEED_HELP = "NEED_HELP"


class DraftStep(BaseModel):
    id: str = Field(description="unique, short, kebab-case")
    tool: str = Field(description="one of the tools listed")
    args_json: str | None = Field(
        default=None,
        description='the tool\'s args as a JSON object in a string, e.g. {"path": "a.txt"}',
    )
    args: dict[str, Any] | None = Field(
        default=None, description="or the tool's args as an object (instead of args_json)"
    )
    depends_on: list[str] = Field(default_factory=list)
    output: str | None = Field(
        default=None, description="artifact name; later args use ${name.field}"
    )
    description: str = ""
    for_each: str | None = Field(
        default=None,
        description="optional glob relative to the work directory: one step per file, with "
        "{file}, {name} and {stem} in the args replaced",
    )

    @model_validator(mode="before")
    @classmethod
    def _args_either_way(cls, data: Any) -> Any:
        """Models send ``args`` as an object as often as ``args_json`` as a string, and
        either under the other's name: each goes to the field of its type."""
        if isinstance(data, dict):
            data = dict(data)
            if isinstance(data.get("args_json"), dict) and data.get("args") is None:
                data["args"] = data.pop("args_json")
            if isinstance(data.get("args"), str) and data.get("args_json") is None:
                data["args_json"] = data.pop("args")
        return data


class PlanDraft(BaseModel):
    steps: list[DraftStep] = Field(default_factory=list)
    need_help: str | None = Field(
        default=None, description=f"set (and leave steps empty) to ask a person: {NEED_HELP}"
    )


def tool_catalog(registry: Registry, allow_tools: frozenset[str] | None) -> str:
    lines = []
    for spec in registry:
        if allow_tools is not None and spec.name not in allow_tools:
            continue
        schema = spec.args_model.model_json_schema()
        fields = {
            name: prop.get("type", prop.get("anyOf", "any"))
            for name, prop in schema.get("properties", {}).items()
        }
        required = schema.get("required", [])
        lines.append(
            f"- {spec.name} ({spec.side_effect.value}): {spec.description} "
            f"args {json.dumps(fields)} required {required}"
        )
    return "\n".join(lines)


def _normal(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def normalise(
    draft: PlanDraft, registry: Registry, workdir: Path, *, confined: bool = False
) -> tuple[Plan, list[PlanProblem]]:
    """Draft → Plan: tool names mapped to registered ones, args parsed, for_each expanded
    (in a confined run, over files that resolve inside the work directory only)."""
    names = {_normal(s.name): s.name for s in registry}
    problems: list[PlanProblem] = []
    steps: list[PlanStep] = []
    for i, d in enumerate(draft.steps):
        where = f"steps[{i}] ({d.id})"
        try:
            parsed = None if d.args_json is None else json.loads(d.args_json or "{}")
        except (json.JSONDecodeError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else f"{exc}"
            problems.append(PlanProblem(f"{where}.args_json", f"not valid JSON: {why}"))
            continue
        if d.args is not None and parsed is not None and parsed != d.args:
            problems.append(
                PlanProblem(f"{where}.args", "args and args_json differ; send one of them")
            )
            continue
        args = d.args if d.args is not None else ({} if parsed is None else parsed)
        if not isinstance(args, dict):
            problems.append(PlanProblem(f"{where}.args_json", "must be a JSON object"))
            continue
        tool = names.get(_normal(d.tool), d.tool)
        base = PlanStep(
            id=d.id,
            tool=tool,
            args=args,
            depends_on=list(d.depends_on),
            output=d.output,
            description=d.description,
        )
        if not d.for_each:
            steps.append(base)
            continue
        pattern = d.for_each
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            problems.append(
                PlanProblem(f"{where}.for_each", "must be a glob inside the work directory")
            )
            continue
        files = sorted(
            p
            for p in workdir.glob(pattern)
            if p.is_file() and (not confined or confine.inside(workdir, p))
        )
        if not files:
            problems.append(
                PlanProblem(f"{where}.for_each", f"{d.for_each!r} matches no file in {workdir}")
            )
        for n, f in enumerate(files, 1):
            fills = {
                "{file}": f.relative_to(workdir).as_posix(),
                "{name}": f.name,
                "{stem}": f.stem,
            }
            steps.append(
                base.model_copy(
                    update={
                        "id": f"{d.id}-{n}",
                        # Substituted in the parsed values, never in JSON text: a file name
                        # cannot change the shape of the args.
                        "args": _substitute(args, fills),
                        "output": f"{d.output}_{n}" if d.output else None,
                    }
                )
            )
    return Plan(source=PlanSource.LLM, steps=steps), problems


def _substitute(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, repl in names.items():
            value = value.replace(key, repl)
        return value
    if isinstance(value, dict):
        return {k: _substitute(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, names) for v in value]
    return value


def _retry_message(
    messages: list[BaseMessage], draft_text: str, problems: list[PlanProblem] | str
) -> list[BaseMessage]:
    # Problems quote ids, args, globs and paths: data, fenced like the rest of the prompt.
    text = problems if isinstance(problems, str) else "\n".join(f"- {p}" for p in problems)
    return [
        AIMessage(draft_text),
        context.follow_up(
            messages,
            "That plan has problems (fenced below); send the whole plan again, fixed.",
            [("problems of the plan", text)],
        ),
    ]


def plan_with_model(
    deps: NodeDeps, model: BaseChatModel, state: RunState, goal: Goal, thread_id: str
) -> tuple[Plan, Usage]:
    """A validated plan for ``goal``, or PlanningError with the last draft's problems."""
    allow = state.policy.allow_tools
    workdir = Path(state.workdir)
    confined = state.policy.confine_paths
    files = itertools.islice(
        (
            p
            for p in workdir.rglob("*")
            if p.is_file() and (not confined or confine.inside(workdir, p))
        ),
        LISTED,
    )
    listing = "\n".join(sorted(p.relative_to(workdir).as_posix() for p in files))
    task = (
        "Plan this goal as steps of tool calls. Tools:\n"
        + tool_catalog(deps.registry, allow)
        + "\nUse depends_on for order and ${artifact.field} in args to pass results on. "
        "If the goal cannot be planned with these tools, set need_help."
    )
    messages = context.build(
        state.model_copy(update={"goal": goal}),
        task,
        data=[("files in the work directory", listing or "(none)")],
    )

    def check(draft: PlanDraft) -> tuple[Plan, list[PlanProblem]]:
        plan, problems = normalise(draft, deps.registry, workdir, confined=confined)
        if not problems:
            problems = plan_problems(plan, deps.registry, goal, allow_tools=allow)
        if not plan.steps and not problems:
            problems = [PlanProblem("steps", "the plan has no steps")]
        return plan, problems

    r = _drafts(deps, model, messages, check, purpose="plan", thread_id=thread_id)
    if r.failed is not None:
        raise ModelPlanningError(f"planning with the model failed: {r.failed}", r.usage)
    if r.need_help is not None:
        raise ModelPlanningError(
            f"the model could not plan this goal and asks for help: {r.need_help}", r.usage
        )
    if r.plan is None:
        raise ModelPlanningError(
            f"the model's plan was still invalid after {TRIES} tries: {r.problems}. Give a "
            "declared plan (--plan), or rephrase the goal",
            r.usage,
        )
    return r.plan, r.usage


def replan_with_model(
    deps: NodeDeps, model: BaseChatModel, state: RunState, step_id: str, thread_id: str
) -> tuple[Plan | None, str, Usage]:
    """A revision of the steps that are not done, after ``step_id`` failed; or (None, why)
    when the model asks for help or cannot produce a valid revision."""
    rec = state.record(step_id)
    failure = rec.failure
    assert failure is not None
    step = state.plan.step(step_id)
    # Ids, descriptions, args and failure messages are data (plans come from files and
    # models, failures echo tool output): all fenced, none in the task's wording.
    failed = {"id": step.id, "tool": step.tool}
    if step.description:
        failed["description"] = step.description
    evidence = [
        ("failed step", json.dumps(failed, ensure_ascii=False)),
        ("failure of the failed step", f"{failure.failure_class.value}: {failure.message}"),
    ]
    if rec.findings:
        evidence.append(("verifier findings", "\n".join(rec.findings)))
    if failure.hint:
        evidence.append(("hint", failure.hint))
    evidence.append(("args of the failed step", json.dumps(step.args, ensure_ascii=False)))
    task = (
        "The step fenced above as 'failed step' failed (its failure and args are fenced "
        "above too). Send the "
        "revised steps that are not done yet (same ids where a step stays; done steps are "
        "final and must not be sent). Tools:\n"
        + tool_catalog(deps.registry, state.policy.allow_tools)
        + f"\nIf no revision can work, set need_help ({NEED_HELP})."
    )
    messages = context.build(state, task, current=step_id, data=evidence)

    def check(draft: PlanDraft) -> tuple[Plan, list[PlanProblem]]:
        revised, problems = normalise(
            draft, deps.registry, Path(state.workdir), confined=state.policy.confine_paths
        )
        if not revised.steps and not problems:
            problems = [
                PlanProblem("steps", "send the revised steps (at least the one that failed)")
            ]
        done = [s for s in state.plan.steps if state.status_of(s.id) is StepStatus.DONE]
        new_ids = {s.id for s in revised.steps}
        merged = Plan(
            version=state.plan.version + 1,
            source=PlanSource.LLM,
            steps=[*[s for s in done if s.id not in new_ids], *revised.steps],
        )
        if not problems:
            problems = revision_problems(
                state.plan,
                merged,
                state.steps,
                deps.registry,
                goal=state.goal,
                allow_tools=state.policy.allow_tools,
            )
        return merged, problems

    r = _drafts(
        deps, model, messages, check, purpose="replan", thread_id=thread_id, step_id=step_id
    )
    if r.failed is not None:
        return None, f"the model could not be asked ({r.failed})", r.usage
    if r.need_help is not None:
        return None, f"the model asks for help: {r.need_help}", r.usage
    if r.plan is None:
        why = f"the model's revision was still invalid after {TRIES} tries: {r.problems}"
        return None, why, r.usage
    return r.plan, "the model revised the plan", r.usage


@dataclass(frozen=True, slots=True)
class _Drafted:
    plan: Plan | None
    """The first draft that passed ``check``, if any."""
    problems: str
    """What was wrong with the last draft."""
    need_help: str | None
    failed: ToolError | None
    """The model could not be asked (after the call's own retries)."""
    usage: Usage


def _drafts(
    deps: NodeDeps,
    model: BaseChatModel,
    messages: list[BaseMessage],
    check: Callable[[PlanDraft], tuple[Plan, list[PlanProblem]]],
    *,
    purpose: str,
    thread_id: str,
    step_id: str | None = None,
) -> _Drafted:
    """Ask for drafts until one passes ``check``, sending each bad one back with its
    problems, at most TRIES times."""
    total, shown = Usage(), "the model sent no valid plan"
    for _ in range(TRIES):
        try:
            answer = ask_json(
                deps,
                model,
                messages,
                PlanDraft,
                purpose=purpose,
                thread_id=thread_id,
                step_id=step_id,
            )
        except ToolError as exc:
            return _Drafted(None, shown, None, exc, total)
        total = _add(total, answer.usage)
        problems: list[PlanProblem] | str
        if answer.error is not None:
            problems = answer.error
        else:
            draft: PlanDraft = answer.parsed
            if draft.need_help or (draft.steps and draft.steps[0].tool == NEED_HELP):
                return _Drafted(None, shown, draft.need_help or "no plan can work", None, total)
            plan, problems = check(draft)
            if not problems:
                return _Drafted(plan, "", None, None, total)
        shown = problems if isinstance(problems, str) else "; ".join(map(str, problems))
        messages = [*messages, *_retry_message(messages, answer.raw, problems)]
    return _Drafted(None, shown, None, None, total)


def _add(a: Usage, b: Usage) -> Usage:
    from onward.model.state import add_usage

    return add_usage(a, b)
