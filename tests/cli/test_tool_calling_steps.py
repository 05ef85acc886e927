"""Tool-calling steps (the built-in ``tool_calling``): a scripted model calls three tools
(a pure lookup, an idempotent write, an unsafe publish that waits for a person inside the
step), killed with SIGKILL between two calls and inside one, resumed with no finished
call run again, no model turn asked again and no effect twice (ledger and effect counts);
the approval shows the call's resolved args and the answer resumes the step; the calls
are AI tool calls and tool messages in the thread; failures go back to the model or fail
the step by their class."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

import tests.support.tool_calling_tools  # noqa: F401  (registers lookup, save_note, publish)
from onward import Onward, ScriptedChatModel
from onward.llm.fake import tool_calls
from onward.observe.chat import conversation
from tests.support.common import cli_env, read_jsonl
from tests.support.tool_calling_steps import REPO, SCRIPT, TOOLS, effects, plan, scripted, turn_of


def test_a_tool_calling_step_calls_its_tools_asks_before_the_unsafe_one_and_answers(
    db_url: str, workdir: Path
) -> None:
    model = scripted()
    with Onward(db_url, model=model) as ow:
        waiting = ow.run(plan=plan(), thread_id="t")
        [question] = ow.pending("t")
        done = ow.decide("t", {"type": "approve"}, by="ann")
        state = ow.state("t")
        answer = done.artifact_value(ow, "answer")
        ledger = ow.store.ledger.for_thread("t")

    assert waiting.status == "waiting_for_human", waiting
    # The question is about the call inside the step, with its args as they would run.
    asked = (question.kind.value, question.step_id, question.tool)
    assert asked == ("approval", "agent", "publish")
    assert question.args == {"title": "Revenue up 20 %"}
    assert question.allowed == ["approve", "reject", "respond"]
    assert {"arg": "title", "from": "the model", "value": '"Revenue up 20 %"'} in question.resolved
    assert done.status == "done", done
    assert answer == "Looked up the revenue, saved the note and published it."
    assert effects(workdir) == {"save_note": 1, "publish": 1}
    assert (workdir / "note.txt").read_text() == "Revenue is up 20 %."
    # Only the step's tools were offered, on every turn; four turns, each asked once.
    assert model.tools_offered == [TOOLS] * 4
    calls = Counter(e.tool for e in ledger)
    assert calls["tool_calling.turn"] == 4
    assert all(e.calls == 1 for e in ledger if e.tool != "tool_calling")
    [approval] = [e for e in ledger if e.tool == "tool_calling.approval"]
    assert approval.result["type"] == "approve"
    assert approval.result["by"] == "ann"
    # The calls are in the thread as AI tool calls and tool messages, in order.
    chat = conversation(state)
    called = [m.tool_calls[0]["name"] for m in chat if isinstance(m, AIMessage) and m.tool_calls]
    assert called == [*TOOLS, "tool_calling"]
    results = [m for m in chat if isinstance(m, ToolMessage)]
    assert [m.name for m in results] == [*TOOLS, "tool_calling"]
    assert json.loads(str(results[2].content)) == {"published": "Revenue up 20 %"}
    assert state.usage.calls == 4


def test_a_rejected_call_goes_back_to_the_model_and_never_runs(db_url: str, workdir: Path) -> None:
    model = scripted()
    with Onward(db_url, model=model) as ow:
        ow.run(plan=plan(), thread_id="t")
        done = ow.decide("t", {"type": "reject", "message": "not today"}, by="bob")
        state = ow.state("t")

    assert done.status == "done", done
    assert effects(workdir) == {"save_note": 1}  # publish never ran
    last_prompt = model.calls[-1]
    [refused] = [m for m in last_prompt if isinstance(m, ToolMessage) and m.name == "publish"]
    assert "bob rejected this call of publish: not today" in refused.text
    assert refused.status == "error"
    publish = state.record("agent").calls[2]
    assert (publish.tool, publish.ok) == ("publish", False)


def test_a_failing_tool_goes_back_to_the_model_as_a_tool_message(
    db_url: str, workdir: Path
) -> None:
    answers = [
        tool_calls(("lookup", {})),  # missing its key: refused by the schema
        tool_calls(("save_note", {"path": "missing/dir/note.txt", "text": "x"})),
        "Could not save the note.",
    ]
    model = ScriptedChatModel(responses=answers)
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan(["lookup", "save_note"]), thread_id="t")

    assert view.status == "done", view
    errors = [m.text for m in model.calls[-1] if isinstance(m, ToolMessage)]
    assert "the args do not fit lookup's schema" in errors[0]
    assert "FileNotFoundError" in errors[1] or "No such file" in errors[1]


def test_a_model_that_never_stops_calling_fails_the_step_at_its_limit(
    db_url: str, workdir: Path
) -> None:
    model = ScriptedChatModel(default=tool_calls(("lookup", {"key": "k"})))
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan(["lookup"], max_calls=2), thread_id="t", policy=None)
        ledger = ow.store.ledger.for_thread("t")

    step = next(s for s in view.steps if s.id == "agent")
    assert step.failures, view
    # deterministic, and the same again on its retry: it stops for a person
    assert step.failures[0].failure_class in ("deterministic", "non_convergent")
    assert "did not answer within 4 turns" in step.failures[0].message
    assert sum(e.tool == "lookup" for e in ledger) == 2  # the calls past the limit never ran


# -- killed and resumed ---------------------------------------------------------------------

KILLED_RUN = """
import json, sys
sys.path.insert(0, sys.argv[3])
import tests.support.tool_calling_tools
from pathlib import Path
from onward import Onward
from tests.support.tool_calling_steps import scripted

