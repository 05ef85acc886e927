"""Approvals: which steps need a person, what they are asked, and how answers are read.

The question is langchain's human-in-the-loop batched shape, which agent-chat-ui
renders as approve / edit / reject buttons::

    {"action_requests": [{"name": TOOL, "args": ARGS, "description": TEXT}],
     "review_configs": [{"action_name": TOOL, "allowed_decisions": [...]}],
     "onward": {kind, step_id, args_hash, asked_at, remind_at, expire_at, ...}}

Every question of one wave (parallel steps awaiting approval together, or the wave's
escalations) is ONE interrupt with N action requests and N review configs;
``onward.questions`` then holds each one's metadata, in the same order.

Answers: ``{"decisions": [{"type": "approve"} | {"type": "edit", "edited_action":
{"name", "args"}} | {"type": "reject", "message"} | {"type": "respond", "message"}]}``
with one decision per action request, in order (what agent-chat-ui sends), the older
HumanResponse list (``accept | edit | response | ignore``), or for escalations onward's
own ``retry | skip | done (with result) | abort``. onward's extension ``"targets": [step
id, ...]`` answers only some questions of a batch (the CLI's ``--step``); the others stay
asked.

An approval is bound to :func:`args_hash`: the tool, the step's args exactly as
written, and the sha256 of every input artifact they reference. Execute recomputes
it and refuses to run anything else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from onward.errors import AnswerError, UsageError
from onward.model import references
from onward.model.state import (
    ApproveTask,
    ArtifactRef,
    Budget,
    Plan,
    PlanSource,
    PlanStep,
    StepRecord,
    WaitKind,
)
from onward.planning.validate import step_problems
from onward.policies.run import RunPolicy
from onward.store.artifacts import canonical_json
from onward.tools.registry import Registry, ToolSpec


class AnswerType(StrEnum):
    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    RESPOND = "respond"
    RETRY = "retry"
    SKIP = "skip"
    DONE = "done"
    ABORT = "abort"


ALLOWED: dict[WaitKind, tuple[AnswerType, ...]] = {
    WaitKind.APPROVAL: (AnswerType.APPROVE, AnswerType.EDIT, AnswerType.REJECT, AnswerType.RESPOND),
    WaitKind.PLAN: (AnswerType.APPROVE, AnswerType.EDIT, AnswerType.REJECT, AnswerType.RESPOND),
    # For escalations approve = run it again, edit = again with these args, reject = skip.
    WaitKind.ESCALATION: (
        AnswerType.APPROVE,
        AnswerType.EDIT,
        AnswerType.REJECT,
        AnswerType.RETRY,
        AnswerType.SKIP,
        AnswerType.DONE,
        AnswerType.ABORT,
    ),
    # approve = double what ran out; edit = these limits; reject = abort the run.
    WaitKind.BUDGET: (AnswerType.APPROVE, AnswerType.EDIT, AnswerType.REJECT),
    # approve = pass without the review; reject = fail the output; retry = review again.
    WaitKind.JUDGE: (
        AnswerType.RETRY,
        AnswerType.APPROVE,
        AnswerType.REJECT,
        AnswerType.SKIP,
        AnswerType.ABORT,
    ),
}
_SHOWN = ("approve", "edit", "reject", "respond")  # what chat frontends know how to render
_LEGACY = {"accept": "approve", "ignore": "reject", "response": "respond", "edit": "edit"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """One person's answer to one question."""

    type: AnswerType
    message: str = ""
    """Rejection reason, feedback, or comment."""
    name: str | None = None
    """Edited tool name (edit)."""
    args: dict[str, Any] | None = None
    """Edited args (edit)."""
    result: Any = None
    """The effect's result (done, escalations only)."""
    by: str | None = None


def args_hash(tool: str, args: dict[str, Any], inputs: dict[str, ArtifactRef]) -> str:
    """What an approval binds: tool, args as written, and the inputs they read (by sha256)."""
    used = {n: inputs[n].sha256 for n in sorted(references.names(args)) if n in inputs}
    return hashlib.sha256(canonical_json({"tool": tool, "args": args, "inputs": used})).hexdigest()


SHOWN_CHARS = 200
"""Characters of one resolved value shown to a person (the rest is cut, and says so)."""
SHOWN_REFS = 20
"""References of one step shown resolved (the rest are counted)."""


