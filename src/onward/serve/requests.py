"""What a client may ask for when it starts or drives a run over HTTP.

A start request may *tighten* the server's rules, never loosen them: more approvals, fewer
tools, smaller budgets. Run-request fields of the LangGraph API that onward does not
support are refused when they ask for something (a default value is accepted, since the
SDKs send those), so nothing a client sends is silently ignored.

Every body is read by :func:`parse_body`, which refuses the JSON that Python's parser
accepts but onward cannot store or send back (NaN, integers past 64 bits, lone surrogates,
NUL characters, nesting past :data:`MAX_DEPTH`); the small readers below check each field
a route reads, so a malformed request is a 4xx that names the field, never a 500.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from onward.errors import ForbiddenError, UsageError, refuse_unknown, validation_message
from onward.model.state import Budget
from onward.policies.run import RunPolicy, with_durations

START_FIELDS = frozenset({"goal", "messages", "plan", "policy", "budget", "inputs"})
"""Keys of a run's first input."""
SERVER_OWNED_INPUT = {
    "tool_modules": "tools come from the server's configuration only (onward serve --tools)",
    "workdir": "runs started over HTTP work in the server's --workdir",
}
"""Start-request keys the CLI and Python take but a token holder may not set, and why."""

RUN_FIELDS = frozenset(
    {"assistant_id", "input", "command", "stream_mode", "metadata", "config", "context"}
    | {"checkpoint", "checkpoint_id", "if_not_exists", "checkpoint_during", "interrupt_before"}
    | {"interrupt_after", "multitask_strategy", "on_disconnect", "stream_resumable", "webhook"}
)
"""Run-request fields onward acts on (``config`` and ``context``: :func:`run_config`)."""
CONFIG_FIELDS = ("configurable", "metadata", "tags")
"""Keys of a run request's ``config`` onward honours: ``configurable`` may only name the
thread and checkpoint the request is about (the graph reads no other key), ``metadata``
and ``tags`` go into the run's metadata."""
CONFIGURABLE_FIELDS = ("thread_id", "checkpoint_id", "checkpoint_ns")

UNSUPPORTED_DEFAULTS: Mapping[str, tuple[Any, ...]] = {
    "on_completion": (None, "keep"),
    # agent-chat-ui asks for subgraph events; onward's graph has none, so true streams
    # exactly what false does (as LangGraph Server does for a graph without subgraphs).
    "stream_subgraphs": (None, False, True),
    "feedback_keys": (None, []),
    "after_seconds": (None, 0),
    "durability": (None, "sync"),
    # langgraph-sdk 0.4.6-0.4.9 send the client-side flag of runs.wait (raise on an
    # "__error__" answer); the answer is the same whatever it says.
    "raise_error": (None, True, False),
}
"""Fields onward accepts only with these values (what the SDKs send by default)."""


MAX_DEPTH = 100
"""Deepest nesting a request body may have. Real requests nest a few levels; far deeper
JSON would only fail later, in a serializer, after parts of it were stored."""
MAX_PAGE = 1000
"""Most items one page holds (a larger ``limit`` is capped to it)."""
INT_RANGE = (-(2**63), 2**63 - 1)
"""Integers the store and the checkpoint format hold (64-bit, signed)."""


def parse_body(raw: bytes) -> Any:
    """A request body's JSON value; a :class:`UsageError` saying what is wrong with it."""
    try:
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite, parse_int=_int64)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"request body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise UsageError(
            f"request body is nested too deeply; onward reads at most {MAX_DEPTH} levels"
        ) from None
    except UnicodeDecodeError:
        raise UsageError("request body is not UTF-8 text; send JSON encoded as UTF-8") from None
    check_value(value)
    return value


