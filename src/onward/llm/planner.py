"""The LLM planner and replanner: model drafts go through the same normaliser and
validator as declared plans; invalid drafts are sent back with every problem, a
bounded number of times, then planning fails with a clear message. Drafting also stops
when the model refuses (its words are quoted) and, before each further draft, when the
run's token or cost budget would be crossed (what failed calls cost counts too).

Hybrid: a draft step may say ``for_each: "inbox/*.txt"``; the rules expand it into one
step per matching file (``{file}``, ``{name}``, ``{stem}`` in its args), so a model
plans "copy every file" in one line and never miscounts the files. Tool names are
normalised (case, dashes, spaces) to the registered ones. The model sees the work
directory without hidden files and without onward's store
(:mod:`onward.planning.workfiles`); a plan, expanded, may hold at most the policy's
``max_plan_steps``.

A replan is an explicit revision (:func:`revise_with_model`): the model sees every step
that is not done (a bounded listing that says how many it left out), sends the steps it
changes or adds, and lists the steps it removes with a reason; every other step is kept
as it was (:func:`onward.planning.revise.revised_plan`).

A milestone that is due is expanded (:func:`expand_with_model`): the model sees the
milestone and the results of the steps it depends on (fenced, each cut to a share of the
context budget), and sends new steps only; the expansion is checked as a revision
(:func:`onward.planning.milestones.expanded_plan`) and sent back with its problems like a
draft plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel, Field, model_validator

from onward.effects.ledger import EffectStatus, effect_key
from onward.errors import ModelPlanningError as ModelPlanningError
from onward.errors import PlanProblem, ToolError
from onward.llm import context
from onward.llm.calls import Answer, ask_json
from onward.model import budget
from onward.model.state import (
    DecisionAction,
    Goal,
    Plan,
    PlanSource,
    PlanStep,
    RunState,
    StepStatus,
    Usage,
    add_usage,
)
from onward.nodes.deps import NodeDeps
from onward.planning.limits import MODEL_HINT, plan_size_problem
from onward.planning.milestones import MAX_DEPTH, expanded_plan, milestone_depth
from onward.planning.revise import Revision, revised_plan, revision_problems
from onward.planning.validate import plan_problems
from onward.planning.workfiles import WorkFiles, store_dir
from onward.tools.registry import Registry

TRIES = 3
"""Drafts a model may send before planning fails (the first one included)."""
LISTED = 200
"""Files of the work directory shown to the planner (the first in name order)."""
NEED_HELP = "NEED_HELP"
LINE_TOKENS = 300
"""A step's line in the replanner's listing of the steps not done, at most."""


class DraftStep(BaseModel):
    id: str = Field(description="unique, short, kebab-case")
    tool: str = Field(default="", description="one of the tools listed ('' for a milestone)")
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
    milestone: str | None = Field(
        default=None,
        description="instead of tool and args: what is to be done once the steps in "
        "depends_on are done; you will be asked to expand it into steps then",
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


class Removal(BaseModel):
    id: str = Field(description="id of a step that is not done")
    reason: str = Field(description="why the step is no longer needed")


class PlanDraft(BaseModel):
    steps: list[DraftStep] = Field(default_factory=list)
    remove: list[Removal] = Field(
        default_factory=list,
        description="when revising a plan only: steps to remove, each with a reason (steps "
        "neither sent nor removed are kept as they are)",
    )
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
    draft: PlanDraft,
    registry: Registry,
    workdir: Path,
    *,
    confined: bool = False,
    max_steps: int | None = None,
    files: WorkFiles | None = None,
) -> tuple[Plan, list[PlanProblem]]:
    """Draft → Plan: tool names mapped to registered ones, args parsed, for_each expanded
    over the files ``files`` shows (by default: not hidden, inside the work directory in a
    confined run), at most ``max_steps`` steps in all."""
    files = files or WorkFiles(workdir, store=None, confined=confined)
    names = {_normal(s.name): s.name for s in registry}
    problems: list[PlanProblem] = []
    steps: list[PlanStep] = []
    for i, d in enumerate(draft.steps):
        where = f"steps[{i}] ({d.id})"
        base = _base_step(d, where, names, problems)
        if base is None:
            continue
        if not d.for_each:
            steps.append(base)
            continue
        room = None if max_steps is None else max_steps - len(steps)
        steps += _expanded(base, d.for_each, f"{where}.for_each", files, room, problems)
    return Plan(source=PlanSource.LLM, steps=steps), problems


def _base_step(
    d: DraftStep, where: str, names: dict[str, str], problems: list[PlanProblem]
) -> PlanStep | None:
    """The draft step as a plan step (before for_each), or None with its problem added."""
    try:
        parsed = None if d.args_json is None else json.loads(d.args_json or "{}")
    except (json.JSONDecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else f"{exc}"
        problems.append(PlanProblem(f"{where}.args_json", f"not valid JSON: {why}"))
        return None
    if d.args is not None and parsed is not None and parsed != d.args:
        problems.append(PlanProblem(f"{where}.args", "args and args_json differ; send one of them"))
        return None
    args = d.args if d.args is not None else ({} if parsed is None else parsed)
    if not isinstance(args, dict):
        problems.append(PlanProblem(f"{where}.args_json", "must be a JSON object"))
        return None
    return PlanStep(
        id=d.id,
        tool=names.get(_normal(d.tool), d.tool),
        args=args,
        depends_on=list(d.depends_on),
        output=d.output,
        description=d.description,
        milestone=d.milestone,
    )


def _expanded(
    base: PlanStep,
    pattern: str,
    where: str,
    files: WorkFiles,
    room: int | None,
    problems: list[PlanProblem],
) -> list[PlanStep]:
    """One step per file ``pattern`` matches (none, with a problem, when it matches none,
    leaves the work directory, or matches more files than ``room`` steps)."""
    if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
        problems.append(PlanProblem(where, "must be a glob inside the work directory"))
        return []
    found = files.matching(pattern)
    if not found:
        problems.append(PlanProblem(where, f"{pattern!r} matches no file in {files.workdir}"))
    if room is not None and len(found) > room:
        problems.append(
            PlanProblem(
                where,
                f"{pattern!r} matches {len(found):,} files, more steps than the plan has room "
                f"for ({max(room, 0):,} more, max_plan_steps); narrow the glob, or set "
                "need_help to split the goal",
            )
        )
        return []
    out = []
    for n, f in enumerate(found, 1):
        fills = {"{file}": f.relative_to(files.workdir).as_posix(), "{name}": f.name}
        fills["{stem}"] = f.stem
        update = {
            "id": f"{base.id}-{n}",
            # Substituted in the parsed values, never in JSON text: a file name cannot
            # change the shape of the args.
            "args": _substitute(base.args, fills),
            "output": f"{base.output}_{n}" if base.output else None,
            "milestone": _substitute(base.milestone, fills),
        }
        out.append(base.model_copy(update=update))
    return out


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
    messages: list[BaseMessage], draft_text: str, problems: list[PlanProblem] | str, again: str
) -> list[BaseMessage]:
    # Problems quote ids, args, globs and paths: data, fenced like the rest of the prompt.
    text = problems if isinstance(problems, str) else "\n".join(f"- {p}" for p in problems)
    return [
        AIMessage(draft_text),
        context.follow_up(
            messages,
            f"That {again} has problems (fenced below); send the {again} again, fixed.",
            [("problems of the draft", text)],
        ),
    ]


def _files_listing(files: WorkFiles) -> context.Listing:
    names, more = files.listing(LISTED)
    if more:
        names.append(f"[more files not listed: only the first {LISTED} are]")
    return context.Listing(names or ["(none)"], unit="files")


def plan_with_model(
    deps: NodeDeps, model: BaseChatModel, state: RunState, goal: Goal, thread_id: str
) -> tuple[Plan, Usage]:
    """A validated plan for ``goal``, or ModelPlanningError saying why not (the model's
    problems, its refusal, its request for help, the budget), with what the calls cost."""
    allow = state.policy.allow_tools
    limit = state.policy.max_plan_steps
    files = WorkFiles(
        Path(state.workdir), store=store_dir(deps.artifacts), confined=state.policy.confine_paths
    )
    # The rules first, the catalog last: a prompt cut to its budget loses tools, not rules.
    task = (
        "Plan this goal as steps of tool calls. Use depends_on for order and "
        "${artifact.field} in args to pass results on; for_each for one step per file. A plan "
        f"holds at most {limit} steps (for_each expanded). A step whose details depend on "
        "what earlier steps find may be a milestone (milestone text, depends_on, no tool): "
        "you expand it when they are done. Leave remove empty. If the goal "
        "cannot be planned with the tools below, set need_help. Tools:\n"
        + tool_catalog(deps.registry, allow)
    )
    messages = context.build(
        state.model_copy(update={"goal": goal}),
        task,
        data=[("files in the work directory", _files_listing(files))],
        key=thread_id,
    )

    def check(draft: PlanDraft) -> tuple[Plan, list[PlanProblem]]:
        plan, problems = normalise(
            draft, deps.registry, files.workdir, max_steps=limit, files=files
        )
        too_big = plan_size_problem(len(plan.steps), limit, MODEL_HINT)
        if too_big is not None:
            problems.append(too_big)
        if draft.remove:
            problems.append(PlanProblem("remove", "a new plan removes nothing: leave it empty"))
        if not problems:
            problems = plan_problems(plan, deps.registry, goal, allow_tools=allow)
        if not plan.steps and not problems:
            problems = [PlanProblem("steps", "the plan has no steps")]
        return plan, problems

    r = _drafts(deps, model, messages, check, _Ask("plan", "plan", thread_id, state))
    if r.plan is not None:
        return r.plan, r.usage
    raise ModelPlanningError(_failure(_PLANNING_FAILURES, r), r.usage)


_PLANNING_FAILURES = {
    "failed": "planning with the model failed: {text}",
    "need_help": "the model could not plan this goal and asks for help: {text}",
    "refused": "the model refused: {text}",
    "budget": "planning stopped after {drafts} draft(s): {text}",
    None: f"the model's plan was still invalid after {TRIES} tries: {{text}}. Give a "
    "declared plan (--plan), or rephrase the goal",
}
_REPLAN_FAILURES = {
    "failed": "the model could not be asked ({text})",
    "need_help": "the model asks for help: {text}",
    "refused": "the model refused: {text}",
    "budget": "no further replanning: {text}",
    None: f"the model's revision was still invalid after {TRIES} tries: {{text}}",
}
"""Why drafting ended without a plan (by ``_Drafted.stop``), for planning and replanning."""


def _failure(table: dict[str | None, str], r: _Drafted) -> str:
    return table.get(r.stop, table[None]).format(text=r.text, drafts=r.drafts)


@dataclass(frozen=True, slots=True)
class Replanned:
    """What the replanner made of a failed step: a revised plan and what it changed, or
    (plan None) why not; ``why`` is the decision's wording either way."""

    plan: Plan | None
    revision: Revision | None
    why: str
    usage: Usage


