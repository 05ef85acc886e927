"""What real models send over the wire, through ``ChatOpenAI`` against a loopback
OpenAI-compatible server (tests/support/openai_fake.py): plans wrapped in prose or sent as a tool
call are understood; refusals, cut-off answers, rate limits, server errors and a wrong key
end the run clearly (the CLI prints the hint, no traceback) and never execute a broken
plan; every attempt's tokens are counted, streamed or not, estimated (and flagged) when the
server sends no usage; an unpriced model under a cost budget is warned about."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from datetime import timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from onward import Onward
from onward.errors import DeterministicToolError, TransientToolError, UnpricedModelWarning
from onward.llm.calls import ask_json
from onward.llm.planner import PlanDraft
from onward.model.state import Budget
from onward.nodes.deps import NodeDeps
from onward.testing.clock import FakeTime
from tests.support.openai_fake import FakeOpenAI, Reply

GOAL = "something only a model can plan"
KEY_HINT = "check OPENAI_API_KEY, OPENAI_BASE_URL and ONWARD_MODEL"


def _plan() -> dict[str, Any]:
    args = {"path": "title.txt", "content": "Quarterly report"}
    return {"steps": [{"id": "title", "tool": "write_file", "args_json": json.dumps(args)}]}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("ONWARD_MODEL", "gpt-4o-mini")
        monkeypatch.setenv("ONWARD_MODEL_TIMEOUT", "5")
        yield server


def _cli_env(api: FakeOpenAI, **extra: str) -> dict[str, str]:
    return {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": api.base_url, **extra}


def _model(api: FakeOpenAI, **settings: Any) -> ChatOpenAI:
    settings = {"model": "gpt-4o-mini", "timeout": 5, **settings}
    return ChatOpenAI(api_key="sk-test", base_url=api.base_url, **settings)


def _calls(ow: Onward, thread_id: str) -> list[dict[str, Any]]:
    return [e.detail for e in ow.store.events.list(thread_id, ["model_call"])]


# ----------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    "text",
    [
        "Here is the plan:\n```json\n{plan}\n```\nLet me know if you want changes.",
        "Sure! {plan} Hope this helps.",
        "Thinking {{about it}} first.\n```\n{plan}\n```",
    ],
    ids=["fenced-in-prose", "bare-in-prose", "after-a-brace-in-prose"],
)
def test_a_plan_wrapped_in_prose_is_understood_and_runs(
    api: FakeOpenAI, db_url: str, workdir: Path, text: str
) -> None:
    api.script = [Reply(text=text.format(plan=json.dumps(_plan())), prompt_tokens=300)]
    with Onward(db_url) as ow:
        view = ow.run(GOAL)
        state = ow.state(view.thread_id)
    assert view.status == "done", view.failure
    assert (workdir / "title.txt").read_text() == "Quarterly report"
    assert len(api.requests) == 1  # understood the first time, not asked again
    assert (state.usage.calls, state.usage.input_tokens, state.usage.output_tokens) == (1, 300, 20)


def test_a_plan_sent_as_a_tool_call_is_taken_from_its_args(
    api: FakeOpenAI, db_url: str, workdir: Path
) -> None:
    api.script = [Reply(tool_args=_plan())]
    with Onward(db_url) as ow:
        view = ow.run(GOAL)
    assert view.status == "done", view.failure
    assert (workdir / "title.txt").read_text() == "Quarterly report"
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    "reply",
    [
        Reply(refusal="I can't help with writing reports about people."),
        Reply(text="I'm sorry, but I can't help with writing reports about people."),
    ],
    ids=["refusal-field", "refusal-in-content"],
)
def test_a_refusal_ends_planning_with_the_models_words(
    api: FakeOpenAI, db_url: str, workdir: Path, reply: Reply
) -> None:
    api.script = [reply]
    with Onward(db_url) as ow:
        view = ow.run(GOAL)
        [call] = _calls(ow, view.thread_id)
    assert view.status == "failed"
    assert view.failure is not None
    assert "help with writing reports about people" in view.failure.message
    assert len(api.requests) == 1  # a refusal is not asked again blindly
    assert call["error"].startswith("the model refused: ")
    assert view.usage.input_tokens == 100  # counted
    assert not (workdir / "title.txt").exists()


def test_a_cut_off_answer_is_asked_again_with_twice_the_room(
    api: FakeOpenAI, db_url: str, workdir: Path
) -> None:
    cut = '{"steps": [{"id": "title", "tool": "write_file", "args_json": "{\\"pa'
    api.script = [
        Reply(text=cut, finish_reason="length", completion_tokens=64),
        Reply(json=_plan(), completion_tokens=30),
    ]
    with Onward(db_url) as ow:
        view = ow.run(GOAL)
        calls = _calls(ow, view.thread_id)
    assert view.status == "done", view.failure
    assert "max_completion_tokens" not in api.requests[0]
    assert api.requests[1]["max_completion_tokens"] == 128
    assert [c["finish_reason"] for c in calls] == ["length", "stop"]
    assert (view.usage.calls, view.usage.output_tokens) == (2, 64 + 30)  # both counted


def test_an_answer_cut_off_twice_fails_clearly_and_counts_its_tokens(
    api: FakeOpenAI, db_url: str, workdir: Path
) -> None:
    cut = '{"steps": [{"id": "title", "tool": "write_file", "args_json": "{\\"pa'
    api.default = Reply(text=cut, finish_reason="length", completion_tokens=64)
    with Onward(db_url) as ow:
        view = ow.run(GOAL)
        calls = _calls(ow, view.thread_id)
    assert view.status == "failed"
    assert view.failure is not None
    message = view.failure.message
    assert "cut off at 64 tokens (finish_reason length)" in message
    assert "also when asked again with max_tokens 128" in message
    assert "shorten the goal" in message
    assert len(api.requests) == 2  # asked again once, not more
    assert [c["output_tokens"] for c in calls] == [64, 64]
    assert (view.usage.input_tokens, view.usage.output_tokens) == (200, 128)
    assert not (workdir / "title.txt").exists()  # no cut-off plan ran


def test_a_content_filter_stop_fails_clearly(api: FakeOpenAI, db_url: str, workdir: Path) -> None:
    api.script = [Reply(text="", finish_reason="content_filter")]
    with Onward(db_url) as ow:
        view = ow.run(GOAL)
    assert view.status == "failed"
    assert view.failure is not None
    assert "content filter" in view.failure.message
    assert len(api.requests) == 1
    assert not (workdir / "title.txt").exists()


# ----------------------------------------------------------------------------- failures


START = FakeTime().now


@pytest.mark.parametrize(
    ("headers", "slept"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"Retry-After": format_datetime(START + timedelta(seconds=30), usegmt=True)}, 30.0),
    ],
    ids=["seconds", "milliseconds", "http-date"],
)
def test_a_429_waits_as_long_as_retry_after_says(
    api: FakeOpenAI, db_url: str, workdir: Path, headers: dict[str, str], slept: float
) -> None:
    api.script = [Reply(status=429, headers=headers), Reply(json=_plan())]
    time = FakeTime(START)
    with Onward(db_url, clock=time.clock, sleep=time.sleep) as ow:
        view = ow.run(GOAL)
        calls = _calls(ow, view.thread_id)
    assert view.status == "done", view.failure
    assert time.slept == [slept]
    assert calls[0]["retry_after"] == slept
    assert view.usage.calls == 2  # the refused attempt is a call too (no tokens)
    assert (view.usage.input_tokens, view.usage.output_tokens) == (100, 20)


def test_a_retry_after_longer_than_a_minute_fails_instead_of_sleeping(
    api: FakeOpenAI, db_url: str, workdir: Path
) -> None:
    api.default = Reply(status=429, headers={"Retry-After": "3600"})
    time = FakeTime()
    with Onward(db_url, sleep=time.sleep) as ow:
        view = ow.run(GOAL)
    assert view.status == "failed"
    assert view.failure is not None
    assert "wait 3600 s (Retry-After)" in view.failure.message
    assert time.slept == []
    assert len(api.requests) == 1


def test_a_persistent_500_fails_the_cli_run_clearly(api: FakeOpenAI, run_cli: Any) -> None:
    # retry-after-ms: the server asks for a 1 ms pause, so the real backoff costs nothing.
    api.default = Reply(status=500, headers={"retry-after-ms": "1"})
    result = run_cli("run", GOAL, "--thread-id", "t-500", env=_cli_env(api))
    assert result.code == 2, result.stderr
    assert "model call failed: HTTP 500" in result.stdout  # the run's failure, printed
    assert "Traceback" not in result.stderr + result.stdout
    assert len(api.requests) == 3  # onward's 3 tries, the client retrying none itself
    status = run_cli("status", "t-500", "--json", env=_cli_env(api))
    assert status.json()["status"] == "failed"  # not left running


def test_a_wrong_key_prints_the_hint_and_exits_2(api: FakeOpenAI, run_cli: Any) -> None:
    api.default = Reply(status=401)
    result = run_cli("run", GOAL, "--thread-id", "t-401", env=_cli_env(api))
    assert result.code == 2, result.stderr
    said = " ".join(result.stdout.split())
    assert "HTTP 401" in said
    assert KEY_HINT in said  # the failure's message itself says what to check
    assert "Traceback" not in result.stderr + result.stdout
    assert len(api.requests) == 1  # a wrong key is not retried
    status = run_cli("status", "t-401", "--json", env=_cli_env(api))
    assert status.json()["status"] == "failed"


def test_a_users_client_retries_are_not_multiplied_by_onwards(
    api: FakeOpenAI, db_url: str, workdir: Path
) -> None:
    api.default = Reply(status=500, headers={"retry-after-ms": "1"})
    time = FakeTime()
    model = _model(api, max_retries=2)  # the openai client's own retries
    with Onward(db_url, model=model, sleep=time.sleep) as ow:
        view = ow.run(GOAL)
        calls = _calls(ow, view.thread_id)
    assert view.status == "failed"
    assert len(api.requests) == 3  # one onward attempt: the client's request and 2 retries
    assert [(c["call_attempt"], c["client_retries"]) for c in calls] == [(1, 2)]
    assert time.slept == []  # the client waited itself; onward did not add its backoff


# ----------------------------------------------------------------------------- usage


def test_missing_usage_is_estimated_and_flagged(
    api: FakeOpenAI, db_url: str, workdir: Path
) -> None:
    api.script = [Reply(json=_plan(), usage=False)]
    with Onward(db_url) as ow:
        view = ow.run(GOAL)
        [call] = _calls(ow, view.thread_id)
    assert view.status == "done", view.failure
    assert call["usage_estimated"] is True
    assert call["input_tokens"] == view.usage.input_tokens > 0
    assert call["output_tokens"] == view.usage.output_tokens > 0


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
def test_a_streamed_call_is_counted_like_a_plain_one(
    api: FakeOpenAI, db_url: str, workdir: Path, streaming: bool
) -> None:
    api.script = [Reply(json=_plan(), prompt_tokens=5777, completion_tokens=321)]
    model = _model(api, max_retries=0, streaming=streaming)  # stream_usage left unset
    with Onward(db_url, model=model) as ow:
        view = ow.run(GOAL)
        [call] = _calls(ow, view.thread_id)
    assert view.status == "done", view.failure
    assert api.streamed == [streaming]
    if streaming:  # onward asked for the usage langchain-openai asks only of OpenAI's URL
        assert api.requests[0]["stream_options"] == {"include_usage": True}
    assert (view.usage.input_tokens, view.usage.output_tokens) == (5777, 321)
    assert call["usage_estimated"] is False


# ----------------------------------------------------------------------------- prices


def test_an_unpriced_model_under_a_cost_budget_is_warned_about(
    api: FakeOpenAI, run_cli: Any, db_url: str
) -> None:
    api.script = [Reply(json=_plan())]
    env = _cli_env(api, ONWARD_MODEL="llama3")
    result = run_cli("run", GOAL, "--max-cost", "0.5", "--thread-id", "t-llama", env=env)
    assert result.code == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "warning: the model 'llama3' has no price" in said
    assert """ONWARD_PRICES='{"llama3": [in_per_million, out_per_million]}'""" in said
    with Onward(db_url, model=None) as ow:
        [event] = ow.store.events.list("t-llama", ["budget_warning"])
    assert event.detail["marker"] == "unpriced_model"
    assert "ONWARD_PRICES" in event.detail["text"]


def test_a_priced_model_under_a_cost_budget_is_not_warned_about(
    api: FakeOpenAI, run_cli: Any
) -> None:
    api.script = [Reply(json=_plan())]
    env = _cli_env(api, ONWARD_MODEL="llama3", ONWARD_PRICES='{"llama3": [0, 0]}')
    result = run_cli("run", GOAL, "--max-cost", "0.5", env=env)
    assert result.code == 0, result.stderr
    assert "warning:" not in result.stderr


def test_python_users_get_the_unpriced_model_warning_too(db_url: str, workdir: Path) -> None:
    with FakeOpenAI() as api, Onward(db_url, model=_model(api, model="my-azure-deployment")) as ow:
        with pytest.warns(UnpricedModelWarning, match="my-azure-deployment"):
            ow.start(GOAL, budget=Budget(max_cost=1.0))
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnpricedModelWarning)
            ow.start(GOAL)  # no cost budget: nothing to warn about


# ----------------------------------------------------------------------------- ask_json


@pytest.fixture
def deps(db_url: str, workdir: Path) -> Iterator[NodeDeps]:
    with Onward(db_url, model=None) as ow:
        yield NodeDeps(registry=ow.registry, artifacts=ow.store.artifacts, sleep=FakeTime().sleep)


def _ask(deps: NodeDeps, model: ChatOpenAI) -> Any:
    from langchain_core.messages import HumanMessage

    return ask_json(deps, model, [HumanMessage("plan")], PlanDraft, purpose="plan", thread_id="t")


def test_an_answer_counts_the_failed_attempts_before_it(api: FakeOpenAI, deps: NodeDeps) -> None:
    cut = '{"steps": ['
    api.script = [
        Reply(status=503),
        Reply(text=cut, finish_reason="length", prompt_tokens=10, completion_tokens=7),
        Reply(json=_plan(), prompt_tokens=20, completion_tokens=5),
    ]
    answer = _ask(deps, _model(api, max_retries=0))
    assert answer.parsed is not None
    assert answer.refusal is None
    assert (answer.usage.calls, answer.usage.input_tokens, answer.usage.output_tokens) == (
        3,
        30,
        12,
    )


def test_a_refusal_is_an_answer_with_the_models_words(api: FakeOpenAI, deps: NodeDeps) -> None:
    api.script = [Reply(refusal="I won't plan that.")]
    answer = _ask(deps, _model(api, max_retries=0))
    assert (answer.parsed, answer.refusal) == (None, "I won't plan that.")
    assert answer.error == "the model refused: I won't plan that."
    assert answer.usage.input_tokens == 100


def test_a_failure_carries_what_its_attempts_cost(api: FakeOpenAI, deps: NodeDeps) -> None:
    api.default = Reply(text="{", finish_reason="length", completion_tokens=9)
    with pytest.raises(DeterministicToolError, match="cut off") as cut:
        _ask(deps, _model(api, max_retries=0))
    assert cut.value.usage is not None
    assert (cut.value.usage.calls, cut.value.usage.output_tokens) == (2, 18)
    api.default = Reply(status=500)
    with pytest.raises(TransientToolError, match="HTTP 500") as failed:
        _ask(deps, _model(api, max_retries=0))
    assert failed.value.usage is not None
    assert (failed.value.usage.calls, failed.value.usage.input_tokens) == (3, 0)
