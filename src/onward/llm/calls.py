"""One model call: structured JSON out, usage and cost in, failures classified.

Structured output goes through the provider's own mechanism when the chat model has one:
LangChain's ``with_structured_output(schema, include_raw=True)`` (OpenAI's ``response_format``
with the JSON schema for ``ChatOpenAI``; the provider's default for the others, tool
calling or JSON mode). A model that has none (``with_structured_output`` raises
``NotImplementedError``, as ``ScriptedChatModel`` does unless told otherwise) is asked for
JSON in the prompt. Either way the raw answer is read here, as models really send it: the
JSON alone, inside prose or a fenced block (the first object that fits the schema), or as
a tool call's args, so an answer that does not fit goes back to the model like any
other, and its usage and finish reason are the raw message's. A refusal (OpenAI's
``refusal``, or plain "I can't help with that" and no JSON) is returned as one, with the
model's words, not asked again blindly.

Every attempt is a ``model_call`` event and is counted, failed ones too: its tokens
come from the provider's usage, streamed or not (langchain-openai is asked for usage
when it streams), else from an offline estimate, flagged ``usage_estimated``. The calls
are tagged ``nostream``: LangGraph's ``messages`` stream never shows their raw JSON.

Transient failures (timeouts, connection errors, 429, 5xx) are retried with backoff,
or after the provider's ``Retry-After`` (at most :data:`RETRY_AFTER_CAP`), through the
injectable ``deps.sleep``: :data:`TRIES` attempts when the model's client does not
retry itself (``max_retries=0``, as the factory builds it), else one attempt, its
client's retries inside it. An answer cut off at max_tokens is asked again once with
twice the room. What still fails raises a classified ``TransientToolError`` /
``DeterministicToolError`` whose ``usage`` is what the attempts cost. Output that does
not fit the schema is returned as an error text, so the caller can ask again with it.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langgraph.constants import TAG_NOSTREAM
from pydantic import BaseModel, ValidationError

from onward.errors import DeterministicToolError, ToolError, TransientToolError
from onward.llm.context import estimate_tokens, message_tokens, nonce_of
from onward.llm.models import client_retries, for_purpose, is_openai_client, model_name
from onward.llm.usage import cost_of
from onward.model.state import Usage, add_usage
from onward.nodes.deps import NodeDeps
from onward.observe.kinds import EventKind
from onward.settings import settings

T = TypeVar("T", bound=BaseModel)
TRIES = 3
"""Attempts of one call on transient failures (then the failure is the caller's), when
the model's client does not retry on its own."""
RETRY_AFTER_CAP = 60.0
"""Longest ``Retry-After`` slept in-process (seconds); a longer one fails the call."""
CUT_OFF_ROOM = 4096
"""max_tokens of the retry after a cut-off answer, when neither the model's max_tokens
nor the answer's tokens are known (otherwise twice the larger)."""
KEY_HINT = "check OPENAI_API_KEY, OPENAI_BASE_URL and ONWARD_MODEL (or the model you passed)"
_REFUSAL = re.compile(
    r"^\W*(i'?m sorry|i am sorry|sorry, |i can(?:no|')?t\b|i won'?t\b|i'?m (?:not able|unable)"
    r"|i am (?:not able|unable)|i must decline|i'?m afraid i can)",
    re.IGNORECASE,
)
_FENCE = re.compile(r"```[a-zA-Z]*[ \t]*\n?(.*?)```", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Answer:
    parsed: Any
    """The schema instance, or None when ``error`` says why not."""
    error: str | None
    usage: Usage
    """What the call cost: the attempt that answered and every failed one before it."""
    raw: str
    """The answer as sent (a tool call's args as JSON), to show the model again."""
    refusal: str | None = None
    """The model's words when it refused (then ``parsed`` is None and ``error`` says "the
    model refused: ...")."""


@dataclass(slots=True)
class _Call:
    """One :func:`ask_json`: the request, and what its attempts cost so far."""

    deps: NodeDeps
    model: BaseChatModel
    prompt: list[BaseMessage]
    kwargs: dict[str, Any]
    purpose: str
    thread_id: str
    step_id: str | None
    spent: Usage = field(default_factory=Usage)
    attempt: int = 0
    cut_off: bool = False
    """An answer was cut off at max_tokens and asked again already."""
    schema: type[BaseModel] | None = None
    """Set when the model is asked through its structured output (``structured``)."""

    def count(self, usage: Usage) -> None:
        self.spent = add_usage(self.spent, usage)

    def raising(self, failure: ToolError) -> ToolError:
        failure.usage = self.spent
        return failure


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
    """The model's answer in ``schema`` (or why not), counting every attempt's usage;
    raises a classified ToolError (with ``.usage``) when the model cannot be asked.
    ``model``: the run's; a model per role answers with the purpose's role's."""
    model = for_purpose(model, purpose)
    streaming = _streaming_usage(model)
    native = structured(streaming, schema) is not None
    call = _Call(
        deps=deps,
        model=streaming,
        prompt=list(messages) if native else _json_prompt(messages, schema),
        kwargs={},
        purpose=purpose,
        thread_id=thread_id,
        step_id=step_id,
        schema=schema if native else None,
    )
    tries = TRIES if client_retries(model) == 0 else 1
    while True:
        call.attempt += 1
        started = time.monotonic()
        try:
            msg = _invoke(call)
        except Exception as exc:
            wait = _failed(call, exc, started, tries)
            if wait:
                deps.sleep(wait)
            continue
        answer = _answered(call, msg, schema, started)
        if answer is not None:
            return answer


def structured(model: BaseChatModel, schema: type[BaseModel]) -> Runnable[Any, Any] | None:
    """``model`` answering in ``schema`` through its provider's own mechanism
    (``with_structured_output``, the raw message kept), or None when it has none. The
    schema is given as JSON schema, so the answer is parsed here (an answer that does not
    fit is sent back with its problems, never raised by the provider's client)."""
    json_schema = schema.model_json_schema()
    try:
        if _is_openai(model):  # OpenAI's structured output: response_format json_schema
            named = {"name": schema.__name__, "schema": json_schema}
            return model.with_structured_output(named, method="json_schema", include_raw=True)
        return model.with_structured_output(json_schema, include_raw=True)
    except NotImplementedError:
        return None


def _json_prompt(messages: list[BaseMessage], schema: type[BaseModel]) -> list[BaseMessage]:
    """The fallback for a model without structured output: the schema in the prompt."""
    ask = HumanMessage(
        "Answer with one JSON object matching this JSON schema, nothing else:\n"
        + json.dumps(schema.model_json_schema(), ensure_ascii=False)
    )
    return [*messages, ask]


def _invoke(call: _Call) -> BaseMessage:
    """One attempt: the raw message, asked natively when ``call.schema`` is set (with a
    larger ``max_tokens`` after a cut-off answer), else as plain chat."""
    if call.schema is None:
        return call.model.invoke(call.prompt, config=_nostream(), **call.kwargs)
    model = call.model
    if "max_tokens" in call.kwargs:
        model = model.model_copy(update={"max_tokens": call.kwargs["max_tokens"]})
    runnable = structured(model, call.schema)
    assert runnable is not None  # it was structured when the call was made
    out = runnable.invoke(call.prompt, config=_nostream())
    raw = out.get("raw") if isinstance(out, dict) else out
    if not isinstance(raw, BaseMessage):
        raise DeterministicToolError(
            f"model call failed: {model_name(model)}'s structured output returned no message"
        )
    return raw


def _is_openai(model: BaseChatModel) -> bool:
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:  # pragma: no cover - a dependency of onward
        return False
    return isinstance(model, ChatOpenAI)


def _streaming_usage(model: BaseChatModel) -> BaseChatModel:
    """The model, asking for usage when it streams: langchain-openai asks only of
    OpenAI's own URL, and a streaming callback (LangGraph's ``messages`` mode) makes it
    stream any call."""
    if is_openai_client(model) and getattr(model, "stream_usage", None) is not True:
        return model.model_copy(update={"stream_usage": True})
    return model


def _nostream() -> RunnableConfig:
    """The call's config: the node's, tagged so LangGraph's messages stream skips it
    (its raw JSON is onward's business, not the chat's)."""
    tags = ensure_config().get("tags") or []
    return {"tags": [*tags, TAG_NOSTREAM]}


# ----------------------------------------------------------------------------- failures


def _failed(call: _Call, exc: Exception, started: float, tries: int) -> float:
    """Log and count a failed attempt; the seconds to wait before the next, or raise."""
    import openai

    if isinstance(exc, openai.LengthFinishReasonError):
        text, usage, estimated = _completion_usage(call, exc.completion)
        _cut_off(call, usage, estimated, started, text)
        return 0.0
    if isinstance(exc, openai.ContentFilterFinishReasonError):
        _, usage, estimated = _completion_usage(call, exc.completion)
        raise _filtered(call, usage, estimated, started) from exc
    failure = _classify(exc)
    wait = retry_after(exc, call.deps.clock())
    call.count(Usage(calls=1))
    _log(call, None, started, str(failure), retry_after=wait)
    if not isinstance(failure, TransientToolError) or call.attempt >= tries:
        raise call.raising(failure) from exc
    if wait is None:
        return min(0.5 * 2.0 ** (call.attempt - 1), 4.0)
    if wait > RETRY_AFTER_CAP:
        raise call.raising(
            TransientToolError(
                f"{failure}; the provider asks to wait {wait:.0f} s (Retry-After), longer than "
                f"onward waits in-process ({RETRY_AFTER_CAP:.0f} s): try again later",
                usage=call.spent,
            )
        ) from exc
    return wait


def _cut_off(call: _Call, usage: Usage, estimated: bool, started: float, text: str) -> None:
    """An answer cut off at max_tokens: counted, then asked again once with twice the room,
    or a clear failure the second time."""
    call.count(usage)
    tokens = usage.output_tokens
    error = f"the model's answer was cut off at {tokens} tokens (finish_reason length)"
    _log(call, usage, started, error, estimated=estimated, finish="length")
    if call.cut_off:
        room = call.kwargs.get("max_tokens")
        again = f" with max_tokens {room}" if room else ""
        raise call.raising(
            DeterministicToolError(
                f"{error}, also when asked again{again}; raise the model's max_tokens "
                "(ChatOpenAI(max_tokens=...)) or shorten the goal",
                hint="raise the model's max_tokens or shorten the goal",
            )
        )
    call.cut_off = True
    if is_openai_client(call.model):
        own = getattr(call.model, "max_tokens", None)
        call.kwargs["max_tokens"] = 2 * max(own or 0, tokens) or CUT_OFF_ROOM
    call.prompt = [
        *call.prompt,
        AIMessage(text),
        HumanMessage(
            "Your answer was cut off (too long). Send the whole JSON object again, as short "
            "as it can be: no text around it, short descriptions."
        ),
    ]


def _filtered(call: _Call, usage: Usage, estimated: bool, started: float) -> ToolError:
    """An answer the provider's content filter stopped: counted, logged, and the failure."""
    call.count(usage)
    failure = DeterministicToolError(
        "the provider's content filter stopped the model's answer (finish_reason "
        "content_filter); rephrase the goal, or check what the run shows the model",
        hint="rephrase the goal",
    )
    _log(call, usage, started, str(failure), estimated=estimated, finish="content_filter")
    return call.raising(failure)


def _classify(exc: Exception) -> ToolError:
    """openai / httpx errors → onward's classified tool errors."""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if isinstance(status, int):
        if status in (408, 409, 429) or status >= 500:
            return TransientToolError(f"model call failed: HTTP {status}: {exc}")
        return DeterministicToolError(
            f"model call refused: HTTP {status}: {exc}; {KEY_HINT}", hint=KEY_HINT
        )
    import openai
    from langchain_core.exceptions import ModelTimeoutError

    transient = (openai.APIConnectionError, ModelTimeoutError, TimeoutError, ConnectionError)
    if isinstance(exc, transient):
        return TransientToolError(f"model call failed: {name}: {exc}")
    if isinstance(exc, ToolError):
        return exc
    return DeterministicToolError(f"model call failed: {name}: {exc}")


def retry_after(exc: Exception, now: datetime) -> float | None:
    """Seconds the provider asks to wait (``retry-after-ms``, or ``Retry-After`` in seconds
    or as an HTTP date, counted from ``now``), or None."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / scale)
        except ValueError:
            if scale == 1.0:
                return _until(value, now)
    return None


def _until(date: str, now: datetime) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


# ----------------------------------------------------------------------------- answers


def _answered(call: _Call, msg: BaseMessage, schema: type[T], started: float) -> Answer | None:
    """The answer of an attempt that got one (None: cut off, asked again)."""
    text = msg.text
    tokens = getattr(msg, "usage_metadata", None) or {}
    usage, estimated = _usage(
        call, tokens.get("input_tokens"), tokens.get("output_tokens"), text, bool(tokens)
    )
    finish = msg.response_metadata.get("finish_reason")
    if finish == "length":
        _cut_off(call, usage, estimated, started, text)
        return None
    if finish == "content_filter":
        raise _filtered(call, usage, estimated, started)
    call.count(usage)
    calls = [c["args"] for c in getattr(msg, "tool_calls", None) or []]
    refusal = _refusal(msg, text, calls)
    if refusal is not None:
        refused = f"the model refused: {refusal}"
        _log(call, usage, started, refused, estimated=estimated, finish=finish)
        return Answer(parsed=None, error=refused, usage=call.spent, raw=text, refusal=refusal)
    parsed, error = _parse(text, schema, calls)
    _log(call, usage, started, error, estimated=estimated, finish=finish)
    raw = text if text.strip() or not calls else json.dumps(calls[0], ensure_ascii=False)
    return Answer(parsed=parsed, error=error, usage=call.spent, raw=raw)


def _refusal(msg: BaseMessage, text: str, calls: list[dict[str, Any]]) -> str | None:
    """The model's refusal: OpenAI's ``refusal`` field, or an answer that is plainly one
    (it starts like "I'm sorry, I can't" and holds no JSON object and no tool call)."""
    said = msg.additional_kwargs.get("refusal")
    if isinstance(said, str) and said.strip():
        return said.strip()
    body = text.strip()
    if calls or not _REFUSAL.match(body) or next(_objects(body), None) is not None:
        return None
    return body


def _parse(text: str, schema: type[T], calls: Sequence[Any] = ()) -> tuple[T | None, str | None]:
    """The first candidate that fits ``schema``: a tool call's args, the whole answer, an
    object in a fenced block or in prose; else the most telling problem."""
    whole: str | None = None
    found: str | None = None
    try:
        return schema.model_validate_json(text.strip() or "null"), None
    except ValidationError as exc:
        whole = _problems(exc)
    keys = set(schema.model_fields)
    for candidate in _candidates(text, calls):
        if not isinstance(candidate, dict) or not keys & candidate.keys():
            continue
        try:
            return schema.model_validate(candidate), None
        except ValidationError as exc:
            found = found or _problems(exc)
    return None, f"the answer did not fit the schema: {found or whole}"


def _candidates(text: str, calls: Sequence[Any]) -> Iterator[Any]:
    """Objects the answer may mean: tool call args (or the one object inside them), then
    objects in fenced blocks, then top-level objects anywhere in the text."""
    for args in calls:
        yield args
        if isinstance(args, dict) and len(args) == 1:
            yield next(iter(args.values()))
    for block in _FENCE.findall(text):
        yield from _objects(block)
    yield from _objects(text)


def _objects(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects in ``text``, outermost first (what one contains is skipped)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            yield value
        start = text.find("{", end)


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )


# ----------------------------------------------------------------------------- usage


def _usage(
    call: _Call, tokens_in: Any, tokens_out: Any, text: str, reported: bool
) -> tuple[Usage, bool]:
    """One attempt's usage, and whether any of it is an offline estimate (the provider
    sent no usage)."""
    estimated = not reported or tokens_in is None or tokens_out is None
    n_in = int(tokens_in) if reported and tokens_in is not None else message_tokens(call.prompt)
    n_out = int(tokens_out) if reported and tokens_out is not None else estimate_tokens(text)
    cost = cost_of(model_name(call.model), n_in, n_out)
    return Usage(calls=1, input_tokens=n_in, output_tokens=n_out, cost=cost), estimated


def _completion_usage(call: _Call, completion: Any) -> tuple[str, Usage, bool]:
    """The text and usage of an openai completion an error carries (cut off, filtered)."""
    choices = getattr(completion, "choices", None) or []
    message = getattr(choices[0], "message", None) if choices else None
    text = getattr(message, "content", None) or ""
    tokens = getattr(completion, "usage", None)
    if tokens is None:
        return text, *_usage(call, None, None, text, False)
    return text, *_usage(call, tokens.prompt_tokens, tokens.completion_tokens, text, True)


def _log(
    call: _Call,
    usage: Usage | None,
    started: float,
    error: str | None,
    *,
    estimated: bool = False,
    finish: str | None = None,
    retry_after: float | None = None,
) -> None:
    deps = call.deps
    if deps.events is None:
        return
    text = "\n".join(m.text for m in call.prompt)
    try:  # the same prompt has the same digest, whatever its random fence nonce
        stable = text.replace(nonce_of(call.prompt), "NONCE")
    except ValueError:
        stable = text
    detail: dict[str, Any] = {
        "call_id": uuid.uuid4().hex,
        "purpose": call.purpose,
        "step_id": call.step_id,
        "model": model_name(call.model),
        "call_attempt": call.attempt,
        "client_retries": client_retries(call.model),
        "latency": round(time.monotonic() - started, 4),
        "prompt_digest": hashlib.sha256(stable.encode()).hexdigest(),
        "input_tokens": usage.input_tokens if usage else None,
        "output_tokens": usage.output_tokens if usage else None,
        "usage_estimated": estimated,
        "cost": usage.cost if usage else None,
        "finish_reason": finish,
        "error": error,
    }
    if retry_after is not None:
        detail["retry_after"] = retry_after
    if settings().log_prompts:
        detail["prompt"] = text
    deps.events.record(call.thread_id, EventKind.MODEL_CALL, detail)