def _replanned(r: _Drafted, last: list[Revision], failures: dict[str | None, str]) -> Replanned:
    """The drafting's outcome: the plan that passed with the revision checked last (the
    draft that passed was the last one checked), or why drafting ended without one."""
    if r.plan is not None:
        return Replanned(r.plan, last[-1], last[-1].summary(), r.usage)
    return Replanned(None, None, _failure(failures, r), r.usage)


def replan_with_model(
    deps: NodeDeps, model: BaseChatModel, state: RunState, step_id: str, thread_id: str
) -> tuple[Plan | None, str, Usage]:
    """:func:`revise_with_model` as (plan or None, why, usage)."""
    r = revise_with_model(deps, model, state, step_id, thread_id)
    return r.plan, r.why, r.usage


def revise_with_model(
    deps: NodeDeps, model: BaseChatModel, state: RunState, step_id: str, thread_id: str
) -> Replanned:
    """An explicit revision of the plan after ``step_id`` failed: the steps the model
    changes or adds, the steps it removes (with reasons), every other step kept; or why
    there is none (help asked, refusal, budget, still invalid)."""
    messages = context.build(
        state,
        _REPLAN_TASK.format(
            tools=tool_catalog(deps.registry, state.policy.allow_tools),
            limit=state.policy.max_plan_steps,
            help=NEED_HELP,
        ),
        current=step_id,
        data=[*_evidence(state, step_id), ("steps not done", _open_steps(state))],
        key=thread_id,
    )
    limit = state.policy.max_plan_steps
    files = WorkFiles(
        Path(state.workdir), store=store_dir(deps.artifacts), confined=state.policy.confine_paths
    )
    last: list[Revision] = []  # the revision of the draft checked last

    def check(draft: PlanDraft) -> tuple[Plan, list[PlanProblem]]:
        sent, problems = normalise(
            draft, deps.registry, files.workdir, max_steps=limit, files=files
        )
        removals = {r.id: r.reason for r in draft.remove}
        if len(removals) < len(draft.remove):
            problems.append(PlanProblem("remove", "a step is listed twice; list it once"))
        merged, revision, own = revised_plan(state.plan, state.steps, sent.steps, removals, step_id)
        problems += own
        if not problems:
            problems = _merged_problems(deps, state, merged, limit)
        last.append(revision)
        return merged, problems

    r = _drafts(deps, model, messages, check, _Ask("replan", "revision", thread_id, state, step_id))
    return _replanned(r, last, _REPLAN_FAILURES)


