"""Limits on planning: the run policy's ``max_plan_steps`` (model drafts, declared plans,
``for_each`` expansions, revisions; a start request over HTTP may lower it, never raise
it), the token budget checked between drafts, and what of the work directory a model
planner is shown (never onward's store, never hidden files)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from langchain_core.messages import AIMessage, BaseMessage

from onward import Onward, PlanValidationError, RunPolicy
from onward.llm.fake import ScriptedChatModel
from onward.model.state import Budget, Plan, PlanStep
from tests.support.security import TOKENS, auth, start
from tests.support.serve import serve


def _noops(*ids: str) -> dict[str, Any]:
    return {
        "steps": [{"id": i, "tool": "noop", "args_json": json.dumps({"value": i})} for i in ids]
    }


def _prompt(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(m.text for m in messages)


def test_a_model_plan_over_the_limit_is_sent_back_and_a_smaller_one_accepted(
    db_url: str, workdir: Path
) -> None:
    model = ScriptedChatModel(responses=[_noops("a", "b", "c", "d", "e"), _noops("a", "b")])
    with Onward(db_url, model=model) as ow:
        view = ow.run("count things no template knows", policy=RunPolicy(max_plan_steps=3))
    assert view.status == "done", view.failure
    assert [s.id for s in view.steps] == ["a", "b"]
    assert "A plan holds at most 3 steps" in _prompt(model.calls[0])
    told = _prompt(model.calls[1])
    assert "5 steps; this run allows at most 3 (max_plan_steps): use for_each" in told


def test_a_declared_plan_over_the_limit_is_refused_with_the_limit(db_url: str) -> None:
    plan = Plan(steps=[PlanStep(id=f"s{i}", tool="noop") for i in range(4)])
    with Onward(db_url) as ow:
        with pytest.raises(PlanValidationError) as info:
            ow.start("four steps", plan=plan, policy=RunPolicy(max_plan_steps=3))
        assert ow.start("four steps", plan=plan, policy=RunPolicy(max_plan_steps=4))
    message = str(info.value)
    assert "4 steps; this run allows at most 3 (max_plan_steps)" in message
    assert "--max-plan-steps" in message


def test_the_cli_refuses_a_declared_plan_over_the_limit_with_exit_2(
    run_cli: Any, workdir: Path
) -> None:
    steps = [{"id": f"s{i}", "tool": "noop", "args": {"value": i}} for i in range(301)]
    (workdir / "plan.yaml").write_text(yaml.safe_dump({"goal": "many", "steps": steps}))
    refused = run_cli("run", "--plan", "plan.yaml")
    assert refused.code == 2
    assert "301 steps; this run allows at most 300 (max_plan_steps)" in refused.stderr
    assert "--max-plan-steps" in refused.stderr
    (workdir / "small.yaml").write_text(yaml.safe_dump({"goal": "few", "steps": steps[:3]}))
    assert run_cli("run", "--plan", "small.yaml", "--max-plan-steps", "2").code == 2
    assert run_cli("run", "--plan", "small.yaml", "--max-plan-steps", "3").code == 0


def test_a_for_each_expansion_over_the_limit_is_refused(db_url: str, workdir: Path) -> None:
    (workdir / "inbox").mkdir()
    for i in range(5):
        (workdir / "inbox" / f"{i}.txt").write_text(str(i))
    every = {
        "steps": [
            {
                "id": "copy",
                "tool": "copy_file",
                "for_each": "inbox/*.txt",
                "args_json": json.dumps({"src": "{file}", "dst": "archive/{name}"}),
            }
        ]
    }
    model = ScriptedChatModel(responses=[every, {"steps": [], "need_help": "too many files"}])
    with Onward(db_url, model=model) as ow:
        view = ow.run("archive the inbox", policy=RunPolicy(max_plan_steps=3))
    assert view.status == "failed"
    assert view.failure is not None
    assert "too many files" in view.failure.message
    told = _prompt(model.calls[1])
    assert "'inbox/*.txt' matches 5 files, more steps than the plan has room for (3 more" in told
    assert not (workdir / "archive").exists()


def test_a_revision_that_grows_the_plan_over_the_limit_is_refused(
    db_url: str, workdir: Path
) -> None:
    (workdir / "ok.txt").write_text("ok")
    plan = {
        "steps": [
            {"id": "r", "tool": "read_file", "args_json": json.dumps({"path": "missing.txt"})},
            {"id": "n", "tool": "noop", "args_json": "{}", "depends_on": ["r"]},
        ]
    }
    fixed_r = {"id": "r", "tool": "read_file", "args_json": json.dumps({"path": "ok.txt"})}
    grown = {"steps": [fixed_r, *_noops("x", "y")["steps"]]}
    model = ScriptedChatModel(responses=[plan, grown, {"steps": [fixed_r]}])
    with Onward(db_url, model=model) as ow:
        view = ow.run("read a file no template knows", policy=RunPolicy(max_plan_steps=3))
    assert view.status == "done", view.failure
    assert [s.id for s in view.steps] == ["r", "n"]
    assert "4 steps; this run allows at most 3 (max_plan_steps)" in _prompt(model.calls[2])


def test_a_used_up_budget_stops_drafting_before_the_next_draft(db_url: str, workdir: Path) -> None:
    model = ScriptedChatModel(responses=["not a plan"], default="still not a plan")
    with Onward(db_url, model=model) as ow:
        view = ow.run("something only a model can plan", budget=Budget(max_tokens=100))
    assert len(model.calls) == 1  # the first draft used the budget up: none asked after it
    assert view.status == "failed"
    assert view.failure is not None
    assert view.failure.kind == "planning"
    assert "planning stopped after 1 draft(s): the token budget is used up" in view.failure.message
    assert view.usage.calls == 1


def test_a_refusal_stops_planning_with_the_models_words(db_url: str, workdir: Path) -> None:
    refusal = AIMessage("", additional_kwargs={"refusal": "I cannot plan that."})
    model = ScriptedChatModel(responses=[refusal], default=_noops("a"))
    with Onward(db_url, model=model) as ow:
        view = ow.run("something only a model can plan")
        state = ow.state(view.thread_id)
    assert len(model.calls) == 1
    assert view.failure is not None
    assert view.failure.message == "the model refused: I cannot plan that."
    chat = [m.text for m in state.messages if isinstance(m, AIMessage)]
    assert "**Planning failed.** the model refused: I cannot plan that." in chat


def test_the_planner_sees_neither_the_store_nor_hidden_files(workdir: Path) -> None:
    for name in ("notes.txt", "state/keep.txt", ".env", ".git/config", "sub/.cache/x.txt"):
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text("x")
    model = ScriptedChatModel(responses=[{"steps": [], "need_help": "just looking"}])
    with Onward(f"sqlite:///{workdir / 'state' / 'onward.db'}", model=model) as ow:
        ow.run("copy the database somewhere", plan=Plan(steps=[PlanStep(id="a", tool="noop")]))
        view = ow.run("list what is here")
    assert view.status == "failed"
    assert (workdir / "state" / "onward.db").is_file()
    listing = _prompt(model.calls[0])
    assert "notes.txt" in listing
    assert "state/keep.txt" in listing
    for hidden in ("onward.db", "artifacts/", ".env", ".git", ".cache"):
        assert hidden not in listing, hidden


def test_for_each_never_hands_a_step_the_store_or_hidden_files(workdir: Path) -> None:
    from onward.llm.planner import DraftStep, PlanDraft, normalise
    from onward.planning.workfiles import WorkFiles
    from onward.tools.registry import default_registry

    store = workdir / ".onward"
    for name in (".onward/onward.db", ".onward/onward.db-wal", "a.txt", ".hidden.txt"):
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text("x")
    files = WorkFiles(workdir, store=store, confined=True)
    step = DraftStep(id="c", tool="copy_file", for_each="**/*", args={"src": "{file}", "dst": "o"})
    plan, problems = normalise(PlanDraft(steps=[step]), default_registry, workdir, files=files)
    assert problems == []
    assert [s.args["src"] for s in plan.steps] == ["a.txt"]
    named = step.model_copy(update={"for_each": ".onward/*"})
    _, problems = normalise(PlanDraft(steps=[named]), default_registry, workdir, files=files)
    assert "matches no file" in str(problems[0])  # named explicitly, the store stays out


@pytest.fixture
def capped_api(db_url: str, workdir: Path) -> Iterator[httpx.Client]:
    """A server whose policy allows plans of at most 3 steps."""
    (workdir / "policy.yaml").write_text("max_plan_steps: 3\n")
    with (
        serve(db_url, workdir, "--policy", "policy.yaml", ONWARD_API_TOKENS=TOKENS) as url,
        httpx.Client(base_url=url, headers=auth(), timeout=60) as client,
    ):
        yield client


def test_a_start_request_may_lower_the_plan_step_limit_never_raise_it(
    capped_api: httpx.Client,
) -> None:
    api = capped_api
    steps = [{"id": f"s{i}", "tool": "noop", "args": {"value": i}} for i in range(3)]
    _tid, res = start(
        api, {"goal": "g", "plan": {"steps": steps}, "policy": {"max_plan_steps": 99}}
    )
    assert res.status_code == 403, res.text
    assert "max_plan_steps (the server allows at most 3)" in res.json()["detail"]
    bigger = [*steps, {"id": "s3", "tool": "noop", "args": {"value": 3}}]
    _tid, res = start(api, {"goal": "g", "plan": {"steps": bigger}})
    assert res.status_code == 422, res.text
    assert "4 steps; this run allows at most 3 (max_plan_steps)" in res.json()["detail"]
    _tid, res = start(api, {"goal": "g", "plan": {"steps": steps}, "policy": {"max_plan_steps": 2}})
    assert res.status_code == 422, res.text  # lowered for this run: 3 steps are too many
    tid, res = start(
        api, {"goal": "g", "plan": {"steps": steps[:2]}, "policy": {"max_plan_steps": 2}}
    )
    assert res.status_code == 200, res.text
    assert api.get(f"/threads/{tid}/state").json()["values"]["policy"]["max_plan_steps"] == 2


def test_the_planners_rules_survive_a_catalog_of_many_tools(db_url: str, workdir: Path) -> None:
    """A prompt cut to its token budget loses tools from the catalog's end, never the rules
    (the plan-size limit, need_help) that came after the catalog before."""
    from onward.tools.registry import Registry, default_registry, tool

    registry = Registry(default_registry)
    for i in range(120):

        def many(text: str = "") -> dict[str, str]:
            """A tool among very many, with a long description to fill the prompt."""
            return {"text": text}

        tool(name=f"many_{i:03d}", registry=registry)(many)
    model = ScriptedChatModel(responses=[_noops("a")])
    with Onward(db_url, model=model, registry=registry) as ow:
        view = ow.run("count things no template knows", policy=RunPolicy(max_plan_steps=3))
    assert view.status == "done", view.failure
    prompt = _prompt(model.calls[0])
    assert "A plan holds at most 3 steps" in prompt
    assert "set need_help" in prompt