def resolved_args(
    step: PlanStep, inputs: Mapping[str, ArtifactRef], read: Callable[[ArtifactRef], Any]
) -> list[dict[str, str]]:
    """What each reference in the step's args stands for, as it would run now: ``{"arg":
    where in the args, "from": the reference, "value": the value as bounded JSON text}``.
    A value that cannot be read says why instead (the step would fail the same way)."""
    shown = []
    for where, name, path in list(references.walk(step.args))[:SHOWN_REFS]:
        ref = name + ("" if not path or path.startswith("[") else ".") + path
        try:
            if name not in inputs:
                raise KeyError(f"artifact {name!r} is not produced yet")
            value = references.resolve("${" + ref + "}", lambda n: read(inputs[n]))
            text = json.dumps(value, ensure_ascii=False, default=str)
        except Exception as exc:
            text = f"(cannot be read: {exc})"
        if len(text) > SHOWN_CHARS:
            text = f"{text[:SHOWN_CHARS]}… ({len(text)} characters in all)"
        shown.append({"arg": where.removeprefix("args."), "from": ref, "value": text})
    return shown


def resolved_text(shown: Sequence[Mapping[str, str]], step: PlanStep) -> str:
    """The lines a person reads: ``body = "ship it" (from q.quote)``."""
    lines = [f"  {r['arg']} = {r['value']} (from {r['from']})" for r in shown]
    more = len(list(references.walk(step.args))) - len(shown)
    if more > 0:
        lines.append(f"  … and {more} more references")
    return "With its references resolved, it runs with:\n" + "\n".join(lines)


def step_hash(step: PlanStep, inputs: dict[str, ArtifactRef]) -> str:
    return args_hash(step.tool, step.args, inputs)


def plan_hash(plan: Plan) -> str:
    """What a plan approval binds: the plan's shape (steps, their tools and order). Args
    are bound per step where it matters (approvals of risky steps), so an approved edit of
    one step's args does not put the whole plan to a person again; a different tool or a
    different set of steps does."""
    shape = [[s.id, s.tool, sorted(s.depends_on), s.output] for s in plan.steps]
    return hashlib.sha256(canonical_json(shape)).hexdigest()


def needs_approval(step: PlanStep, spec: ToolSpec | None, policy: RunPolicy) -> bool:
    """Unsafe or dangerously tagged tools, plus what the run's policy adds, minus what the
    person starting the run approved in advance (``auto_approve``)."""
    if step.tool in policy.auto_approve:
        return False
    if policy.approve_all or step.tool in policy.approve_tools:
        return True
    return spec is not None and spec.requires_approval


MAX_BATCH = 256
"""Most decisions one answer may carry (a wave never asks more: max_concurrency is lower)."""


def batch_request(
    tasks: list[ApproveTask],
    thread_id: str,
    errors: Mapping[int, list[str]] | None = None,
    general: list[str] | None = None,
    resolved: Sequence[list[dict[str, str]]] | None = None,
) -> dict[str, Any]:
    """The interrupt payload for the questions of one wave: one action request and one
    review config per question, in order (a single question keeps its flat metadata).
    ``resolved``: per question, its references' values (:func:`resolved_args`)."""
    errors = errors or {}
    parts = [
        request(
            t,
            thread_id,
            [*(general or []), *errors.get(i, [])] or None,
            resolved[i] if resolved else None,
        )
        for i, t in enumerate(tasks)
    ]
    if len(parts) == 1:
        return parts[0]
    metas = [p["onward"] for p in parts]
    return {
        "action_requests": [p["action_requests"][0] for p in parts],
        "review_configs": [p["review_configs"][0] for p in parts],
        "onward": {
            "kind": metas[0]["kind"],
            "thread_id": thread_id,
            "step_ids": [m["step_id"] for m in metas],
            "questions": metas,
        },
    }


def asked_of(task: ApproveTask) -> tuple[str, WaitKind]:
    """What :func:`parse_answers` needs of a question: its target (step id or ``plan``)
    and its kind."""
    return (task.step.id if task.step else "plan", task.kind)


def parse_answers(raw: Any, questions: list[tuple[str, WaitKind]]) -> list[tuple[int, Answer]]:
    """An answer to a batch of questions → (index of the question, its answer) pairs.

    Unkeyed, the decisions answer every question in order (so there must be exactly one
    per question); with ``targets`` they answer the named steps only. Anything else is an
    :class:`AnswerError` naming what was asked."""
    decisions, by, targets = _shape(raw)
    asked = [target for target, _ in questions]
    if not isinstance(decisions, list) or not all(isinstance(d, dict) for d in decisions):
        raise AnswerError('"decisions" must be a list of decision objects')
    if len(decisions) > MAX_BATCH:
        raise AnswerError(f"at most {MAX_BATCH} decisions per answer; got {len(decisions)}")
    if targets is None:
        n = len(questions)
        if len(decisions) != n:
            what = (
                "one action: send exactly one decision"
                if n == 1
                else f"{n} actions ({', '.join(asked)}): send {n} decisions "
                'in that order, or name the ones you answer with "targets"'
            )
            raise AnswerError(f"this question asks about {what} (got {len(decisions)})")
        indexes = list(range(n))
    else:
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise AnswerError('"targets" must be a list of step ids')
        if len(set(targets)) != len(targets) or len(targets) != len(decisions):
            raise AnswerError('"targets" names each answered step once, one per decision')
        unknown = [t for t in targets if t not in asked]
        if unknown:
            raise AnswerError(
                f"not asked: {', '.join(map(repr, unknown))}; this question asks about "
                + ", ".join(asked)
            )
        indexes = [asked.index(t) for t in targets]
    return [
        (i, parse_answer({"decisions": [d], "by": by}, questions[i][1]))
        for i, d in zip(indexes, decisions, strict=True)
    ]