_REPLAN_TASK = (
    "The step fenced above as 'failed step' failed (its failure and args are fenced above "
    "too). The steps that are not done yet are fenced above as 'steps not done' (id, tool, "
    "args, depends_on, output; the listing says how many it left out when it is cut). "
    "Send a revision of the plan: in steps, only the steps you change (same id, with all "
    "their fields) and the new steps you add; in remove, each step to remove with its "
    "reason. Every step you neither send nor remove is kept as it is, listed or not. The "
    "failed step must be changed or removed; a step that others depend on can be removed "
    "only if they are changed or removed too. Done steps are final: never send or remove "
    "them. The plan may hold at most {limit} steps. If no revision can work, set need_help "
    "({help}). Tools:\n{tools}"
)


def expand_with_model(
    deps: NodeDeps, model: BaseChatModel, state: RunState, milestone: PlanStep, thread_id: str
) -> Replanned:
    """The model's expansion of ``milestone`` (due: its dependencies are done) into
    concrete steps, as a validated plan revision that only adds
    (:func:`onward.planning.milestones.expanded_plan`); or why there is none (help asked,
    refusal, budget, still invalid after :data:`TRIES` drafts)."""
    depth = milestone_depth(state.decisions, milestone.id)
    limit = state.policy.max_plan_steps
    room = max(limit - len(state.plan.steps) + 1, 0)
    nested = (
        "Your steps may include milestones of their own (a milestone text, depends_on, no "
        "tool), expanded when they are due."
        if depth < MAX_DEPTH
        else "Send concrete steps only (each with its tool): no milestones at this depth."
    )
    messages = context.build(
        state,
        _EXPAND_TASK.format(
            tools=tool_catalog(deps.registry, state.policy.allow_tools),
            limit=limit,
            room=room,
            nested=nested,
            help=NEED_HELP,
        ),
        current=milestone.id,
        data=[("milestone", _milestone_text(milestone)), *_results(deps, state, milestone)],
        key=thread_id,
    )
    files = WorkFiles(
        Path(state.workdir), store=store_dir(deps.artifacts), confined=state.policy.confine_paths
    )
    last: list[Revision] = []

    def check(draft: PlanDraft) -> tuple[Plan, list[PlanProblem]]:
        sent, problems = normalise(draft, deps.registry, files.workdir, max_steps=room, files=files)
        if draft.remove:
            problems.append(
                PlanProblem("remove", "an expansion only adds steps: leave remove empty")
            )
        merged, revision, own = expanded_plan(
            state.plan, state.steps, milestone, sent.steps, depth=depth
        )
        problems += own
        if not problems:
            problems = _merged_problems(deps, state, merged, limit)
        last.append(revision)
        return merged, problems

    tries = sum(
        1 for d in state.decisions if d.step_id == milestone.id and d.action is DecisionAction.RETRY
    )
    record = f"expand:v{state.plan.version}:try{tries}"
    ask = _Ask("expand", "expansion", thread_id, state, milestone.id, record=record)
    r = _drafts(deps, model, messages, check, ask)
    return _replanned(r, last, _EXPAND_FAILURES)


