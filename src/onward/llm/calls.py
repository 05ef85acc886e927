"""One model call: structured JSON out, usage and cost in, failures classified.

``ChatOpenAI`` answers through OpenAI's structured output (``response_format`` with
the JSON schema); other chat models (the scripted fake, local models) are asked for
JSON in the prompt and parsed. Transient failures (timeouts, connection errors, 429,
5xx) are retried a few times with backoff; what still fails raises a classified
``TransientToolError`` / ``DeterministicToolError``. Output that does not fit the
schema is returned as an error text, so the caller can ask again with it.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ValidationError

from onward.errors import DeterministicToolError, TransientToolError
from onward.llm.context import estimate_tokens, message_tokens, nonce_of
from onward.llm.models import model_name
from onward.llm.usage import cost_of
from onward.model.state import Usage
from onward.nodes.deps import NodeDeps
from onward.observe.kinds import EventKind
from onward.settings import settings

T = TypeVar("T", bound=BaseModel)
TRIES = 3
"""Attempts of one call on transient failures (then the failure is the caller's)."""


@dataclass(frozen=True, slots=True)
class Answer:
    parsed: Any
    """The schema instance, or None when ``error`` says why not."""
    error: str | None
    usage: Usage
    raw: str


def ask_json(
    deps: NodeDeps,
    model: BaseChatModel,
    messages: list[BaseMessage],
    schema: type[T],
    *,
    purpose: str,
    thread_id: str,
    step_id: str | None = None,
) -> Answer:
    structured = _is_openai(model)
    prompt = list(messages)
    kwargs: dict[str, Any] = {}
    if structured:
        # OpenAI structured output on the wire; the raw answer (and its usage) is parsed
        # here, so an answer that does not fit is sent back like any other.
        kwargs["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()},
        }
    else:
        prompt.append(
            HumanMessage(
                "Answer with one JSON object matching this JSON schema, nothing else:\n"
                + json.dumps(schema.model_json_schema(), ensure_ascii=False)
            )
        )
    last: Exception | None = None
    for attempt in range(1, TRIES + 1):
        started = time.monotonic()
        try:
            raw_msg = model.invoke(prompt, **kwargs)
        except Exception as exc:
            failure = _classify(exc)
            last = failure
            _log(
                deps,
                thread_id,
                purpose,
                step_id,
                model,
                prompt,
                None,
                started,
                attempt,
                str(failure),
            )
            if isinstance(failure, TransientToolError) and attempt < TRIES:
                deps.sleep(min(0.5 * 2 ** (attempt - 1), 4.0))
                continue
            raise failure from exc
        text = raw_msg.text
        parsed, error = _parse(text, schema)
        usage = _usage(model, raw_msg, prompt, text)
        _log(deps, thread_id, purpose, step_id, model, prompt, usage, started, attempt, error)
        return Answer(parsed=parsed, error=error, usage=usage, raw=text)
    assert last is not None
    raise last


def _is_openai(model: BaseChatModel) -> bool:
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:  # pragma: no cover - a dependency of onward
        return False
    return isinstance(model, ChatOpenAI)


def _parse(text: str, schema: type[T]) -> tuple[T | None, str | None]:
    body = text.strip()
    if body.startswith("```"):  # a fenced answer
        body = body.strip("`").removeprefix("json").strip()
    try:
        return schema.model_validate_json(body or "null"), None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        return None, f"the answer did not fit the schema: {problems}"


def _classify(exc: Exception) -> Exception:
    """openai / httpx errors → onward's classified tool errors."""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if isinstance(status, int):
        if status == 429 or status >= 500:
            return TransientToolError(f"model call failed: HTTP {status}: {exc}")
        return DeterministicToolError(
            f"model call refused: HTTP {status}: {exc}",
            hint="check OPENAI_API_KEY, OPENAI_BASE_URL and ONWARD_MODEL",
        )
    import openai
    from langchain_core.exceptions import ModelTimeoutError

    transient = (openai.APIConnectionError, ModelTimeoutError, TimeoutError, ConnectionError)
    if isinstance(exc, transient):
        return TransientToolError(f"model call failed: {name}: {exc}")
    if isinstance(exc, (TransientToolError, DeterministicToolError)):
        return exc
    return DeterministicToolError(f"model call failed: {name}: {exc}")


def _usage(
    model: BaseChatModel, msg: AIMessage | None, prompt: list[BaseMessage], text: str
) -> Usage:
    meta = getattr(msg, "usage_metadata", None) or {}
    tokens_in = int(meta.get("input_tokens") or message_tokens(prompt))
    tokens_out = int(meta.get("output_tokens") or estimate_tokens(text))
    return Usage(
        calls=1,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost=cost_of(model_name(model), tokens_in, tokens_out),
    )


def _log(
    deps: NodeDeps,
    thread_id: str,
    purpose: str,
    step_id: str | None,
    model: BaseChatModel,
    prompt: list[BaseMessage],
    usage: Usage | None,
    started: float,
    attempt: int,
    error: str | None,
) -> None:
    if deps.events is None:
        return
    text = "\n".join(m.text for m in prompt)
    try:  # the same prompt has the same digest, whatever its random fence nonce
        stable = text.replace(nonce_of(prompt), "NONCE")
    except ValueError:
        stable = text
    detail: dict[str, Any] = {
        "call_id": uuid.uuid4().hex,
        "purpose": purpose,
        "step_id": step_id,
        "model": model_name(model),
        "call_attempt": attempt,
        "latency": round(time.monotonic() - started, 4),
        "prompt_digest": hashlib.sha256(stable.encode()).hexdigest(),
        "input_tokens": usage.input_tokens if usage else None,
        "output_tokens": usage.output_tokens if usage else None,
        "cost": usage.cost if usage else None,
        "error": error,
    }
    if settings().log_prompts:
        detail["prompt"] = text
    deps.events.record(thread_id, EventKind.MODEL_CALL, detail)
