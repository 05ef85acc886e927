"""A tool-calling step whose final answer fails verification (its output schema or its
checks): the findings go back to the model as a follow-up turn of the same transcript
(generate → evaluate → improve), the recorded turns and calls replayed, not asked or run
again; the rounds count against ``max_replans`` and a failure that outlasts them goes to
a person; a SIGKILL inside the model's next answer resumes with the findings replayed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage

import tests.support.tool_calling_tools  # noqa: F401  (registers lookup, save_note, publish)
from onward import Budget, Onward, PlanValidationError, ScriptedChatModel
from onward.llm.fake import tool_calls
from tests.support.common import cli_env, read_jsonl
from tests.support.tool_calling_steps import REPO, effects, turn_of

TITLE = {
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 20}},
    "required": ["title"],
}
LONG = {"title": "A title far too long for the schema"}
GOOD = {"title": "Revenue up 20 %"}
SCRIPT: list[Any] = [
    tool_calls(("lookup", {"key": "revenue"})),
    json.dumps(LONG),  # round 1's answer: fails the schema
    tool_calls(("save_note", {"path": "note.txt", "text": "Revenue is up 20 %."})),
    json.dumps(GOOD),  # round 2's answer
]
FINDING = "title: String should have at most 20 characters"


def plan() -> dict[str, Any]:
    return {
        "goal": "title the revenue",
        "steps": [
            {
                "id": "agent",
                "tool": "tool_calling",
                "output": "answer",
                "args": {
                    "instruction": "Look the revenue up, note it, and title it.",
                    "tools": ["lookup", "save_note"],
                    "output": TITLE,
                },
            }
        ],
    }


def scripted(log: Path | None = None, kill_at: int | None = None) -> ScriptedChatModel:
    """Answers each turn from SCRIPT by the turn it is asked (one AI message per earlier
    turn), logging each ask; ``kill_at``: SIGKILL this process the first time that turn
    is asked (a marker file says it was)."""

    def answer(messages: list[BaseMessage]) -> Any:
        if "You may call the tools offered to you" not in messages[0].text:
            return {}  # the replanner: no revision of its own
        turn = turn_of(messages)
        if log is not None:
            with log.open("a") as f:
                f.write(json.dumps({"turn": turn}) + "\n")
        marker = Path("killed-in-model")
        if turn == kill_at and not marker.exists():
            marker.write_text("x")
            os.kill(os.getpid(), signal.SIGKILL)
        return SCRIPT[turn]

    return ScriptedChatModel(default=answer)


def feedback_of(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, HumanMessage) and "failed the step" in m.text]


def test_an_answer_that_fails_its_schema_goes_back_as_a_follow_up_turn(
    db_url: str, workdir: Path
) -> None:
    model = scripted()
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan(), thread_id="t")
        answer = view.artifact_value(ow, "answer")
        state = ow.state("t")
        ledger = ow.store.ledger.for_thread("t")

    assert view.status == "done", view
    assert answer == GOOD
    asked = [m for m in model.calls if "You may call the tools" in m[0].text]
    assert [turn_of(m) for m in asked] == [0, 1, 2, 3]  # each turn asked once
    # Round 2 went on from round 1's transcript: its answer, then the findings, fenced.
    [told] = feedback_of(asked[2])
    assert FINDING in told
    assert "<<<UNTRUSTED DATA" in told
    assert json.dumps(LONG) in [m.text for m in asked[2]]
    step = next(s for s in view.steps if s.id == "agent")
    assert [f.failure_class for f in step.failures] == ["validation"]
    assert state.plan.step("agent").args["round"] == 2
    [decision] = [d for d in view.decisions if d.action == "replan"]
    assert "tool_calling.fix_args" in decision.reason
    # The lookup ran once (replayed in round 2), the note was written once.
    by_tool = Counter(e.tool for e in ledger)
    assert (by_tool["lookup"], by_tool["save_note"], by_tool["tool_calling.feedback"]) == (1, 1, 1)
    assert all(e.calls == 1 for e in ledger if e.tool.startswith("tool_calling."))
    assert effects(workdir) == {"save_note": 1}


def test_an_answer_that_keeps_failing_goes_to_a_person_after_the_rounds(
    db_url: str, workdir: Path
) -> None:
    def answer(messages: list[BaseMessage]) -> Any:
        if "You may call the tools offered to you" not in messages[0].text:
            return {}
        return json.dumps(LONG)

    model = ScriptedChatModel(default=answer)
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan(), thread_id="t", budget=Budget(max_replans=1))
        pending = ow.pending("t")
        state = ow.state("t")

    assert view.status == "waiting_for_human", view
    assert [q.kind.value for q in pending] == ["escalation"]
    assert state.plan.step("agent").args["round"] == 2  # one round back, then a person
    asked = [m for m in model.calls if "You may call the tools" in m[0].text]
    assert [turn_of(m) for m in asked] == [0, 1]


KILLED_RUN = """
import json, sys
sys.path.insert(0, sys.argv[3])
import tests.support.tool_calling_tools
from pathlib import Path
from onward import Onward
from tests.crash.test_tool_calling_rounds import plan, scripted

