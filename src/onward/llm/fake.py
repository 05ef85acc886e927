"""``ScriptedChatModel``: a chat model that answers from a script, for tests (onward's and
yours), like pydantic-ai's ``TestModel``. No network, deterministic, and it records
every prompt so a test can assert what the model was shown.

    model = ScriptedChatModel(responses=[
        {"steps": [{"id": "a", "tool": "noop", "args_json": "{}"}]},   # the plan
        lambda messages: {"ok": True, "findings": []},                  # a judge verdict
    ])

A response is a JSON-able value (dict, list, pydantic model: sent as JSON text), a
string (sent as is), an ``AIMessage`` (sent as is: tool calls, ``additional_kwargs``
such as a ``refusal``, ``response_metadata`` such as ``finish_reason``), an exception
(raised: to test failures), or a function of the prompt messages returning one of
those. Usage metadata is filled from an offline token estimate (unless an AIMessage
brings its own), so budgets and usage accounting work as with a real model.

Tools bind as on any chat model (``model.bind_tools([...])``, LangChain's public API):
the tools offered with each call are kept in ``tools_offered``, and a scripted answer
calls them with :func:`tool_calls`::

    model = ScriptedChatModel(responses=[
        tool_calls(("read_file", {"path": "notes.txt"})),      # the model calls a tool
        "The notes say revenue is up.",                          # then answers
    ])

It has no structured output by default (``with_structured_output`` raises
``NotImplementedError``), so onward asks it for JSON in the prompt, as any model without
one. ``structured_output=True`` gives it LangChain's own (through tool calling): a call
that asks for a schema offers the schema's tool (``PlanDraft``, ``ModelStepOutput``,
``Verdict``), and a scripted ``tool_calls(("ModelStepOutput", {...}))`` answers it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field

from onward.errors import ScriptExhaustedError as ScriptExhaustedError
from onward.llm.context import estimate_tokens, message_tokens


class ScriptedChatModel(BaseChatModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    responses: list[Any] = Field(default_factory=list)
    """Answers in order (see the module docstring)."""
    default: Any = None
    """Answer used once ``responses`` is used up (None: raise ScriptExhaustedError)."""
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    """Every prompt the model received, in order."""
    model_name: str = "scripted"
    tools_offered: list[list[str]] = Field(default_factory=list)
    """The names of the tools bound to each call, in order (``[]`` for a call without)."""
    structured_output: bool = False
    """Whether it has structured output (LangChain's ``with_structured_output``, through
    tool calling: answer such a call with :func:`tool_calls`). False, the default: it has
    none, so onward asks it for JSON in the prompt, as a model without such support."""

    @property
    def _llm_type(self) -> str:
        return "onward-scripted"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model with ``tools`` offered to every call (as OpenAI tool schemas, the form
        providers receive), recorded in :attr:`tools_offered`."""
        schemas = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=schemas, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        include_raw: bool = False,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """LangChain's structured output (through tool calling) when
        :attr:`structured_output` is set; else ``NotImplementedError``, as a model without it."""
        if not self.structured_output:
            raise NotImplementedError("this ScriptedChatModel has no structured output")
        return super().with_structured_output(schema, include_raw=include_raw, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append(list(messages))
        self.tools_offered.append([t["function"]["name"] for t in kwargs.get("tools") or []])
        index = len(self.calls) - 1
        if index < len(self.responses):
            answer = self.responses[index]
        elif self.default is not None:
            answer = self.default
        else:
            raise ScriptExhaustedError(
                f"ScriptedChatModel was called {index + 1} times but scripts "
                f"{len(self.responses)} answers; add answers or a default"
            )
        if callable(answer) and not isinstance(answer, BaseModel):
            answer = answer(messages)
        if isinstance(answer, BaseException):
            raise answer
        message = answer if isinstance(answer, AIMessage) else AIMessage(content=_text(answer))
        if message.usage_metadata is None:
            tokens_in, tokens_out = message_tokens(messages), estimate_tokens(message.text)
            usage = UsageMetadata(
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                total_tokens=tokens_in + tokens_out,
            )
            message = message.model_copy(update={"usage_metadata": usage})
        return ChatResult(generations=[ChatGeneration(message=message)])


def _text(answer: Any) -> str:
    if isinstance(answer, str):
        return answer
    if isinstance(answer, BaseModel):
        return answer.model_dump_json()
    return json.dumps(answer, ensure_ascii=False)


def tool_calls(*calls: tuple[str, dict[str, Any]], text: str = "") -> AIMessage:
    """A scripted answer that calls tools: ``tool_calls(("name", {args}), ...)``, with
    call ids ``call_0``, ``call_1``... unique within the answer."""
    return AIMessage(
        text,
        tool_calls=[
            {"name": name, "args": args, "id": f"call_{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls)
        ],
    )
