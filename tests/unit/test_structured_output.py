"""Structured output through the provider's own mechanism: a model step with a JSON schema,
the planner and the judge ask a chat model that has structured output through LangChain's
``with_structured_output`` (here a small chat model with tool calling, so LangChain's own
implementation forces a tool call of the schema; and ``ChatOpenAI`` against the loopback
FakeOpenAI, with ``response_format``), and a model without it (``NotImplementedError``)
for JSON in the prompt. An answer that does not fit still goes back with its findings."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from onward import Budget, Onward, RunPolicy, ScriptedChatModel
from onward.llm.fake import tool_calls
from tests.support.model_steps import NOTES, plan, prompt
from tests.support.openai_fake import FakeOpenAI, Reply

JSON_ASK = "Answer with one JSON object matching this JSON schema"


class ToolCallingChatModel(BaseChatModel):
    """A chat model with tool calling and nothing else: LangChain's default
    ``with_structured_output`` binds the schema as a tool and forces it. Each answer (a
    dict) comes back as a call of the tool it was forced to call; every request is
    recorded (its prompt, the tools offered, the tool choice)."""

    answers: list[Any] = Field(default_factory=list)
    asked: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "test-tool-calling"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        schemas = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=schemas, tool_choice=tool_choice, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = [t["function"] for t in kwargs.get("tools") or []]
        self.asked.append(
            {
                "prompt": "\n".join(m.text for m in messages),
                "tools": [t["name"] for t in tools],
                "tool_choice": kwargs.get("tool_choice"),
                "schema": tools[0]["parameters"] if tools else None,
            }
        )
        answer = self.answers[len(self.asked) - 1]
        if isinstance(answer, dict) and tools:
            message = tool_calls((tools[0]["name"], answer))
        else:
            message = AIMessage(json.dumps(answer) if isinstance(answer, dict) else answer)
        usage = UsageMetadata(input_tokens=50, output_tokens=10, total_tokens=60)
        message = message.model_copy(update={"usage_metadata": usage})
        return ChatResult(generations=[ChatGeneration(message=message)])


def notes(workdir: Path) -> None:
    (workdir / "notes.txt").write_text(NOTES, encoding="utf-8")


def test_a_model_steps_schema_is_asked_through_the_models_structured_output(
    db_url: str, workdir: Path
) -> None:
    notes(workdir)
    model = ToolCallingChatModel(
        answers=[{"title": "A title far too long for the schema"}, {"title": "Revenue up 20 %"}]
    )
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())
        value = view.artifact_value(ow, "title")
        state = ow.state(view.thread_id)

    assert view.status == "done", view
    assert value == {"title": "Revenue up 20 %"}
    first, second = model.asked
    # Both rounds: the contract as the one tool, forced (LangChain's structured output),
    # not as JSON in the prompt.
    assert [a["tools"] for a in model.asked] == [["ModelStepOutput"]] * 2
    assert all(a["tool_choice"] == "any" for a in model.asked)
    assert first["schema"]["properties"]["title"]["maxLength"] == 20
    assert all(JSON_ASK not in a["prompt"] for a in model.asked)
    # The answer that did not fit went back with the checks' findings.
    assert "String should have at most 20 characters" in second["prompt"]
    assert state.usage.calls == 2
    assert state.usage.input_tokens == 100  # the raw messages' usage, as reported


def test_the_planner_and_the_judge_ask_through_structured_output(
    db_url: str, workdir: Path
) -> None:
    draft = {"steps": [{"id": "a", "tool": "noop", "args_json": json.dumps({"value": 1})}]}
    model = ToolCallingChatModel(
        answers=[draft, {"ok": True, "findings": []}, {"ok": True, "findings": []}]
    )
    with Onward(db_url, model=model) as ow:
        view = ow.run("something only a model can plan", judge=True)

    assert view.status == "done", view
    assert [a["tools"] for a in model.asked] == [["PlanDraft"], ["Verdict"], ["Verdict"]]
    assert all(JSON_ASK not in a["prompt"] for a in model.asked)


def test_a_model_without_structured_output_is_asked_for_json_in_the_prompt(
    db_url: str, workdir: Path
) -> None:
    notes(workdir)
    model = ScriptedChatModel(responses=[{"title": "Revenue up 20 %"}])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())

    assert view.status == "done", view
    assert JSON_ASK in prompt(model.calls[0])
    assert model.tools_offered == [[]]  # no tool was bound: plain chat


def test_a_scripted_model_told_it_has_structured_output_is_asked_through_it(
    db_url: str, workdir: Path
) -> None:
    notes(workdir)
    forced = tool_calls(("ModelStepOutput", {"title": "Revenue up 20 %"}))
    model = ScriptedChatModel(responses=[forced], structured_output=True)
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())
        value = view.artifact_value(ow, "title")

    assert view.status == "done", view
    assert value == {"title": "Revenue up 20 %"}
    assert model.tools_offered == [["ModelStepOutput"]]
    assert JSON_ASK not in prompt(model.calls[0])


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("ONWARD_MODEL", "gpt-4o-mini")
        monkeypatch.setenv("ONWARD_MODEL_TIMEOUT", "5")
        yield server


def test_chat_openai_answers_a_model_step_through_response_format(
    api: FakeOpenAI, db_url: str, workdir: Path
) -> None:
    notes(workdir)
    api.script = [
        Reply(json={"title": "A title far too long for the schema"}),
        Reply(json={"title": "Revenue up 20 %"}),
    ]
    with Onward(db_url) as ow:
        view = ow.run(plan=plan())
        value = view.artifact_value(ow, "title")

    assert view.status == "done", view
    assert value == {"title": "Revenue up 20 %"}
    first, second = api.requests
    for request in (first, second):
        wire = request["response_format"]
        assert wire["type"] == "json_schema"
        assert wire["json_schema"]["name"] == "ModelStepOutput"
        assert wire["json_schema"]["schema"]["properties"]["title"]["maxLength"] == 20
        assert JSON_ASK not in json.dumps(request["messages"])
    assert "String should have at most 20 characters" in json.dumps(second["messages"])


def test_a_chat_openai_refusal_through_structured_output_fails_the_step_with_its_words(
    api: FakeOpenAI, db_url: str, workdir: Path
) -> None:
    notes(workdir)
    api.script = [Reply(refusal="I can't title these notes")]
    with Onward(db_url) as ow:
        view = ow.run(
            plan=plan(), budget=Budget(max_replans=0), policy=RunPolicy(escalate_failures=False)
        )

    step = next(s for s in view.steps if s.id == "title")
    assert (view.status, step.status) == ("failed", "failed"), view
    assert step.error is not None
    assert "the model refused: I can't title these notes" in step.error
    assert len(api.requests) == 1
