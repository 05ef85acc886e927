"""Milestones (rolling plans): a plan step that the model expands into concrete steps once
the steps it depends on are done. The expansion is a validated plan revision that only
adds (version bump, an ``expand`` decision with what was added); an invalid one (unknown
tool, over the plan-size limit, a cycle) is sent back with its problems; one that stays
invalid, or that the budget stops, fails the milestone as non-convergent (a person, or the
run fails); a resumed run never asks the model again for an expansion it committed. Every
model here is ``ScriptedChatModel``."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from onward import (
    Budget,
    Onward,
    Plan,
    PlanStep,
    PlanValidationError,
    RunPolicy,
    ScriptedChatModel,
)
from onward.llm import context
from onward.planning.milestones import MAX_DEPTH
from tests.support.common import cli_env
from tests.support.milestones import EXPANSION, KILLED_RUN, MILESTONE, plan, section, sources


def prompt(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(m.text for m in messages)


def fenced(messages: Sequence[BaseMessage], label: str) -> list[str]:
    text = prompt(messages)
    [nonce] = set(re.findall(r"<<<END UNTRUSTED DATA ([0-9a-f]{16})>>>", text))
    pattern = (
        rf"<<<UNTRUSTED DATA {nonce}: {re.escape(label)}>>>\n(.*?)\n"
        rf"<<<END UNTRUSTED DATA {nonce}>>>"
    )
    return re.findall(pattern, text, re.S)


def test_a_milestone_is_expanded_once_and_its_steps_run_and_are_verified(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    model = ScriptedChatModel(responses=[EXPANSION])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())
        state = ow.state(view.thread_id)
    assert view.status == "done", view.failure
    assert len(model.calls) == 1  # the declared plan needs no model; the expansion one call
    assert (workdir / "sections" / "a.md").read_text() == "# a\n"
    assert (workdir / "sections" / "b.md").read_text() == "# b\n"
    assert [s.id for s in state.plan.steps] == ["s1", "sec-a", "sec-b", "final"]
    assert state.plan.step("final").depends_on == ["sec-a", "sec-b"]
    assert state.plan.version == 2
    assert all(state.record(s).status == "done" for s in ("s1", "sec-a", "sec-b", "final"))
    [expand] = [d for d in view.decisions if d.action == "expand"]
    assert (expand.step_id, expand.added, expand.changed) == ("m1", ["sec-a", "sec-b"], ["final"])
    assert expand.removed == {"m1": "expanded into 2 steps"}
    # The model saw the milestone and s1's result as fenced data, never as its task.
    [shown] = fenced(model.calls[0], "milestone")
    assert json.loads(shown)["milestone"] == MILESTONE
    [result] = fenced(model.calls[0], "result of a step the milestone depends on")
    assert result.startswith("step s1, output found: ")
    assert "a.txt" in result
    task = prompt(model.calls[0]).split("TASK:")[1].split("Tools:")[0]
    assert "The milestone fenced above as 'milestone' is due" in task
    assert MILESTONE not in task
    assert "sources/a.txt" not in task


def test_later_steps_may_use_the_artifact_a_milestone_promises(db_url: str, workdir: Path) -> None:
    sources(workdir)
    given = plan(output="toc")
    given["steps"][2]["args"] = {"value": "${toc.bytes}"}
    forgot = {"steps": [section("a"), section("b")]}
    kept = {"steps": [section("a"), section("b", output="toc")]}
    model = ScriptedChatModel(responses=[forgot, kept])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=given)
        final = ow.state(view.thread_id).record("final")
        value = ow.store.artifacts.get(final.output)
    assert view.status == "done", view.failure
    assert "one of the steps sent must have output 'toc'" in prompt(model.calls[1])
    assert value == {"value": len("# b\n")}


def test_the_results_an_expansion_is_shown_are_cut_to_the_context_budget(
    db_url: str, workdir: Path
) -> None:
    big = "x" * 2_000_000
    given = {
        "steps": [
            *(
                {"id": f"r{i}", "tool": "noop", "args": {"value": big}, "output": f"r{i}"}
                for i in range(3)
            ),
            {"id": "m1", "milestone": "use the results", "depends_on": ["r0", "r1", "r2"]},
        ]
    }
    model = ScriptedChatModel(responses=[{"steps": [{"id": "n", "tool": "noop"}]}])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=given)
    assert view.status == "done", view.failure
    [messages] = model.calls
    assert context.message_tokens(messages) <= context.context_budget() * 1.1
    results = [t for t in prompt(messages).split("<<<") if "result of a step" in t]
    assert len(results) == 3  # each dependency's result is there, cut
    assert all("[cut]" in t for t in results)


def test_a_models_own_plan_may_hold_a_milestone(db_url: str, workdir: Path) -> None:
    sources(workdir)
    drafted = {
        "steps": [
            {"id": "s1", "tool": "list_dir", "args": {"path": "sources"}, "output": "found"},
            {"id": "m1", "milestone": MILESTONE, "depends_on": ["s1"]},
        ]
    }
    model = ScriptedChatModel(responses=[drafted, EXPANSION])
    with Onward(db_url, model=model) as ow:
        view = ow.run("write a section per source, whatever the sources turn out to be")
        state = ow.state(view.thread_id)
    assert view.status == "done", view.failure
    assert "may be a milestone" in prompt(model.calls[0])
    assert [s.id for s in state.plan.steps] == ["s1", "sec-a", "sec-b"]


def test_a_milestone_in_a_plan_built_in_python_is_expanded(db_url: str, workdir: Path) -> None:
    sources(workdir)
    steps = [
        PlanStep(id="s1", tool="list_dir", args={"path": "sources"}, output="found"),
        PlanStep(id="m1", milestone=MILESTONE, depends_on=["s1"]),
    ]
    model = ScriptedChatModel(responses=[EXPANSION])
    with Onward(db_url, model=model) as ow:
        view = ow.run("sections", plan=Plan(steps=steps))
    assert view.status == "done", view.failure
    assert [s.id for s in view.steps] == ["s1", "sec-a", "sec-b"]


@pytest.mark.parametrize(
    ("bad", "told"),
    [
        (
            {"steps": [section("a", tool="shred_everything"), section("b")]},
            "unknown tool 'shred_everything'",
        ),
        (
            {"steps": [section("a", depends_on=["final"]), section("b")]},
            "dependency cycle: ",
        ),
        (
            {"steps": [section("a"), {**section("b"), "id": "s1"}]},
            "an expansion only adds steps, never changes one",
        ),
    ],
    ids=["unknown-tool", "cycle", "reused-id"],
)
def test_an_invalid_expansion_is_sent_back_with_its_problem_and_the_next_one_runs(
    db_url: str, workdir: Path, bad: dict[str, Any], told: str
) -> None:
    sources(workdir)
    model = ScriptedChatModel(responses=[bad, EXPANSION])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())
        state = ow.state(view.thread_id)
    assert view.status == "done", view.failure
    assert len(model.calls) == 2
    [problems] = fenced(model.calls[1], "problems of the draft")
    assert told in problems
    assert state.plan.version == 2  # the refused draft changed nothing


def test_an_expansion_past_the_plan_size_limit_is_sent_back(db_url: str, workdir: Path) -> None:
    sources(workdir)
    three = {"steps": [section("a"), section("b"), section("c")]}
    model = ScriptedChatModel(responses=[three, EXPANSION])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan(), policy=RunPolicy(max_plan_steps=4))
        state = ow.state(view.thread_id)
    assert view.status == "done", view.failure
    [problems] = fenced(model.calls[1], "problems of the draft")
    assert "5 steps; this run allows at most 4 (max_plan_steps)" in problems
    assert "send at most 2" in prompt(model.calls[0])
    assert len(state.plan.steps) == 4


def test_an_expansion_that_stays_invalid_goes_to_a_person_and_a_retry_asks_again(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    bad = {"steps": [section("a", tool="shred_everything")]}
    model = ScriptedChatModel(responses=[bad, bad, bad, EXPANSION])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())
        state = ow.state(view.thread_id)
        assert view.status == "waiting_for_human"
        [question] = view.pending
        assert question.step_id == "m1"
        assert "the model's expansion was still invalid after 3 tries" in (question.reason or "")
        assert state.plan.version == 1
        assert state.plan.step("m1").milestone == MILESTONE
        assert state.record("m1").failure.failure_class == "non_convergent"
        view = ow.decide(view.thread_id, {"type": "retry"}, step="m1")
        state = ow.state(view.thread_id)
    assert view.status == "done", view.failure
    assert len(model.calls) == 4
    assert [s.id for s in state.plan.steps] == ["s1", "sec-a", "sec-b", "final"]


def test_with_no_one_to_ask_a_milestone_the_model_cannot_expand_fails_the_run(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    model = ScriptedChatModel(responses=[{"steps": [], "need_help": "which sources?"}])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan(), policy=RunPolicy(escalate_failures=False))
    assert view.status == "failed"
    assert "the model asks for help: which sources?" in str(view.failure)
    assert not (workdir / "sections").exists()


def nested_plan() -> dict[str, Any]:
    """The expansion of m1 holds a milestone of its own (m2), due at once."""
    return {
        "steps": [
            section("a"),
            {"id": "m2", "milestone": "index the sections", "depends_on": ["sec-a"]},
        ]
    }


def test_an_expansion_may_hold_a_milestone_which_is_expanded_in_turn(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    inner = {"steps": [section("b", depends_on=["sec-a"])]}
    model = ScriptedChatModel(responses=[nested_plan(), inner])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())
        state = ow.state(view.thread_id)
    assert view.status == "done", view.failure
    assert [s.id for s in state.plan.steps] == ["s1", "sec-a", "sec-b", "final"]
    assert state.plan.step("final").depends_on == ["sec-a", "sec-b"]
    assert state.plan.version == 3
    expansions = [(d.step_id, d.added) for d in view.decisions if d.action == "expand"]
    assert expansions == [("m1", ["sec-a", "m2"]), ("m2", ["sec-b"])]
    assert "Send concrete steps only" in prompt(model.calls[1])


def test_milestones_nest_at_most_two_deep(db_url: str, workdir: Path) -> None:
    sources(workdir)
    deeper = {"steps": [{"id": "m3", "milestone": "more", "depends_on": ["sec-a"]}]}
    inner = {"steps": [section("b", depends_on=["sec-a"])]}
    model = ScriptedChatModel(responses=[nested_plan(), deeper, inner])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())
    assert view.status == "done", view.failure
    assert MAX_DEPTH == 2
    [problems] = fenced(model.calls[2], "problems of the draft")
    assert "milestones nest at most 2 deep and this expansion is at depth 2" in problems


def test_a_used_up_token_budget_stops_an_expansion_before_the_model_is_asked(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    due_at_once = nested_plan()
    due_at_once["steps"][1]["depends_on"] = ["s1"]  # m2 is due right after m1's expansion
    model = ScriptedChatModel(responses=[due_at_once])
    with Onward(db_url, model=model) as ow:
        view = ow.run(
            plan=plan(), budget=Budget(max_tokens=10), policy=RunPolicy(escalate_failures=False)
        )
        state = ow.state(view.thread_id)
    assert view.status == "failed"
    assert len(model.calls) == 1  # m1's expansion spent the budget; m2's never asked
    failure = state.record("m2").failure
    assert failure is not None
    assert failure.failure_class == "non_convergent"
    assert failure.message.startswith("the milestone was not expanded: no expansion: ")
    assert "the token budget is used up" in failure.message


def test_a_plan_with_a_milestone_and_no_model_is_refused_before_any_step_runs(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    with Onward(db_url, model=None) as ow:
        view = ow.run(plan=plan())
    assert view.status == "failed"
    assert "steps[1] (m1).milestone: a milestone is expanded by a model" in str(view.failure)
    assert all(s.status == "pending" for s in view.steps)


@pytest.mark.parametrize(
    ("step", "told"),
    [
        ({"id": "m", "milestone": "x", "tool": "noop", "depends_on": ["s1"]}, "no tool:"),
        ({"id": "m", "milestone": "x"}, "give it depends_on"),
        ({"id": "m", "milestone": " ", "depends_on": ["s1"]}, "say what the milestone is"),
        ({"id": "m", "depends_on": ["s1"]}, "a step needs a tool (or a milestone"),
    ],
    ids=["with-tool", "without-depends-on", "blank", "neither"],
)
def test_a_malformed_milestone_is_a_plan_validation_error(
    db_url: str, workdir: Path, step: dict[str, Any], told: str
) -> None:
    given = {"steps": [{"id": "s1", "tool": "noop"}, step]}
    with Onward(db_url) as ow, pytest.raises(PlanValidationError, match=re.escape(told)):
        ow.start(plan=given)


# -- killed and resumed -------------------------------------------------------------------


def kill_run(db_url: str, workdir: Path, where: str) -> None:
    """A run killed after the expansion committed (when verify starts on its first step)
    or while the model answers the expansion."""
    (workdir / "killed.py").write_text(KILLED_RUN, encoding="utf-8")
    env = cli_env(ONWARD_FAULT_KILL="before_verify:sec-a" if where == "after" else "")
    args = [db_url, json.dumps(plan()), json.dumps(EXPANSION), where]
    proc = subprocess.run(
        [sys.executable, "killed.py", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_committed_expansion_is_never_asked_again_after_a_kill(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    kill_run(db_url, workdir, "after")
    other = {"steps": [section("x"), section("y")]}  # a second answer would differ
    model = ScriptedChatModel(responses=[other])
    with Onward(db_url, model=model) as ow:
        view = ow.resume("t")
        state = ow.state("t")
    assert view.status == "done", view.failure
    assert model.calls == []
    assert [s.id for s in state.plan.steps] == ["s1", "sec-a", "sec-b", "final"]
    assert len([d for d in view.decisions if d.action == "expand"]) == 1
    assert sorted(p.name for p in (workdir / "sections").iterdir()) == ["a.md", "b.md"]


def test_an_expansion_killed_while_the_model_answers_asks_again_once(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    kill_run(db_url, workdir, "inside")
    model = ScriptedChatModel(responses=[EXPANSION])
    with Onward(db_url, model=model) as ow:
        view = ow.resume("t")
        state = ow.state("t")
    assert view.status == "done", view.failure
    assert len(model.calls) == 1
    assert state.plan.version == 2


def test_onward_run_refuses_a_milestone_plan_without_a_model_with_exit_2(
    run_cli: Any, workdir: Path
) -> None:
    sources(workdir)
    (workdir / "plan.yaml").write_text(json.dumps(plan()), encoding="utf-8")
    result = run_cli("run", "--plan", "plan.yaml", "--json")
    assert result.code == 2, result.stderr
    assert "a milestone is expanded by a model" in result.stdout + result.stderr
    assert "--model" in result.stdout + result.stderr