def check_value(value: Any) -> None:
    """Refuse nesting past :data:`MAX_DEPTH`, and strings with a NUL character or a lone
    surrogate (neither can be stored in every backend, nor encoded as UTF-8)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise UsageError(
                    f"request body is nested more than {MAX_DEPTH} levels deep; flatten it"
                )
            if isinstance(item, dict):
                for key, inner in item.items():
                    _check_text(key)
                    stack.append((inner, depth + 1))
            else:
                stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str):
            _check_text(item)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise UsageError(
            f"request body has a NUL character (\\u0000) in the string {_clip(text)}; "
            "text sent to onward cannot hold one"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(
            f"request body has a lone surrogate in the string {_clip(text)}: it is not "
            "text (escape characters past U+FFFF as a surrogate pair)"
        ) from None


def _clip(text: str) -> str:
    return ascii(text[:40] + ("..." if len(text) > 40 else ""))


def _no_constant(name: str) -> Any:
    raise UsageError(f"request body has {name}, which JSON does not allow; send a number or null")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UsageError(f"the number {text[:40]} in the request body is too large for a float")
    return value


def _int64(text: str) -> int:
    value = int(text) if len(text) <= 20 else None
    if value is None or not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise UsageError(
            f"the integer {text[:24]}{'...' if len(text) > 24 else ''} in the request body "
            "does not fit in 64 bits (from -2**63 to 2**63-1)"
        )
    return value


def kind(value: Any) -> str:
    """How a message names a JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A thread id a client may create: a UUID as ``str(uuid)`` writes it (what the SDKs and
onward itself generate), so one thread has one id."""


def new_thread_id(value: str) -> str:
    """``value`` as the id of a thread to create; a 422 unless it is a canonical UUID (an
    upper-case, braced, ``urn:uuid:`` or non-ASCII-digit spelling would be a second id of
    the same UUID)."""
    if not CANONICAL_UUID.fullmatch(value):
        raise UsageError(
            f"thread_id {_clip(value)} is not a UUID in canonical form: lower-case hex digits "
            "8-4-4-4-12, e.g. 0b0e4bd1-6c7e-4d43-9d4a-2b8f3e1a5c60 (or leave it out and "
            "the server makes one)"
        )
    return value


def run_config(body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run request's ``config``, checked: (what goes into the run's metadata, its
    ``configurable``). ``configurable`` may name only the request's thread and checkpoint
    (the graph reads no other key; :func:`check_configurable` matches them), ``metadata``
    and ``tags`` are kept in the run's metadata, anything else is a 422 naming the key. A
    non-empty ``context`` is a 422 too: onward's graph takes no run context (an
    assistant's rules are its context)."""
    context = body.get("context")
    if context not in (None, {}):
        raise UsageError(
            "context is not supported on a run: onward's graph reads no run context. An "
            "assistant's context holds its rules (policy, budget, model_plans; POST "
            "/assistants); a run tightens them with input.policy and input.budget"
        )
    config = an_object(body, "config")
    extra = sorted(str(k) for k in config if k not in CONFIG_FIELDS)
    if extra:
        raise UsageError(
            f"config.{extra[0]} is not supported by onward serve: a run's config may hold "
            f"only {', '.join(CONFIG_FIELDS)} (onward sets its own recursion limit from the "
            "plan; cap a run with input.budget.max_steps)"
        )
    configurable = an_object(config, "configurable")
    extra = sorted(str(k) for k in configurable if k not in CONFIGURABLE_FIELDS)
    if extra:
        raise UsageError(
            f"config.configurable.{extra[0]} is not read by onward's graph; configurable may "
            f"name only {', '.join(CONFIGURABLE_FIELDS)} (the request's own)"
        )
    if configurable.get("checkpoint_ns") not in (None, ""):
        raise UsageError("config.configurable.checkpoint_ns: onward's graph has no subgraphs")
    a_string(configurable, "thread_id"), a_string(configurable, "checkpoint_id")
    tags = strings(config, "tags")
    return {**an_object(config, "metadata"), **({"tags": tags} if tags else {})}, configurable


def check_configurable(body: Mapping[str, Any], thread_id: str | None) -> str | None:
    """The checkpoint ``config.configurable`` names (None: none), once its ``thread_id``
    is checked to be the request's (``thread_id``; None for a stateless run, whose thread
    is made for it) and its ``checkpoint_id`` the one the request names, if both do."""
    _meta, configurable = run_config(body)
    given = configurable.get("thread_id")
    if given is not None and given != thread_id:
        raise UsageError(
            f"config.configurable.thread_id {_clip(str(given))} is not the thread of this "
            f"request ({thread_id or 'a new thread'}); leave it out"
        )
    found: str | None = configurable.get("checkpoint_id") or None
    return found


def run_metadata(body: Mapping[str, Any]) -> dict[str, Any]:
    """The run's metadata: its ``config.metadata`` and ``config.tags``, then ``metadata``."""
    return {**run_config(body)[0], **an_object(body, "metadata")}


def check_start_input(data: Mapping[str, Any]) -> None:
    """A run's first input names only fields a client may set: a server-owned one (tool
    modules, the workdir) is a 422 that says why it is the server's, any other unknown
    field a 422 naming it."""
    owned = sorted(k for k in data if k in SERVER_OWNED_INPUT)
    if owned:
        raise UsageError(
            "; ".join(
                f"input.{k} cannot be set by a client: {SERVER_OWNED_INPUT[k]}" for k in owned
            )
        )
    refuse_unknown(data, START_FIELDS, "input")


def an_object(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``body[name]`` as an object ({} when it is missing or null)."""
    value = body.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{name} must be an object, not {kind(value)}")
    return value


def a_string(
    body: Mapping[str, Any], name: str, choices: tuple[str, ...] | None = None
) -> str | None:
    """``body[name]`` as a string (None when it is missing or null), one of ``choices``."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string, not {kind(value)}")
    if choices is not None and value not in choices:
        raise UsageError(f"{name} {_clip(value)} is not one of {', '.join(choices)}")
    return value