kill_at = int(sys.argv[4]) if sys.argv[4] != "-" else None
with Onward(sys.argv[1], model=scripted(Path("turns.jsonl"), kill_at)) as ow:
    view = ow.run(plan=plan(), thread_id="t") if sys.argv[2] == "run" else ow.resume("t")
    print(view.status)
"""


def drive(
    db_url: str, workdir: Path, how: str, kill_at: int | None
) -> subprocess.CompletedProcess[str]:
    (workdir / "killed.py").write_text(KILLED_RUN, encoding="utf-8")
    at = "-" if kill_at is None else str(kill_at)
    return subprocess.run(
        [sys.executable, "killed.py", db_url, how, str(REPO), at],
        cwd=workdir,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_killed_inside_the_models_next_round_resumes_with_the_findings_replayed(
    db_url: str, workdir: Path
) -> None:
    first = drive(db_url, workdir, "run", kill_at=2)  # round 2's first turn
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = drive(db_url, workdir, "resume", kill_at=None)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "done"

    with Onward(db_url, model=None) as ow:
        view = ow.get("t")
        answer = view.artifact_value(ow, "answer")
        ledger = ow.store.ledger.for_thread("t")

    assert answer == GOOD
    # Turns 0 and 1 asked once; turn 2 again (the kill came while it answered).
    assert [t["turn"] for t in read_jsonl(workdir / "turns.jsonl")] == [0, 1, 2, 2, 3]
    [feedback] = [e for e in ledger if e.tool == "tool_calling.feedback"]
    assert feedback.calls == 1
    assert FINDING in feedback.result["findings"][0]
    assert [e.calls for e in ledger if e.tool == "lookup"] == [1]
    assert effects(workdir) == {"save_note": 1}


def test_a_round_written_in_the_plan_asks_nothing_more_and_sends_no_findings(
    db_url: str, workdir: Path
) -> None:
    """``round`` is onward's to set: a plan that sets it has no recorded findings to send,
    so the first answer stands, checked as any; past its maximum the plan is refused."""
    given = plan()
    given["steps"][0]["args"]["round"] = 3
    model = ScriptedChatModel(
        responses=[tool_calls(("lookup", {"key": "revenue"})), json.dumps(GOOD)]
    )
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=given, thread_id="t")
        answer = view.artifact_value(ow, "answer")
        too_far = plan()
        too_far["steps"][0]["args"]["round"] = 21
        with pytest.raises(PlanValidationError, match="round"):
            ow.run(plan=too_far, thread_id="u")

    assert view.status == "done", view
    assert answer == GOOD
    assert len(model.calls) == 2
    assert all(not feedback_of(m) for m in model.calls)