_EXPAND_TASK = (
    "The milestone fenced above as 'milestone' is due: the steps it depends on are done, "
    "and their results are fenced above. Expand it: in steps, send the new steps that do "
    "what it says, each with a new id, its tool and args. They may depend on done steps "
    "and on each other, and pass results on with ${{artifact.field}}; for_each makes one "
    "step per file. The steps that waited for the milestone will wait for all of yours. If "
    "the milestone names an output, one of your steps must produce it. Never send or "
    "remove a step the plan already has; leave remove empty. {nested} The plan may hold at "
    "most {limit} steps, so send at most {room}. If it cannot be done with the tools "
    "below, set need_help ({help}). Tools:\n{tools}"
)
_EXPAND_FAILURES = {
    "failed": "the model could not be asked ({text})",
    "need_help": "the model asks for help: {text}",
    "refused": "the model refused: {text}",
    "budget": "no expansion: {text}",
    None: f"the model's expansion was still invalid after {TRIES} tries: {{text}}",
}
RESULTS = 20
"""Results of the milestone's dependencies shown to the model (the first, in its order)."""


def _milestone_text(milestone: PlanStep) -> str:
    item: dict[str, Any] = {"id": milestone.id, "milestone": milestone.milestone}
    item["depends_on"] = milestone.depends_on
    if milestone.output:
        item["output"] = milestone.output
    return json.dumps(item, ensure_ascii=False)