def strings(body: Mapping[str, Any], name: str) -> list[str]:
    """``body[name]`` as a list of strings ([] when it is missing or null)."""
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{name} must be a list of strings")
    return value


def count(body: Mapping[str, Any], name: str, default: int, *, most: int | None = None) -> int:
    """``body[name]`` as a whole number ≥ 0 (``default`` when it is missing, null or 0),
    capped at ``most``."""
    value = body.get(name)
    if value is None or value == "":
        return default
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 20
    ):
        number = int(value)
    if number is None:
        raise UsageError(f"{name} must be a whole number, not {kind(value)} ({_clip(str(value))})")
    if number < 0:
        raise UsageError(f"{name} must not be negative ({number})")
    number = number or default
    return min(number, most) if most is not None else number


def pause_before(body: Mapping[str, Any]) -> list[str]:
    """A run request's ``interrupt_before``: graph nodes to pause before (``"*"``: every
    node), checked against the graph; none by default."""
    return _pauses(body, "interrupt_before")


def _pauses(body: Mapping[str, Any], name: str) -> list[str]:
    from onward.client.driving import pause_points
    from onward.graph.routes import Node

    asked = body.get(name)
    if asked in (None, [], "__none__"):
        return []
    if asked == "*":
        return [n.value for n in Node]
    return pause_points(strings(body, name))


MULTITASK = ("enqueue", "reject", "interrupt", "rollback")
"""What a run does on a busy thread (LangGraph's ``multitask_strategy``; enqueue by default)."""


def multitask_of(body: Mapping[str, Any]) -> str:
    return a_string(body, "multitask_strategy", MULTITASK) or "enqueue"


def disconnect_of(body: Mapping[str, Any]) -> str:
    """``on_disconnect``: ``continue`` (default: the run goes on) or ``cancel``."""
    return a_string(body, "on_disconnect", ("continue", "cancel")) or "continue"


def webhook_of(body: Mapping[str, Any]) -> str | None:
    """A run request's ``webhook``: a URL the egress policy (``ONWARD_HTTP_ALLOW``) lets
    the server POST to when the run ends; a URL it refuses is a 422 before the run starts
    (a token holder cannot make the server call hosts its runs may not reach)."""
    from onward.errors import DeterministicToolError
    from onward.policies.egress import policy_from_env

    url = a_string(body, "webhook")
    if not url:
        return None
    try:
        policy_from_env().check(url, method="POST")
    except DeterministicToolError as exc:
        raise UsageError(f"webhook: {exc}") from None
    return url


def pause_after(body: Mapping[str, Any]) -> list[str]:
    """A run request's ``interrupt_after``: graph nodes to pause after (``"*"``: every
    node), checked against the graph; none by default."""
    return _pauses(body, "interrupt_after")


def check_run_fields(body: Mapping[str, Any]) -> None:
    refuse_unknown(body, RUN_FIELDS | UNSUPPORTED_DEFAULTS.keys(), "run request")
    run_config(body)
    multitask_of(body)
    disconnect_of(body)
    webhook_of(body)
    if not isinstance(body.get("stream_resumable", False), bool | None):
        raise UsageError("stream_resumable must be true or false (onward's streams always are)")
    asked = [k for k, ok in UNSUPPORTED_DEFAULTS.items() if k in body and body[k] not in ok]
    if asked:
        raise UsageError(
            f"{', '.join(asked)} {'is' if len(asked) == 1 else 'are'} not supported by onward "
            "serve yet; leave them out (onward runs with durability 'sync', on one graph "
            "without subgraphs, and keeps every run)"
        )


def tightened_policy(base: RunPolicy, asked: Any) -> RunPolicy:
    """``base`` (the server's policy) with the request's changes that only tighten it;
    a change that would loosen it is a :class:`ForbiddenError` naming the field."""
    if asked is None:
        asked = {}
    if not isinstance(asked, Mapping):
        raise UsageError("input.policy must be an object of policy settings")
    try:
        wanted = RunPolicy.model_validate(with_durations(dict(asked)))
    except OverflowError:
        raise UsageError("input.policy: a duration is too long (at most 999999999 days)") from None
    except ValidationError as exc:
        raise UsageError(f"input.policy: {validation_message(exc)}") from None
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
    if "max_plan_steps" in asked and wanted.max_plan_steps > base.max_plan_steps:
        looser.append(f"max_plan_steps (the server allows at most {base.max_plan_steps})")
    if "judge_failure" in asked and base.judge_failure == "pause" != wanted.judge_failure:
        looser.append("judge_failure (the server asks a person when the judge cannot run)")
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
        max_plan_steps=min(base.max_plan_steps, wanted.max_plan_steps)
        if "max_plan_steps" in asked
        else base.max_plan_steps,
        judge_failure=wanted.judge_failure if "judge_failure" in asked else base.judge_failure,
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
        raise UsageError(f"input.budget: {validation_message(exc)}") from None
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
