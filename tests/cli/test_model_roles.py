"""A model per role: the planner, model steps and the judge each ask their own model
(scripted in Python; the loopback OpenAI server from the command line, where each request
names its model); the command line wins over the environment, which wins over the default;
a provider whose package is missing is a clear error naming what to install."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, ScriptedChatModel, UsageError, chat_model, role_models
from onward.llm.models import ModelChoice, RoleModels, for_purpose, model_from_env, model_name
from tests.support.openai_fake import FakeOpenAI, Reply

OK = {"ok": True, "findings": []}
STEP_PLAN = """\
goal: title the notes
steps:
  - id: title
    tool: model_step
    output: title
    args: {instruction: "Give the notes a short title."}
"""


def _draft() -> dict[str, Any]:
    args = {"instruction": "Give the notes a short title."}
    return {"steps": [{"id": "title", "tool": "model_step", "args_json": json.dumps(args)}]}


def test_the_planner_the_step_and_the_judge_each_ask_their_own_model(
    db_url: str, workdir: Path
) -> None:
    planner = ScriptedChatModel(responses=[_draft()])
    step = ScriptedChatModel(responses=["Revenue up"])
    judge = ScriptedChatModel(default=OK)

    with Onward(db_url, model=role_models(planner=planner, step=step, judge=judge)) as ow:
        view = ow.run("title whatever the notes say, in a way no template knows", judge=True)
        purposes = [
            e.detail["purpose"] for e in ow.store.events.list(view.thread_id, ["model_call"])
        ]

    assert view.status == "done", view
    assert (purposes.count("plan"), purposes.count("step")) == (1, 1)
    assert (len(planner.calls), len(step.calls)) == (1, 1)
    judged = [p for p in purposes if p.startswith("judge")]
    assert judged
    assert len(judge.calls) == len(judged)  # every judging call, and only those
    assert "Give the notes a short title." in "\n".join(m.text for m in step.calls[0])


def test_a_role_without_its_own_model_asks_the_default() -> None:
    default, judge = ScriptedChatModel(), ScriptedChatModel()
    models = role_models(default, judge=judge)

    assert isinstance(models, RoleModels)
    assert for_purpose(models, "judge") is judge
    assert for_purpose(models, "judge-goal") is judge
    assert for_purpose(models, "plan") is default
    assert for_purpose(models, "replan") is default
    assert for_purpose(models, "step") is default
    assert for_purpose(judge, "plan") is judge  # one model: every role's


# -- which model: command line > environment > default ------------------------------------

LOOPBACK = {
    "OPENAI_API_KEY": "sk-test",
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "ONWARD_BLOCK_MODEL_REQUESTS": "1",
}


def names(env: dict[str, str], choice: ModelChoice | None = None) -> dict[str, str]:
    model = model_from_env({**LOOPBACK, **env}, choice)
    assert model is not None
    return {p: model_name(for_purpose(model, p)) for p in ("plan", "step", "judge")}


@pytest.mark.parametrize(
    ("env", "choice", "expected"),
    [
        ({}, None, ("gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini")),
        ({"ONWARD_MODEL": "openai:m-env"}, None, ("m-env", "m-env", "m-env")),
        (
            {"ONWARD_MODEL": "m-env", "ONWARD_JUDGE_MODEL": "j-env"},
            None,
            ("m-env", "m-env", "j-env"),
        ),
        ({"ONWARD_PLANNER_MODEL": "openai:p-env"}, None, ("p-env", "gpt-4o-mini", "gpt-4o-mini")),
        ({"ONWARD_JUDGE_MODEL": "j-env"}, ModelChoice(model="m-cli"), ("m-cli", "m-cli", "m-cli")),
        (
            {"ONWARD_MODEL": "m-env", "ONWARD_STEP_MODEL": "s-env"},
            ModelChoice(judge="openai:j-cli"),
            ("m-env", "s-env", "j-cli"),
        ),
        (
            {"ONWARD_PLANNER_MODEL": "p-env"},
            ModelChoice(model="m-cli", planner="p-cli"),
            ("p-cli", "m-cli", "m-cli"),
        ),
    ],
)
def test_each_roles_model_is_the_command_lines_else_the_environments_else_the_default(
    env: dict[str, str], choice: ModelChoice | None, expected: tuple[str, str, str]
) -> None:
    assert names(env, choice) == dict(zip(("plan", "step", "judge"), expected, strict=True))


def test_a_name_with_colons_but_no_known_provider_is_openais_as_before() -> None:
    model = model_from_env({**LOOPBACK, "ONWARD_MODEL": "ft:gpt-4o-mini:acme::abc123"})

    assert model_name(model) == "ft:gpt-4o-mini:acme::abc123"  # type: ignore[arg-type]


def test_one_model_for_every_role_is_that_model_not_a_role_map() -> None:
    model = model_from_env({**LOOPBACK, "ONWARD_MODEL": "same", "ONWARD_JUDGE_MODEL": "same"})

    assert not isinstance(model, RoleModels)
    assert model_name(model) == "same"  # type: ignore[arg-type]


def test_no_key_and_no_model_named_is_no_model_as_before() -> None:
    assert model_from_env({"ONWARD_JUDGE_MODEL": "openai:j"}) is None
    with pytest.raises(UsageError, match="needs OPENAI_API_KEY"):
        model_from_env({}, ModelChoice(model="openai:gpt-4o"))


# -- the command line, against the loopback OpenAI server ----------------------------------


@pytest.fixture
def api() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def test_run_with_role_models_sends_each_call_to_its_model(
    run_cli: Any, workdir: Path, api: FakeOpenAI
) -> None:
    (workdir / "plan.yaml").write_text(STEP_PLAN, encoding="utf-8")
    api.script = [Reply(text="Revenue up")]
    api.default = Reply(json=OK)
    env = {
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": api.base_url,
        "ONWARD_MODEL": "env-model",
        "ONWARD_JUDGE_MODEL": "openai:env-judge",
    }

    result = run_cli(
        "run",
        "--plan",
        "plan.yaml",
        "--judge",
        "--step-model",
        "openai:cli-step",
        "--json",
        env=env,
    )

    assert result.code == 0, result.stdout + result.stderr
    models = [body["model"] for body in api.requests]
    assert models[0] == "cli-step"  # the step: the command line's
    assert set(models[1:]) == {"env-judge"}  # the judge: the environment's, over ONWARD_MODEL
    assert len(models) >= 2


@pytest.mark.parametrize(
    ("option", "package"),
    [("--model", "langchain-anthropic"), ("--planner-model", "langchain-ollama")],
)
def test_a_provider_whose_package_is_missing_is_a_usage_error_naming_it(
    run_cli: Any, workdir: Path, option: str, package: str
) -> None:
    (workdir / "plan.yaml").write_text(STEP_PLAN, encoding="utf-8")
    spec = "anthropic:claude-sonnet-4-5" if "anthropic" in package else "ollama:llama3.1"

    result = run_cli("run", "--plan", "plan.yaml", option, spec)

    assert result.code == 2, result.stdout + result.stderr
    assert f"pip install {package}" in result.stderr
    assert "Traceback" not in result.stderr


def test_chat_model_builds_a_provider_string_with_onwards_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in LOOPBACK.items():
        monkeypatch.setenv(name, value)

    model = chat_model("openai:gpt-4o")

    assert model_name(model) == "gpt-4o"
    assert getattr(model, "max_retries", None) == 0  # onward retries, not the client
    with pytest.raises(UsageError, match="pip install langchain-anthropic"):
        chat_model("anthropic:claude-sonnet-4-5")


def test_a_serve_assistants_own_models_answer_its_runs_and_the_servers_the_others(
    db_url: str, workdir: Path, api: FakeOpenAI
) -> None:
    import httpx

    from tests.support.serve import serve

    config = workdir.parent / "serve.yaml"
    config.write_text("assistants:\n  cheap:\n    models: {step: 'openai:assistant-step'}\n")
    api.default = Reply(text="Revenue up")
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": api.base_url, "ONWARD_MODEL": "served"}
    args = {"instruction": "Give the notes a short title."}
    plan = {"goal": "title", "plan": {"steps": [{"id": "t", "tool": "model_step", "args": args}]}}
    with (
        serve(db_url, workdir, "--config", str(config), **env) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        for assistant in ("cheap", "onward"):
            tid = client.post("/threads", json={}).json()["thread_id"]
            body = {"assistant_id": assistant, "input": plan}
            assert client.post(f"/threads/{tid}/runs/wait", json=body).status_code == 200

    assert [body["model"] for body in api.requests] == ["assistant-step", "served"]


def test_an_assistant_made_over_http_cannot_choose_its_models(db_url: str, workdir: Path) -> None:
    import httpx

    from tests.support.serve import serve

    with (
        serve(db_url, workdir) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        made = client.post(
            "/assistants", json={"graph_id": "onward", "context": {"models": {"step": "x"}}}
        )
        count = client.post("/assistants/count", json={}).json()

    assert made.status_code == 403, made.text
    assert "may not choose its own models" in made.json()["detail"]
    assert count == 1
