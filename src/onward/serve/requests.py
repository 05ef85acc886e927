"""What a client may ask for when it starts or drives a run over HTTP.

A start request may *tighten* the server's rules, never loosen them: more approvals, fewer
tools, smaller budgets. Run-request fields of the LangGraph API that onward does not
support are refused when they ask for something (a default value is accepted, since the
SDKs send those), so nothing a client sends is silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from onward.errors import ForbiddenError, UsageError
from onward.policy import RunPolicy, _durations
from onward.state import Budget

START_FIELDS = frozenset({"goal", "messages", "plan", "policy", "budget", "inputs"})
"""Keys of a run's first input."""

RUN_FIELDS = frozenset(
    {"assistant_id", "input", "command", "stream_mode", "metadata", "config", "context"}
    | {"checkpoint", "checkpoint_id", "if_not_exists", "checkpoint_during"}
)
"""Run-request fields onward acts on (``config``/``context`` are the SDKs' envelopes)."""

UNSUPPORTED_DEFAULTS: Mapping[str, tuple[Any, ...]] = {
    "interrupt_before": (None, [], "__none__"),
    "interrupt_after": (None, [], "__none__"),
    "webhook": (None, ""),
    "multitask_strategy": (None, "reject"),
    "on_disconnect": (None, "continue"),
    "on_completion": (None, "keep"),
    "stream_subgraphs": (None, False),
    "stream_resumable": (None, False),
    "feedback_keys": (None, []),
    "after_seconds": (None, 0),
    "durability": (None, "sync"),
}
"""Fields onward accepts only with these values (what the SDKs send by default)."""


def check_run_fields(body: Mapping[str, Any]) -> None:
    unknown = sorted(k for k in body if k not in RUN_FIELDS and k not in UNSUPPORTED_DEFAULTS)
    if unknown:
        raise UsageError(
            f"unknown run field(s): {', '.join(unknown)}; onward accepts "
            f"{', '.join(sorted(RUN_FIELDS))}"
        )
    asked = [k for k, ok in UNSUPPORTED_DEFAULTS.items() if k in body and body[k] not in ok]
    if asked:
        raise UsageError(
            f"{', '.join(asked)} {'is' if len(asked) == 1 else 'are'} not supported by onward "
            "serve yet; leave them out (onward runs with durability 'sync' and rejects a "
            "second run on a busy thread)"
        )


def tightened_policy(base: RunPolicy, asked: Any) -> RunPolicy:
    """``base`` (the server's policy) with the request's changes that only tighten it;
    a change that would loosen it is a :class:`ForbiddenError` naming the field."""
    if asked is None:
        asked = {}
    if not isinstance(asked, Mapping):
        raise UsageError("input.policy must be an object of policy settings")
    try:
        wanted = RunPolicy.model_validate(_durations(dict(asked)))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise UsageError(f"input.policy: {problems}") from None
    looser = []
    if not wanted.auto_approve <= base.auto_approve:
        looser.append(
            "auto_approve (approving in advance is for the person running onward: "
            "onward run --auto-approve, or the server's --policy)"
        )
    if "confine_paths" in asked and not wanted.confine_paths:
        looser.append("confine_paths (runs started over HTTP always stay in the work directory)")
    if (
        "allow_tools" in asked
        and base.allow_tools is not None
        and (wanted.allow_tools is None or not wanted.allow_tools <= base.allow_tools)
    ):
        looser.append(f"allow_tools (the server allows only {', '.join(sorted(base.allow_tools))})")
    if "approve_all" in asked and base.approve_all and not wanted.approve_all:
        looser.append("approve_all (the server asks for every step)")
    if "approve_plan" in asked and base.approve_plan and not wanted.approve_plan:
        looser.append("approve_plan (the server asks for every plan)")
    if "escalate_failures" in asked and not base.escalate_failures and wanted.escalate_failures:
        looser.append("escalate_failures (the server fails such runs instead of waiting)")
    for name, deadline in [
        ("deadline", wanted.deadline),
        *((f"tool_deadlines.{t}", d) for t, d in wanted.tool_deadlines.items()),
    ]:
        if deadline.expire_after <= timedelta(0) or deadline.remind_after < timedelta(0):
            looser.append(f"{name} (durations must be positive)")
    if looser:
        raise ForbiddenError(
            "a start request may tighten the server's run policy, never loosen it: "
            + "; ".join(looser)
        )
    return RunPolicy(
        approve_tools=base.approve_tools | wanted.approve_tools,
        auto_approve=base.auto_approve & wanted.auto_approve
        if "auto_approve" in asked
        else base.auto_approve,
        approve_all=base.approve_all or wanted.approve_all,
        approve_plan=base.approve_plan or wanted.approve_plan,
        confine_paths=True,
        escalate_failures=wanted.escalate_failures
        if "escalate_failures" in asked
        else base.escalate_failures,
        allow_tools=wanted.allow_tools if wanted.allow_tools is not None else base.allow_tools,
        deadline=wanted.deadline if "deadline" in asked else base.deadline,
        tool_deadlines={**base.tool_deadlines, **wanted.tool_deadlines},
    )


_LIMITS = ("max_steps", "max_replans", "max_run_time", "max_tokens", "max_cost")


def tightened_budget(base: Budget, asked: Any) -> Budget:
    """``base`` (the server's budget) with the request's limits where they are smaller."""
    if asked is None:
        asked = {}
    if not isinstance(asked, Mapping):
        raise UsageError("input.budget must be an object of limits")
    extra = sorted(str(k) for k in asked if k not in _LIMITS)
    if extra:
        raise ForbiddenError(
            f"input.budget: {', '.join(extra)} cannot be set by a client; a start request "
            f"may set only the limits {', '.join(_LIMITS)}"
        )
    try:
        wanted = Budget.model_validate(dict(asked))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise UsageError(f"input.budget: {problems}") from None
    looser = []
    update: dict[str, Any] = {}
    for name in asked:
        mine, theirs = getattr(base, name), getattr(wanted, name)
        if theirs is None or (mine is not None and theirs > mine):
            looser.append(f"{name} (the server's limit is {mine})")
        elif theirs < (timedelta(0) if isinstance(theirs, timedelta) else 0):
            raise UsageError(f"input.budget.{name} must not be negative")
        else:
            update[name] = theirs
    if looser:
        raise ForbiddenError(
            "a start request may lower the server's budget, never raise it: " + "; ".join(looser)
        )
    return base.model_copy(update=update)