def request(
    task: ApproveTask,
    thread_id: str,
    errors: list[str] | None = None,
    resolved: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The interrupt payload for one question; a step's referenced values (``resolved``)
    are shown in its description and kept in its metadata."""
    deadline = task.deadline
    meta: dict[str, Any] = {
        "kind": task.kind.value,
        "thread_id": thread_id,
        "step_id": task.step.id if task.step else None,
        "args_hash": task.args_hash,
        "asked_at": task.asked_at.isoformat(),
        "remind_at": deadline.remind_at(task.asked_at).isoformat(),
        "expire_at": deadline.expire_at(task.asked_at).isoformat(),
        "on_expiry": deadline.on_expiry.value,
        "allowed": [a.value for a in ALLOWED[task.kind]],
    }
    if errors:
        meta["errors"] = errors
    args: dict[str, Any]
    if task.kind is WaitKind.JUDGE:
        assert task.waiting is not None
        name, args = (task.step.tool, task.step.args) if task.step else ("review_goal", {})
        meta["reason"] = task.waiting.reason
        what = f"Step {task.step.id!r}" if task.step else "The run's outcome"
        text = (
            f"{what} was not reviewed: {task.waiting.reason}. retry = review it again (the "
            "tool does not run again) · approve = pass it without the review · reject = fail "
            "it · skip = skip the step and its dependants · abort = cancel the run."
        )
    elif task.kind is WaitKind.BUDGET:
        assert task.budget is not None
        assert task.waiting is not None
        name = "raise_budget"
        args = task.budget.model_dump(
            mode="json",
            include={"max_steps", "max_run_time", "max_replans", "max_tokens", "max_cost"},
        )
        meta["reason"] = task.waiting.reason
        text = (
            f"The run stopped: {task.waiting.reason}. approve = double what ran out · edit = "
            "set the limits (max_steps, max_run_time in seconds, ...) · reject = abort the run."
        )
    elif task.kind is WaitKind.PLAN:
        assert task.plan is not None
        name = "approve_plan"
        args = {
            "steps": [s.model_dump(mode="json", exclude_defaults=True) for s in task.plan.steps]
        }
        text = (
            f"Approve this plan of {len(task.plan.steps)} steps before any of them runs? "
            "Edit: send the revised steps. Reject: the run is cancelled."
        )
    else:
        assert task.step is not None
        name, args = task.step.tool, task.step.args
        if task.kind is WaitKind.ESCALATION:
            assert task.waiting is not None
            meta["key"] = task.waiting.key
            meta["reason"] = task.waiting.reason
            if task.waiting.key:
                choices = (
                    "approve = it did not happen, run it again · edit = run it again with these "
                    "args · reject = skip the step. Also: done (it happened; give its result), "
                    "abort (cancel the run)."
                )
            else:
                choices = (
                    "approve = try again (a fresh round of attempts) · edit = try again with "
                    "these args · reject = skip the step and its dependants. Also: done (you did "
                    "it by hand; give its result), abort (cancel the run)."
                )
            text = f"Step {task.step.id!r} needs a decision: {task.waiting.reason}\n{choices}"
        else:
            text = (
                f"Step {task.step.id!r} wants to run {task.step.tool}"
                + (f" ({task.step.description})" if task.step.description else "")
                + ". Approve runs it with exactly these args; edit changes them; reject skips "
                "it and the steps that depend on it; respond sends feedback instead."
            )
    if resolved and task.step is not None:
        meta["resolved"] = resolved
        text += "\n" + resolved_text(resolved, task.step)
    if errors:
        text += "\nYour last answer could not be applied: " + "; ".join(errors)
    allowed = [a for a in _SHOWN if AnswerType(a) in ALLOWED[task.kind]]
    return {
        "action_requests": [{"name": name, "args": args, "description": text}],
        "review_configs": [{"action_name": name, "allowed_decisions": allowed}],
        "onward": meta,
    }


def _shape(raw: Any) -> tuple[Any, str | None, Any]:
    """An answer in any accepted shape → (its decisions, who answered, its ``targets``)."""
    if isinstance(raw, dict) and "decisions" in raw:
        return raw["decisions"], raw.get("by"), raw.get("targets")
    if isinstance(raw, list):
        return raw, None, None
    if isinstance(raw, dict) and "type" in raw:
        return [raw], raw.get("by"), None
    raise AnswerError(
        'an answer is {"decisions": [{"type": "approve" | "edit" | "reject" | "respond", '
        f"...}}]}} (or a HumanResponse list); got {str(raw)[:200]!r}"
    )


def parse_answer(raw: Any, kind: WaitKind) -> Answer:
    """Any accepted answer shape → one :class:`Answer`, or :class:`AnswerError`."""
    decisions, by, _targets = _shape(raw)
    if not isinstance(decisions, list) or len(decisions) != 1 or not isinstance(decisions[0], dict):
        raise AnswerError("this question asks about one action: send exactly one decision")
    d: dict[str, Any] = decisions[0]
    raw_type = str(d.get("type", ""))
    legacy = "args" in d and raw_type in _LEGACY and "edited_action" not in d
    name = _LEGACY[raw_type] if legacy else raw_type
    try:
        kind_of = AnswerType(name)
    except ValueError:
        raise AnswerError(
            f"unknown decision type {raw_type!r}; allowed: "
            + ", ".join(a.value for a in ALLOWED[kind])
        ) from None
    if kind_of not in ALLOWED[kind]:
        raise AnswerError(
            f"{raw_type!r} is not an answer to this {kind.value} question; allowed: "
            + ", ".join(a.value for a in ALLOWED[kind])
        )
    message = d.get("message") or ""
    if legacy and kind_of is AnswerType.RESPOND:
        message = d.get("args") or ""
    if kind_of is AnswerType.EDIT:
        action = d.get("args") if legacy else d.get("edited_action")
        if not isinstance(action, dict) or not isinstance(action.get("args"), dict):
            raise AnswerError(
                'an edit needs "edited_action": {"name": TOOL, "args": {...}} with args a mapping'
            )
        edited_name = action.get("action") if legacy else action.get("name")
        return Answer(
            type=kind_of,
            name=str(edited_name) if edited_name else None,
            args=dict(action["args"]),
            message=str(message),
            by=by or d.get("by"),
        )
    if kind_of is AnswerType.RESPOND and not str(message).strip():
        raise AnswerError("a respond decision needs a message (the feedback)")
    return Answer(type=kind_of, message=str(message), result=d.get("result"), by=by or d.get("by"))


def edited_step(
    step: PlanStep, answer: Answer, registry: Registry, allow_tools: frozenset[str] | None
) -> PlanStep:
    """The step with a person's edit applied, validated like any plan step."""
    assert answer.args is not None
    edited = step.model_copy(update={"tool": answer.name or step.tool, "args": answer.args})
    problems = step_problems(edited, f"step {step.id}", registry, allow_tools)
    if problems:
        raise AnswerError("the edited action is not valid: " + "; ".join(str(p) for p in problems))
    return edited


def edited_plan(
    plan: Plan,
    answer: Answer,
    registry: Registry,
    allow_tools: frozenset[str] | None,
    records: Mapping[str, StepRecord] | None = None,
    max_steps: int | None = None,
) -> Plan:
    """The plan a person sent back (``edited_action.args = {"steps": [...]}``), validated
    as a revision of ``plan`` (allowlist and the run's ``max_plan_steps`` included)."""
    from onward.planning.revise import revision_problems

    assert answer.args is not None
    raw = answer.args.get("steps")
    if not isinstance(raw, list) or not raw:
        raise AnswerError('an edited plan needs "steps": [...] with at least one step')
    try:
        steps = [PlanStep.model_validate(s) for s in raw]
    except ValidationError as exc:
        raise AnswerError(f"the edited plan is not valid: {_errors_text(exc)}") from None
    new = Plan(version=plan.version + 1, source=PlanSource.DECLARED, steps=steps)
    problems = revision_problems(
        plan,
        new,
        records or {},
        registry,
        allow_tools=allow_tools,
        max_steps=max_steps,
        hint="send fewer steps",
    )
    if problems:
        raise AnswerError("the edited plan is not valid: " + "; ".join(map(str, problems)))
    return new


def edited_budget(current: Budget, answer: Answer) -> Budget:
    """The limits a person sent back (``max_run_time`` in seconds or like ``2h``)."""
    assert answer.args is not None
    changes = dict(answer.args)
    if isinstance(changes.get("max_run_time"), str):
        from onward.policies.durations import parse_duration

        try:
            changes["max_run_time"] = parse_duration(changes["max_run_time"])
        except UsageError as exc:
            raise AnswerError(str(exc)) from None
    try:
        return Budget.model_validate({**current.model_dump(), **changes})
    except ValidationError as exc:
        raise AnswerError(f"the edited limits are not valid: {_errors_text(exc)}") from None


def _errors_text(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)
    )