with Onward(sys.argv[1], model=scripted(Path("turns.jsonl"))) as ow:
    if sys.argv[4] == "run":
        view = ow.run(plan=json.loads(sys.argv[2]), thread_id="t")
    else:
        view = ow.resume("t")
    print(view.status)
"""


def drive(db_url: str, workdir: Path, how: str, **env: str) -> subprocess.CompletedProcess[str]:
    (workdir / "killed.py").write_text(KILLED_RUN, encoding="utf-8")
    log = str(workdir / "executions.jsonl")
    return subprocess.run(
        [sys.executable, "killed.py", db_url, json.dumps(plan()), str(REPO), how],
        cwd=workdir,
        env=cli_env(ONWARD_EXECUTION_LOG=log, **env),
        capture_output=True,
        text=True,
        timeout=300,  # a loaded CI machine: a kill test is about the kill
    )


def test_killed_between_calls_and_inside_one_no_call_or_turn_repeats_and_no_effect_twice(
    db_url: str, workdir: Path
) -> None:
    # 1. Killed after the lookup's result was recorded, before the next turn.
    first = drive(db_url, workdir, "run", ONWARD_FAULT_KILL="after_record:agent")
    assert first.returncode == -signal.SIGKILL, first.stderr
    # 2. Killed inside save_note (its write done, its result not recorded).
    second = drive(db_url, workdir, "resume", TC_KILL_INSIDE="save_note")
    assert second.returncode == -signal.SIGKILL, second.stderr
    # 3. Resumed: save_note is called again with its key (idempotent), then publish asks.
    third = drive(db_url, workdir, "resume")
    assert third.returncode == 0, third.stderr
    assert third.stdout.strip() == "waiting_for_human"
    # 4. The answer resumes the step inside.
    with Onward(db_url, model=scripted(workdir / "turns.jsonl")) as ow:
        [question] = ow.pending("t")
        done = ow.decide("t", {"type": "approve"}, by="ann")
        answer = done.artifact_value(ow, "answer")
        ledger = ow.store.ledger.for_thread("t")

    assert question.args == {"title": "Revenue up 20 %"}
    assert done.status == "done", done
    assert answer == SCRIPT[-1]
    # Each turn was asked once in all four processes.
    assert [t["turn"] for t in read_jsonl(workdir / "turns.jsonl")] == [0, 1, 2, 3]
    # Each call started once, but the one killed inside, which was called again once.
    starts = Counter(
        e["tool"] for e in read_jsonl(workdir / "executions.jsonl") if e["phase"] == "start"
    )
    # (publish ran in this process, which keeps no execution log: the ledger counts it.)
    assert {t: starts[t] for t in TOOLS[:2]} == {"lookup": 1, "save_note": 2}
    by_tool = {e.tool: e for e in ledger if e.tool in TOOLS}
    assert {t: by_tool[t].calls for t in TOOLS} == {"lookup": 1, "save_note": 2, "publish": 1}
    assert all(e.status.value == "completed" for e in ledger)
    assert all(e.calls == 1 for e in ledger if e.tool == "tool_calling.turn")
    # No effect twice: one write (its second call found its key done), one publish.
    assert effects(workdir) == {"save_note": 1, "publish": 1}


@pytest.mark.parametrize("answer", ["approve", "reject"])
def test_an_answer_given_before_a_retry_is_not_asked_again(
    db_url: str, workdir: Path, answer: str
) -> None:
    """The model fails after the approval was answered; the person retries the step; its
    next attempt replays the turns and calls, takes the recorded answer, and asks the
    model only the turn that failed."""
    down = {"now": True}

    def model_answer(messages: list[BaseMessage]) -> Any:
        if "You may call the tools offered to you" not in messages[0].text:
            return {}  # the replanner's question: no revision
        turn = turn_of(messages)
        if turn == 3 and down["now"]:
            raise RuntimeError("the model went away")
        return SCRIPT[turn]

    model = ScriptedChatModel(default=model_answer)
    with Onward(db_url, model=model, sleep=lambda s: None) as ow:
        ow.run(plan=plan(), thread_id="t")
        failed = ow.decide("t", {"type": answer}, by="ann")
        [escalation] = ow.pending("t")
        down["now"] = False
        done = ow.decide("t", {"type": "approve"}, by="ann")
        ledger = ow.store.ledger.for_thread("t")

    assert escalation.kind.value == "escalation", failed
    assert done.status == "done", done
    assert effects(workdir)["publish"] == (1 if answer == "approve" else 0)
    [approval] = [e for e in ledger if e.tool == "tool_calling.approval"]
    assert (approval.result["type"], approval.calls) == (answer, 1)
    asked = [m for m in model.calls if "You may call the tools" in m[0].text]
    assert [turn_of(m) for m in asked] == [0, 1, 2, 3, 3]  # only the failed turn again


def test_a_model_per_role_answers_the_turns_with_the_step_roles_model(
    db_url: str, workdir: Path
) -> None:
    from onward import role_models

    planner = ScriptedChatModel()  # never asked: the plan is declared
    step = ScriptedChatModel(responses=[tool_calls(("lookup", {"key": "k"})), "Found it."])
    with Onward(db_url, model=role_models(planner, step=step)) as ow:
        view = ow.run(plan=plan(["lookup"]), thread_id="t")

    assert view.status == "done", view
    assert (len(planner.calls), step.tools_offered) == (0, [["lookup"], ["lookup"]])


def test_a_call_whose_args_are_not_json_is_refused_back_to_the_model(
    db_url: str, workdir: Path
) -> None:
    bad = AIMessage(
        "",
        invalid_tool_calls=[
            {
                "name": "lookup",
                "args": '{"key": ',
                "id": "c1",
                "error": "not valid JSON",
                "type": "invalid_tool_call",
            }
        ],
    )
    model = ScriptedChatModel(responses=[bad, "Gave up."])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan(["lookup"]), thread_id="t")
        ledger = ow.store.ledger.for_thread("t")

    assert view.status == "done", view
    [refused] = [m for m in model.calls[-1] if isinstance(m, ToolMessage)]
    assert "could not be read (not valid JSON); nothing was run" in refused.text
    assert refused.tool_call_id == "c1"
    assert not any(e.tool == "lookup" for e in ledger)
