"""An escalation as a chat frontend's approval card shows it.

agent-chat-ui's card (its agent-inbox view) shows an action request's ``name`` as the
card's title and its ``args`` as the fields to approve or edit; the ``description`` is
behind a "Description" toggle. onward asks an escalation (a step that failed in a way
only a person settles, or whose effect's outcome is unknown) in the same HITL shape as an
approval, so with the tool as its name it looked exactly like one. :func:`card` gives an
escalation's action request a title that says what happened and what each answer does,
and puts the reason first in its description; its ``review_configs`` entry keeps the
same name (the card pairs them by name), and ``onward`` metadata is unchanged (onward's
own faces read that). The HITL shape stays valid: ``name`` a string, ``args`` the step's.

agent-chat-ui sends an edit back with ``edited_action.name`` = the title it showed:
:func:`tool_names` maps a title back to the step's tool before the answer is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onward.people.inbox import PendingDecision

MAX_REASON = 200
"""Characters of the reason in a card's title (the whole reason is in its description)."""
RETRY = "Approve: try again · Edit: try again with these args · Reject: skip the step"
UNKNOWN = (
    "Approve: it did not happen, run it again · Edit: run it again with these args · "
    "Reject: skip the step"
)


def title(tool: str, step_id: Any, reason: Any, key: Any) -> str:
    """An escalation card's title: the step, why it stopped, what each answer does."""
    why = " ".join(str(reason or "it needs a decision").split())
    if len(why) > MAX_REASON:
        why = why[: MAX_REASON - 1] + "…"
    return f"{tool} (step {step_id}) stopped: {why}. {UNKNOWN if key else RETRY}"


def card(value: Any) -> Any:
    """An interrupt's value with each escalation's action request titled (a value of any
    other shape is returned as it is)."""
    if not isinstance(value, dict) or not isinstance(value.get("onward"), dict):
        return value
    meta = value["onward"]
    questions = meta.get("questions") if isinstance(meta.get("questions"), list) else [meta]
    requests, configs = value.get("action_requests"), value.get("review_configs")
    if not isinstance(requests, list) or not isinstance(configs, list):
        return value
    if len(questions) != len(requests) or len(configs) != len(requests):
        return value
    return {
        **value,
        "action_requests": [_request(r, q) for r, q in zip(requests, questions, strict=True)],
        "review_configs": [_config(c, q) for c, q in zip(configs, questions, strict=True)],
    }


def _escalation(question: Any, shown: Any) -> str | None:
    """The title of an escalation's card (None for any other question)."""
    if not isinstance(question, dict) or question.get("kind") != "escalation":
        return None
    if not isinstance(shown, dict) or not isinstance(shown.get("name"), str):
        return None
    return title(
        shown["name"], question.get("step_id"), question.get("reason"), question.get("key")
    )


def _request(request: Any, question: Any) -> Any:
    name = _escalation(question, request)
    if name is None:
        return request
    reason = question.get("reason") or ""
    what = RETRY if not question.get("key") else UNKNOWN
    description = f"**{reason}**\n\n{what}.\n\n{request.get('description') or ''}".rstrip()
    return {**request, "name": name, "description": description}


def _config(config: Any, question: Any) -> Any:
    if not isinstance(config, dict):
        return config
    name = _escalation(question, {"name": config.get("action_name")})
    return config if name is None else {**config, "action_name": name}


def tool_names(resume: Any, pending: list[PendingDecision]) -> Any:
    """A resume with every ``edited_action.name`` that is an escalation card's title
    replaced by that step's tool (what the person edited is the step's args)."""
    titles = {
        title(p.tool, p.step_id, p.reason, p.key): p.tool
        for p in pending
        if p.kind.value == "escalation"
    }
    return _renamed(resume, titles) if titles else resume


def _renamed(value: Any, titles: dict[str, str]) -> Any:
    if isinstance(value, list):
        return [_renamed(v, titles) for v in value]
    if not isinstance(value, dict):
        return value
    action = value.get("edited_action")
    if isinstance(action, dict) and action.get("name") in titles:
        return {**value, "edited_action": {**action, "name": titles[action["name"]]}}
    return {
        k: _renamed(v, titles) if k == "decisions" or isinstance(v, dict) else v
        for k, v in value.items()
    }