def _results(
    deps: NodeDeps, state: RunState, milestone: PlanStep
) -> list[tuple[str, context.Data]]:
    """The outputs of the steps the milestone depends on, each cut to a share of the
    context budget (``context.build`` cuts them again to what is left): data, fenced."""
    share = max(context.context_budget() // 4, context.MIN_DATA)
    out: list[tuple[str, context.Data]] = []
    for dep in milestone.depends_on[:RESULTS]:
        rec = state.steps.get(dep)
        ref = rec.output if rec is not None else None
        if ref is None:
            text = f"step {dep}: no output ({state.status_of(dep).value})"
        else:
            try:
                body = json.dumps(deps.artifacts.get(ref), ensure_ascii=False, default=str)
            except Exception as exc:  # a damaged artifact is shown as such, never raised
                body = f"(could not be read: {type(exc).__name__})"
            text = f"step {dep}, output {ref.name}: " + context.cut(body, share)
        out.append(("result of a step the milestone depends on", text))
    if len(milestone.depends_on) > RESULTS:
        more = len(milestone.depends_on) - RESULTS
        out.append(("results not shown", f"{more} more dependencies' results not shown"))
    return out


def _evidence(state: RunState, step_id: str) -> list[tuple[str, context.Data]]:
    """What the replanner is told of the failed step: fenced, never in the task's wording
    (ids, descriptions and args come from plans; failures echo tool output)."""
    rec = state.record(step_id)
    failure = rec.failure
    assert failure is not None
    step = state.plan.step(step_id)
    failed = {"id": step.id, "tool": step.tool}
    if step.description:
        failed["description"] = step.description
    evidence: list[tuple[str, context.Data]] = [
        ("failed step", json.dumps(failed, ensure_ascii=False)),
        ("failure of the failed step", f"{failure.failure_class.value}: {failure.message}"),
    ]
    if rec.findings:
        evidence.append(("verifier findings", "\n".join(rec.findings)))
    if failure.hint:
        evidence.append(("hint", failure.hint))
    evidence.append(("args of the failed step", json.dumps(step.args, ensure_ascii=False)))
    return evidence


def _open_steps(state: RunState) -> context.Listing:
    """One line per step that is not done (compact JSON), in plan order; cut by
    :func:`onward.llm.context.build` by whole lines, saying how many it left out."""
    lines = []
    for step in state.plan.steps:
        status = state.status_of(step.id)
        if status is StepStatus.DONE:
            continue
        item: dict[str, Any] = {"id": step.id, "tool": step.tool, "args": step.args}
        if step.depends_on:
            item["depends_on"] = step.depends_on
        if step.output:
            item["output"] = step.output
        if status is not StepStatus.PENDING:
            item["status"] = status.value
        lines.append(context.cut(json.dumps(item, ensure_ascii=False, default=str), LINE_TOKENS))
    return context.Listing(lines, unit="steps", left_out=": they are kept as they are")


@dataclass(frozen=True, slots=True)
class _Ask:
    """One drafting conversation: its purpose (for the log), what a draft is called in
    the retry text, and the run whose budget it spends."""

    purpose: str
    draft: str
    thread_id: str
    state: RunState
    step_id: str | None = None
    record: str | None = None
    """Set for an expansion: each draft's answer is recorded in the effect ledger under
    this and its index (:func:`_answer`), so a resumed run replays it, never asks again."""


@dataclass(frozen=True, slots=True)
class _Drafted:
    plan: Plan | None
    """The first draft that passed ``check``, if any."""
    usage: Usage
    stop: str = ""
    """Why there is no plan: failed (the model could not be asked), need_help, refused,
    budget (used up before a further draft), invalid (after TRIES drafts)."""
    text: str = ""
    """The detail of ``stop``: the error, the model's words, the budget, the problems."""
    drafts: int = 0
    """Drafts asked for."""


def _drafts(
    deps: NodeDeps,
    model: BaseChatModel,
    messages: list[BaseMessage],
    check: Callable[[PlanDraft], tuple[Plan, list[PlanProblem]]],
    ask: _Ask,
) -> _Drafted:
    """Ask for drafts until one passes ``check``, sending each bad one back with its
    problems, at most TRIES times; stop early when the model cannot be asked, refuses or
    asks for help, or when the run's budget with what the drafts spent is used up."""
    total, shown = Usage(), "the model sent no valid plan"
    for n in range(TRIES):
        spent = budget.model_budget_spent(
            ask.state.model_copy(update={"usage": add_usage(ask.state.usage, total)})
        )
        if spent is not None:
            return _Drafted(None, total, "budget", spent, n)
        try:
            answer = _answer(deps, model, messages, ask, n)
        except ToolError as exc:
            total = add_usage(total, getattr(exc, "usage", None) or Usage())
            return _Drafted(None, total, "failed", str(exc), n + 1)
        total = add_usage(total, answer.usage)
        refusal = getattr(answer, "refusal", None)
        if refusal:
            return _Drafted(None, total, "refused", str(refusal), n + 1)
        problems: list[PlanProblem] | str
        if answer.error is not None:
            problems = answer.error
        else:
            draft: PlanDraft = answer.parsed
            if draft.need_help or (draft.steps and draft.steps[0].tool == NEED_HELP):
                why = draft.need_help or "no plan can work"
                return _Drafted(None, total, "need_help", why, n + 1)
            plan, problems = check(draft)
            if not problems:
                return _Drafted(plan, total, drafts=n + 1)
        shown = problems if isinstance(problems, str) else "; ".join(map(str, problems))
        messages = [*messages, *_retry_message(messages, answer.raw, problems, ask.draft)]
    return _Drafted(None, total, "invalid", shown, TRIES)


ANSWER = "planner.answer"
"""The ledger's ``tool`` of a recorded draft (a milestone's expansion)."""


def _answer(
    deps: NodeDeps, model: BaseChatModel, messages: list[BaseMessage], ask: _Ask, n: int
) -> Answer:
    """Draft ``n``'s answer: asked (``ask_json``), or, for a recorded conversation,
    replayed from the effect ledger when an execution killed before its checkpoint asked
    it already (a model answers differently the second time). A draft killed while the
    model answered is asked again under the same key."""
    ledger = deps.ledger
    if ask.record is None or ledger is None:
        return _asked(deps, model, messages, ask)
    step_id = ask.step_id or "plan"
    key = effect_key(ask.thread_id, step_id, [ask.record, n])
    existing = ledger.claim(
        key,
        thread_id=ask.thread_id,
        step_id=step_id,
        tool=ANSWER,
        args={"conversation": ask.record, "draft": n},
        compensable=False,
    )
    if existing is not None and existing.status is EffectStatus.COMPLETED:
        return _replayed(existing.result)
    if existing is not None:
        ledger.again(key)
    answer = _asked(deps, model, messages, ask)
    parsed = answer.parsed.model_dump(mode="json") if answer.parsed is not None else None
    record = {
        "parsed": parsed,
        "error": answer.error,
        "usage": answer.usage.model_dump(mode="json"),
        "raw": answer.raw,
        "refusal": answer.refusal,
    }
    ledger.complete(key, record)
    return answer


def _asked(deps: NodeDeps, model: BaseChatModel, messages: list[BaseMessage], ask: _Ask) -> Answer:
    return ask_json(
        deps,
        model,
        messages,
        PlanDraft,
        purpose=ask.purpose,
        thread_id=ask.thread_id,
        step_id=ask.step_id,
    )


def _replayed(record: dict[str, Any]) -> Answer:
    """A recorded answer; its usage counts now (the execution that asked it never reached
    its checkpoint, so the run's usage does not hold it)."""
    parsed = record.get("parsed")
    return Answer(
        parsed=PlanDraft.model_validate(parsed) if parsed is not None else None,
        error=record.get("error"),
        usage=Usage.model_validate(record.get("usage") or {}),
        raw=record.get("raw") or "",
        refusal=record.get("refusal"),
    )


def _merged_problems(
    deps: NodeDeps, state: RunState, merged: Plan, limit: int
) -> list[PlanProblem]:
    """What is wrong with a revised or expanded plan as a whole (the run's tools, goal,
    allowlist and size limit), once the draft's own problems are none."""
    return revision_problems(
        state.plan,
        merged,
        state.steps,
        deps.registry,
        goal=state.goal,
        allow_tools=state.policy.allow_tools,
        max_steps=limit,
        hint=MODEL_HINT,
    )
