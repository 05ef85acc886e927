"""Escalations of one wave are ONE question, like approvals: steps of a wave that fail in a
way only a person can settle are asked together as one interrupt with N action requests
and N review configs (each with the decisions it allows); an unkeyed list of N decisions
answers them in order, an answer naming steps (``targets`` / ``step=``) answers only those,
on both store backends.

Effects are read off ``tests/support/hitl_tools.py``'s ``deliver`` (it fails on its first call per
label, then delivers once per idempotency key)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from onward import Onward, Plan, PlanStep
from onward.errors import AnswerError
from tests.support.hitl_tools import rows
from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "hitl_tools.py")


def deliver(sid: str) -> PlanStep:
    return PlanStep(id=sid, tool="deliver", args={"label": sid})


@pytest.fixture
def ow(db_url: str, workdir: Path) -> Iterator[Onward]:
    with Onward(db_url, tool_modules=[TOOLS]) as client:
        yield client


def _wave(ow: Onward, *sids: str, then: list[PlanStep] | None = None) -> str:
    steps = [deliver(s) for s in sids] + list(then or [])
    tid = ow.start("deliver", plan=Plan(steps=steps))
    view = ow.drive(tid)
    assert view.status == "waiting_for_human"
    return tid


def _labels(workdir: Path) -> list[str]:
    return sorted(r["label"] for r in rows(workdir, "deliveries.jsonl"))


def test_failures_of_one_wave_are_one_interrupt_with_each_questions_allowed_decisions(
    ow: Onward,
) -> None:
    tid = _wave(ow, "a", "b", "c")
    [interrupt] = ow.graph.get_state(ow._config(tid)).interrupts
    value: dict[str, Any] = interrupt.value
    assert [a["args"]["label"] for a in value["action_requests"]] == ["a", "b", "c"]
    assert all("needs a decision" in a["description"] for a in value["action_requests"])
    assert [c["allowed_decisions"] for c in value["review_configs"]] == [
        ["approve", "edit", "reject"]
    ] * 3
    questions = value["onward"]["questions"]
    assert [(q["kind"], q["step_id"]) for q in questions] == [
        ("escalation", "a"),
        ("escalation", "b"),
        ("escalation", "c"),
    ]
    assert all("done" in q["allowed"] and "abort" in q["allowed"] for q in questions)
    pending = ow.pending(tid)
    assert [(p.step_id, p.interrupt_id, p.batch) for p in pending] == [
        (s, interrupt.id, ["a", "b", "c"]) for s in "abc"
    ]


def test_n_unkeyed_decisions_settle_a_waves_escalations_in_order(ow: Onward, workdir: Path) -> None:
    tid = _wave(ow, "a", "b", "c", then=[PlanStep(id="z", tool="slow", depends_on=["a"])])
    # What agent-chat-ui sends: one unkeyed {"decisions": [...]}, one per action request.
    decisions = [
        {"type": "approve"},  # a: try again
        {"type": "reject", "message": "not b"},  # b: skip it
        {"type": "done", "result": {"delivered": "c"}},  # c: done by hand
    ]
    list(ow.stream(tid, command=Command(resume={"decisions": decisions})))
    view = ow.get(tid)
    assert view.status == "done"
    assert _labels(workdir) == ["a"]  # b skipped, c done by hand: only a delivered again
    assert {s.id: s.status for s in view.steps} == {
        "a": "done",
        "b": "skipped",
        "c": "done",
        "z": "done",
    }
    assert [(d.step_id, d.action) for d in view.decisions] == [
        ("a", "retry"),
        ("b", "skip"),
        ("c", "done"),
    ]
    assert len({d.interrupt_id for d in view.decisions}) == 1


def test_the_python_api_settles_a_wave_of_escalations_with_a_list(
    ow: Onward, workdir: Path
) -> None:
    tid = _wave(ow, "a", "b")
    view = ow.decide(tid, [{"type": "retry"}, {"type": "retry"}])
    assert view.status == "done"
    assert _labels(workdir) == ["a", "b"]


def test_one_escalation_of_a_wave_is_settled_by_step_and_the_others_stay_asked(
    ow: Onward, workdir: Path
) -> None:
    tid = _wave(ow, "a", "b", "c")
    view = ow.resolve(tid, "b", "skip", reason="not needed")
    assert [(p.step_id, p.batch) for p in view.pending] == [("a", ["a", "c"]), ("c", ["a", "c"])]
    assert rows(workdir, "deliveries.jsonl") == []  # nothing runs before the wave is settled
    # The rest, keyed by interrupt id with targets (what the CLI's --step sends).
    iid = view.pending[0].interrupt_id
    both = {"decisions": [{"type": "retry"}, {"type": "retry"}], "targets": ["c", "a"]}
    view = ow.decide(tid, both, interrupt_id=iid)
    assert view.status == "done"
    assert _labels(workdir) == ["a", "c"]
    assert {d.step_id: d.action for d in view.decisions} == {
        "a": "retry",
        "b": "skip",
        "c": "retry",
    }


def test_a_wrong_number_of_decisions_for_escalations_is_refused_and_asked_again(
    ow: Onward, workdir: Path
) -> None:
    tid = _wave(ow, "a", "b")
    before = ow.pending(tid)
    with pytest.raises(AnswerError, match="asks about 2 actions"):
        ow.decide(tid, [{"type": "retry"}] * 3, interrupt_id=before[0].interrupt_id)
    assert ow.pending(tid) == before
    # Sent straight to the graph: the same question again, saying why; nothing ran.
    list(ow.stream(tid, command=Command(resume={"decisions": [{"type": "retry"}]})))
    again = ow.pending(tid)
    assert [p.step_id for p in again] == ["a", "b"]
    assert "asks about 2 actions (a, b)" in again[0].errors[0]
    assert rows(workdir, "deliveries.jsonl") == []


def test_a_decision_an_escalation_does_not_take_is_refused_naming_what_it_allows(
    ow: Onward, workdir: Path
) -> None:
    tid = _wave(ow, "a", "b")
    with pytest.raises(AnswerError, match="not an answer to this escalation question"):
        ow.decide(tid, [{"type": "retry"}, {"type": "respond", "message": "hm"}])
    assert [p.step_id for p in ow.pending(tid)] == ["a", "b"]
    assert rows(workdir, "deliveries.jsonl") == []


def test_abort_in_a_wave_of_escalations_cancels_the_run_and_nothing_runs(
    ow: Onward, workdir: Path
) -> None:
    tid = _wave(ow, "a", "b")
    view = ow.decide(tid, [{"type": "retry"}, {"type": "abort", "message": "stop"}])
    assert view.status == "cancelled"
    assert rows(workdir, "deliveries.jsonl") == []
