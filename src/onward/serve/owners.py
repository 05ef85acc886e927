"""Who may change what in a run's state: every ``RunState`` field has an owner.

The server (or the store's owner at the CLI) owns the rules a run follows and the record
of what happened: policy, tool modules, work directory, approvals, decisions, budgets,
step records, status. A client of ``onward serve`` is a chat user and changes a run only
through named operations: answer a question (``command.resume``), cancel, send a message,
and revise the plan (edit the args or checks of steps that are not done, add steps).

:func:`client_update` is the one check every client edit passes (``POST
/threads/{id}/state``, ``command.update``, an edit at a past checkpoint): it refuses a
server-owned field with a :class:`~onward.errors.ForbiddenError` that names the field and
the operation to use instead, validates a plan revision exactly like any other revision
(known tools, the run's tool allowlist, schemas, acyclic, done steps final), and returns
the writes to apply. Either every part of the request is accepted or nothing is.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from langchain_core.messages import HumanMessage
from pydantic import ValidationError

from onward.errors import (
    ForbiddenError,
    PlanProblem,
    PlanValidationError,
    UsageError,
    refuse_unknown,
)
from onward.model.state import Plan, PlanStep, PlanSteps, RunState, StepStatus
from onward.planning.revise import revision_problems
from onward.planning.validate import pydantic_problems
from onward.tools.registry import Registry


class Owner(StrEnum):
    SERVER = "server"
    """Only onward itself, from the server's configuration or the run's own progress."""
    CLIENT = "client"
    """A client, through the operation named in :attr:`FieldOwner.how`."""


@dataclass(frozen=True, slots=True)
class FieldOwner:
    owner: Owner
    how: str
    """For a client: the operation that changes it; for the server: what to do instead."""


_ANSWER = "answer the run's question with command.resume"
_KEPT = "it is kept by onward as the run goes"
FIELD_OWNERS: Mapping[str, FieldOwner] = {
    "schema_version": FieldOwner(Owner.SERVER, _KEPT),
    "messages": FieldOwner(Owner.CLIENT, "add human messages"),
    "workdir": FieldOwner(Owner.SERVER, "it is the server's configuration (--workdir)"),
    "goal": FieldOwner(Owner.SERVER, "start a new thread for another goal"),
    "plan": FieldOwner(
        Owner.CLIENT, "edit the args or checks of steps that are not done, or add steps"
    ),
    "steps": FieldOwner(Owner.SERVER, f"{_KEPT}; revise the plan or {_ANSWER}"),
    "artifacts": FieldOwner(Owner.SERVER, "artifacts are produced by the run's steps"),
    "budget": FieldOwner(
        Owner.SERVER,
        "limits are set when the run starts (a start request may lower them); past a "
        f"limit, {_ANSWER}",
    ),
    "tool_modules": FieldOwner(
        Owner.SERVER, "tools come from the server's configuration (--tools, ONWARD_TOOLS)"
    ),
    "max_concurrency": FieldOwner(Owner.SERVER, "it is set when the run starts"),
    "wave": FieldOwner(Owner.SERVER, _KEPT),
    "waiting": FieldOwner(Owner.SERVER, _ANSWER),
    "decisions": FieldOwner(Owner.SERVER, _ANSWER),
    "approvals": FieldOwner(Owner.SERVER, _ANSWER),
    "plan_approval": FieldOwner(Owner.SERVER, _ANSWER),
    "policy": FieldOwner(
        Owner.SERVER,
        "it is the server's configuration (--policy); a start request may tighten it",
    ),
    "started_at": FieldOwner(Owner.SERVER, _KEPT),
    "resume_at": FieldOwner(Owner.SERVER, _KEPT),
    "usage": FieldOwner(Owner.SERVER, _KEPT),
    "budget_warnings": FieldOwner(Owner.SERVER, _KEPT),
    "status": FieldOwner(
        Owner.SERVER, f"{_ANSWER} (reject to skip a step), or ask the server's owner to cancel"
    ),
    "failure": FieldOwner(Owner.SERVER, _KEPT),
}
"""Every ``RunState`` field → its owner (a test checks that none is missing)."""

EDITABLE = frozenset({StepStatus.PENDING, StepStatus.FAILED})
"""Step statuses whose args and checks a client may change (running and produced steps
have an effect or output bound to their args; done steps are final)."""
_EDITABLE_FIELDS = frozenset({"args", "checks", "description"})
MAX_MESSAGE_CHARS = 100_000


def client_update(state: RunState, values: Any, registry: Registry) -> dict[str, Any]:
    """A client's state edit → the writes to apply, all validated; raises on any problem
    (403 for a field the client does not own, 422 for a malformed or invalid value)."""
    if not isinstance(values, Mapping) or not values:
        raise UsageError(
            "values must be a non-empty object of state fields, e.g. "
            '{"plan": {"steps": [...]}} or {"messages": [{"type": "human", "content": "..."}]}'
        )
    refuse_unknown(values, FIELD_OWNERS.keys(), "values (a run's state)")
    refused = [k for k in values if FIELD_OWNERS[k].owner is Owner.SERVER]
    if refused:
        raise ForbiddenError(
            "; ".join(f"{k} cannot be changed by a client: {FIELD_OWNERS[k].how}" for k in refused)
            + ". Nothing was changed."
        )
    writes: dict[str, Any] = {}
    if "plan" in values:
        writes["plan"] = revised_plan(state, values["plan"], registry)
    if "messages" in values:
        writes["messages"] = human_messages(values["messages"], {m.id for m in state.messages})
    return writes


def revised_plan(state: RunState, raw: Any, registry: Registry) -> Plan:
    """A client's plan revision, validated against the run's current plan and records."""
    if isinstance(raw, list):
        raw = {"steps": raw}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("steps"), list):
        raise UsageError('plan must be an object {"steps": [...]} holding every step of the plan')
    refuse_unknown(raw, ("steps", "version", "source"), "plan")
    if "version" in raw and raw["version"] != state.plan.version:
        raise UsageError(
            f"plan.version {raw['version']!r} is not the run's current version "
            f"{state.plan.version}: the plan changed since it was read; read the state again"
        )
    problems: list[PlanProblem] = []
    steps: list[PlanStep] = []
    for i, item in enumerate(raw["steps"]):
        try:
            steps.append(PlanStep.model_validate(item))
        except ValidationError as exc:
            problems += pydantic_problems(f"steps[{i}]", exc)
    if problems:
        raise PlanValidationError(problems, source="plan revision")
    old = state.plan
    index = old.index()
    new_ids = {s.id for s in steps}
    removed = [sid for sid in index.ids if sid not in new_ids]
    if removed:
        raise ForbiddenError(
            f"plan revision removes step(s) {', '.join(removed)}: a client may not drop "
            "steps; reject a step when it is asked about, or cancel the run. Nothing was "
            "changed."
        )
    for step in steps:
        if step.id not in index.position:
            continue
        before = index[index.position[step.id]]
        if step == before:
            continue
        status = state.status_of(step.id)
        if status not in EDITABLE:
            raise ForbiddenError(
                f"step {step.id} is {status.value}: only steps that are pending or failed "
                "may change (add a new step instead). Nothing was changed."
            )
        changed = {
            f
            for f in type(step).model_fields
            if getattr(step, f) != getattr(before, f) and f not in _EDITABLE_FIELDS
        }
        if changed:
            raise ForbiddenError(
                f"step {step.id}: a client may change only its args and checks, not "
                f"{', '.join(sorted(changed))} (add a new step instead). Nothing was changed."
            )
    new = Plan(version=old.version + 1, source=old.source, steps=PlanSteps(steps))
    problems = revision_problems(
        old,
        new,
        state.steps,
        registry,
        goal=state.goal,
        allow_tools=state.policy.allow_tools,
        max_steps=state.policy.max_plan_steps,
    )
    if problems:
        raise PlanValidationError(problems, source="plan revision")
    return new


def human_messages(raw: Any, existing: set[str | None]) -> list[HumanMessage]:
    """Messages a client adds: human ones only, never with the id of an existing message
    (that would replace it: the conversation is append-only for clients)."""
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"type": "human", "content": item}
        if not isinstance(item, Mapping):
            raise UsageError(f"messages[{i}] must be an object {{type, content}}")
        kind = item.get("type", item.get("role"))
        if kind not in ("human", "user"):
            raise ForbiddenError(
                f"messages[{i}] is a {kind!r} message: a client may add human messages only"
            )
        refuse_unknown(item, ("type", "role", "content", "id"), f"messages[{i}]")
        content = message_text(item.get("content"), f"messages[{i}].content")
        if not content.strip():
            raise UsageError(f"messages[{i}].content must be non-empty text")
        if len(content) > MAX_MESSAGE_CHARS:
            raise UsageError(
                f"messages[{i}] has {len(content)} characters; the limit is {MAX_MESSAGE_CHARS}"
            )
        given = item.get("id")
        if given is not None and (not isinstance(given, str) or given in existing):
            raise ForbiddenError(
                f"messages[{i}] has the id of a message already in the thread: past "
                "messages cannot be replaced; send a new message instead"
            )
        out.append(HumanMessage(content, id=given or str(uuid.uuid4())))
    return out


def message_text(content: Any, where: str) -> str:
    """A chat message's text: a string, or its text content blocks joined by newlines.
    Other content (images, files) is refused: onward would have to ignore it."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in content
    ):
        return "\n".join(str(b["text"]) for b in content)
    raise UsageError(
        f"{where} must be text or a list of text blocks "
        '([{"type": "text", "text": "..."}]); onward reads no other content'
    )
