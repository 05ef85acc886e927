"""Humans in the loop: approvals bound to args, the HITL payload and its answers, parallel
questions, tokens, deadlines, the allowlist, and cancel with compensation.

Effects are counted by the tools in tests/support/hitl_tools.py (files in the work directory), so
"exactly once, with exactly the approved args" is read off real side effects.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from onward import Onward, Plan, PlanStep
from onward.errors import AnswerError, TokenError
from onward.model.state import PlanEdit, StepRecord, StepStatus
from onward.observe.events import EventKind
from onward.planning.revise import revision_problems
from onward.policies.run import Deadline, ExpiryAction, RunPolicy
from onward.tools.registry import default_registry
from tests.support import zygote
from tests.support.common import cli_env, start_run
from tests.support.hitl_tools import rows
from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "hitl_tools.py")
PAY_A = PlanStep(id="a", tool="pay", args={"amount": 5, "to": "alice"})


class Clock:
    """An injectable clock: deadlines are tested without sleeping."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def hitl(db_url: str, workdir: Path, clock: Clock) -> Iterator[Onward]:
    with Onward(db_url, tool_modules=[TOOLS], clock=clock) as client:
        yield client


def _start(ow: Onward, *steps: PlanStep, **policy: Any) -> str:
    return ow.start("hitl", plan=Plan(steps=list(steps)), policy=RunPolicy(**policy))


def _write_plan(workdir: Path, steps: list[dict[str, Any]]) -> None:
    (workdir / "plan.yaml").write_text(json.dumps({"goal": "pay", "steps": steps}))


# ----------------------------------------------------------------------------- the question


def test_an_unsafe_step_stops_with_the_hitl_payload_chat_frontends_render(hitl: Onward) -> None:
    view = hitl.drive(_start(hitl, PAY_A))
    assert view.status == "waiting_for_human"
    [interrupt] = hitl.graph.get_state(hitl._config(view.thread_id)).interrupts
    value = interrupt.value
    assert value["action_requests"] == [
        {
            "name": "pay",
            "args": {"amount": 5, "to": "alice"},
            "description": value["action_requests"][0]["description"],
        }
    ]
    assert value["review_configs"] == [
        {"action_name": "pay", "allowed_decisions": ["approve", "edit", "reject", "respond"]}
    ]
    assert value["onward"]["step_id"] == "a"
    [pending] = view.pending
    assert (pending.interrupt_id, pending.kind, pending.tool) == (interrupt.id, "approval", "pay")


def test_tools_tagged_with_a_dangerous_verb_and_policy_tools_need_approval(hitl: Onward) -> None:
    send = PlanStep(id="s", tool="send", args={"to": "x", "text": "hi"})
    assert hitl.drive(_start(hitl, send)).status == "waiting_for_human"  # tagged "send"
    slow = PlanStep(id="n", tool="slow", args={"value": 1})
    assert hitl.drive(_start(hitl, slow)).status == "done"  # pure, untagged
    assert hitl.drive(_start(hitl, slow, approve_tools={"slow"})).status == "waiting_for_human"
    assert hitl.drive(_start(hitl, PAY_A, auto_approve={"pay"})).status == "done"


def test_approve_runs_the_effect_once_with_the_approved_args(hitl: Onward, workdir: Path) -> None:
    tid = _start(hitl, PAY_A, PlanStep(id="b", tool="slow", depends_on=["a"]))
    hitl.drive(tid)
    view = hitl.approve(tid, "a", by="carol", reason="invoice 42")
    assert view.status == "done"
    assert [(p["to"], p["amount"]) for p in rows(workdir, "payments.jsonl")] == [("alice", 5)]
    [decision] = view.decisions
    assert (decision.step_id, decision.action, decision.by, decision.reason) == (
        "a",
        "approve",
        "carol",
        "invoice 42",
    )
    assert decision.args_hash
    assert decision.interrupt_id
    assert decision.at


# ----------------------------------------------------------------------------- across processes


def test_approval_round_trip_across_processes(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    _write_plan(workdir, [{"id": "a", "tool": "pay", "args": {"amount": 5, "to": "alice"}}])
    first = run_cli("run", "--plan", "plan.yaml", "--tools", TOOLS, "--json")
    assert first.code == 3, first.stderr  # stopped at the approval; the process exited
    tid = first.json()["thread_id"]
    listed = run_cli("inbox", "--json")
    assert listed.code == 0, listed.stderr
    [item] = listed.json()
    assert (item["thread_id"], item["step_id"], item["args"]) == (
        tid,
        "a",
        {"amount": 5, "to": "alice"},
    )
    assert rows(workdir, "payments.jsonl") == []
    approved = run_cli("approve", tid, "--step", "a", "--tools", TOOLS, "--json")
    assert approved.code == 0, approved.stderr
    assert approved.json()["status"] == "done"
    assert [(p["to"], p["amount"]) for p in rows(workdir, "payments.jsonl")] == [("alice", 5)]
    assert run_cli("inbox", "--json").json() == []


def test_a_rejected_payment_is_in_the_headline_of_the_finished_run(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    _write_plan(workdir, [{"id": "a", "tool": "pay", "args": {"amount": 5, "to": "alice"}}])
    tid = run_cli("run", "--plan", "plan.yaml", "--tools", TOOLS, "--json").json()["thread_id"]
    rejected = run_cli("reject", tid, "--step", "a", "--reason", "not this month", "--tools", TOOLS)
    assert rejected.code == 0, rejected.stderr  # the run is done: what was left ran
    headline = rejected.stdout.splitlines()[0]
    assert "status done, 1 step skipped" in headline
    assert rows(workdir, "payments.jsonl") == []


def test_sigkill_while_waiting_keeps_the_question(run_cli, workdir: Path, db_url: str) -> None:  # type: ignore[no-untyped-def]
    """The driver waits on an approval while a sibling step still runs; SIGKILL it. A new
    process lists the same question and answering it finishes the run, effect once."""
    _write_plan(
        workdir,
        [
            {"id": "a", "tool": "pay", "args": {"amount": 5, "to": "alice"}},
            {"id": "s", "tool": "slow"},
        ],
    )
    # Every tool call of this first driver takes 30 s, so it is still busy with "s".
    slow = {"ONWARD_FAULT_TOOL_DELAY": "30", "ONWARD_LEASE_TTL": "0.5", "ONWARD_HEARTBEAT": "0.1"}
    proc = start_run(workdir, db_url, "t-kill", TOOLS, **slow)
    try:
        deadline = time.monotonic() + 60
        items: list[dict[str, Any]] = []
        while not items and time.monotonic() < deadline:
            time.sleep(0.3)
            listed = run_cli("inbox", "--json")
            items = listed.json() if listed.code == 0 else []
        assert items, "the question never appeared"
        assert proc.poll() is None  # still driving the slow sibling
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    [again] = run_cli("inbox", "--json").json()
    assert again["interrupt_id"] == items[0]["interrupt_id"]
    time.sleep(0.6)  # the dead driver's lease expires; "s" re-runs, now without the delay
    approved = run_cli("approve", "t-kill", "--step", "a", "--tools", TOOLS, "--json", timeout=120)
    assert approved.code == 0, approved.stderr
    assert len(rows(workdir, "payments.jsonl")) == 1


# ----------------------------------------------------------------------------- binding


def test_args_changed_after_approval_are_refused_and_audited(hitl: Onward, workdir: Path) -> None:
    tid = _start(hitl, PAY_A)
    hitl.drive(tid)
    approved = hitl.approve(tid, "a", continue_run=False)
    assert approved.status == "running"
    assert not approved.pending
    tampered = PlanStep(id="a", tool="pay", args={"amount": 5000, "to": "mallory"})
    hitl.graph.update_state(hitl._config(tid), {"plan": PlanEdit(step=tampered)}, as_node="approve")
    view = hitl.resume(tid)
    assert rows(workdir, "payments.jsonl") == []  # refused: nothing paid
    [audit] = hitl.store.events.list(tid, [EventKind.APPROVAL_MISMATCH])
    assert audit.detail["approved_hash"] == approved.decisions[-1].args_hash
    assert audit.detail["current_hash"] != audit.detail["approved_hash"]
    assert audit.detail["args"] == {"amount": 5000, "to": "mallory"}
    # ... and the new args are put to a person instead.
    [pending] = view.pending
    assert pending.args == {"amount": 5000, "to": "mallory"}
    assert pending.args_hash == audit.detail["current_hash"]


# ----------------------------------------------------------------------------- answers


def test_invalid_edit_is_refused_and_loses_nothing_then_a_valid_edit_runs(
    hitl: Onward, workdir: Path
) -> None:
    tid = _start(hitl, PAY_A)
    [before] = hitl.drive(tid).pending
    with pytest.raises(AnswerError, match="amount"):
        hitl.approve(tid, "a", edit={"amount": "lots"})
    assert [p.interrupt_id for p in hitl.get(tid).pending] == [before.interrupt_id]
    view = hitl.approve(tid, "a", edit={"amount": 6}, reason="rounded")
    assert view.status == "done"
    assert [p["amount"] for p in rows(workdir, "payments.jsonl")] == [6]
    [decision] = view.decisions
    assert decision.action == "edit"
    assert decision.args_hash != before.args_hash


def test_an_invalid_answer_sent_straight_to_the_graph_is_asked_again_with_its_errors(
    hitl: Onward, workdir: Path
) -> None:
    """A chat frontend resumes the graph directly: the node re-asks, nothing is lost."""
    tid = _start(hitl, PAY_A)
    [before] = hitl.drive(tid).pending
    bad = {"decisions": [{"type": "edit", "edited_action": {"name": "pay", "args": {"to": 3}}}]}
    list(hitl.stream(tid, command=Command(resume={before.interrupt_id: bad})))
    [again] = hitl.get(tid).pending
    assert again.errors
    assert "amount" in again.errors[0]
    assert rows(workdir, "payments.jsonl") == []
    good = {"decisions": [{"type": "approve"}]}
    list(hitl.stream(tid, command=Command(resume={again.interrupt_id: good})))
    assert hitl.get(tid).status == "done"
    assert len(rows(workdir, "payments.jsonl")) == 1


@pytest.mark.parametrize(
    ("answer", "paid"),
    [
        ([{"type": "accept", "args": None}], 5),
        ([{"type": "edit", "args": {"action": "pay", "args": {"amount": 9, "to": "al"}}}], 9),
        ([{"type": "ignore", "args": None}], None),
    ],
    ids=["accept", "edit", "ignore"],
)
def test_the_older_human_response_list_is_understood(
    hitl: Onward, workdir: Path, answer: list[dict[str, Any]], paid: int | None
) -> None:
    tid = _start(hitl, PAY_A)
    hitl.drive(tid)
    view = hitl.decide(tid, answer, step="a")
    assert view.status == "done"
    assert [p["amount"] for p in rows(workdir, "payments.jsonl")] == ([paid] if paid else [])


def test_reject_skips_the_step_and_everything_downstream_with_the_reason(
    hitl: Onward, workdir: Path
) -> None:
    tid = _start(
        hitl,
        PAY_A,
        PlanStep(id="b", tool="slow", depends_on=["a"]),
        PlanStep(id="c", tool="slow", depends_on=["b"]),
        PlanStep(id="free", tool="slow"),
    )
    hitl.drive(tid)
    view = hitl.reject(tid, "a", reason="wrong person", by="dana")
    assert view.status == "done"
    status = {s.id: s.status for s in view.steps}
    assert status == {"a": "skipped", "b": "skipped", "c": "skipped", "free": "done"}
    state = hitl.state(tid)
    assert state.record("a").note == "rejected by dana: wrong person"
    assert "depends on 'a'" in (state.record("c").note or "")
    assert rows(workdir, "payments.jsonl") == []
    assert view.decisions[-1].action == "reject"


def test_respond_records_the_feedback_for_replanning(hitl: Onward, workdir: Path) -> None:
    tid = _start(hitl, PAY_A)
    hitl.drive(tid)
    view = hitl.respond(tid, "pay bob instead", step="a", by="erin")
    assert rows(workdir, "payments.jsonl") == []
    [step] = view.steps
    assert (step.status, step.failure_class) == ("failed", "validation")
    assert step.findings == ["feedback from erin: pay bob instead"]
    assert view.decisions[-1].action == "respond"
    assert view.decisions[-1].reason == "pay bob instead"
    assert any("pay bob instead" in m.text for m in hitl.state(tid).messages)


PAY_B = PlanStep(id="b", tool="pay", args={"amount": 7, "to": "bob"})


def test_a_wave_of_approvals_is_one_interrupt_with_n_action_requests(hitl: Onward) -> None:
    tid = _start(hitl, PAY_A, PAY_B)
    view = hitl.drive(tid)
    [interrupt] = hitl.graph.get_state(hitl._config(tid)).interrupts
    value = interrupt.value
    assert [a["name"] for a in value["action_requests"]] == ["pay", "pay"]
    assert [a["args"]["to"] for a in value["action_requests"]] == ["alice", "bob"]
    assert [c["action_name"] for c in value["review_configs"]] == ["pay", "pay"]
    assert [q["step_id"] for q in value["onward"]["questions"]] == ["a", "b"]
    assert [(p.step_id, p.interrupt_id, p.batch) for p in view.pending] == [
        ("a", interrupt.id, ["a", "b"]),
        ("b", interrupt.id, ["a", "b"]),
    ]


def test_n_unkeyed_decisions_answer_the_wave_in_order(hitl: Onward, workdir: Path) -> None:
    tid = _start(hitl, PAY_A, PAY_B)
    hitl.drive(tid)
    # What agent-chat-ui sends: one unkeyed {"decisions": [...]}, one per action request.
    list(
        hitl.stream(
            tid,
            command=Command(
                resume={
                    "decisions": [
                        {"type": "approve"},
                        {"type": "reject", "message": "not bob"},
                    ]
                }
            ),
        )
    )
    view = hitl.get(tid)
    assert view.status == "done"
    assert [p["to"] for p in rows(workdir, "payments.jsonl")] == ["alice"]
    assert {d.step_id: d.action for d in view.decisions} == {"a": "approve", "b": "reject"}
    assert len({d.interrupt_id for d in view.decisions}) == 1


def test_the_python_api_answers_a_wave_with_a_list_of_decisions(
    hitl: Onward, workdir: Path
) -> None:
    tid = _start(hitl, PAY_A, PAY_B)
    [a, _b] = hitl.drive(tid).pending
    edit_b = {
        "type": "edit",
        "edited_action": {"name": "pay", "args": {"amount": 1, "to": "carol"}},
    }
    view = hitl.decide(tid, [{"type": "approve"}, edit_b], interrupt_id=a.interrupt_id)
    assert view.status == "done"
    assert sorted(p["to"] for p in rows(workdir, "payments.jsonl")) == ["alice", "carol"]


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")], ids=["a-first", "b-first"])
def test_one_step_of_a_wave_is_answered_by_name_and_the_others_stay_asked(
    hitl: Onward, workdir: Path, order: tuple[str, str]
) -> None:
    tid = _start(hitl, PAY_A, PAY_B)
    hitl.drive(tid)
    first, second = order
    view = hitl.decide(tid, {"type": "approve"}, step=first)
    assert view.status == "waiting_for_human"
    assert [(p.step_id, p.batch) for p in view.pending] == [(second, [second])]
    assert rows(workdir, "payments.jsonl") == []  # nothing runs before the wave is answered
    view = hitl.decide(tid, {"type": "approve"}, step=second)
    assert view.status == "done"
    assert sorted(p["to"] for p in rows(workdir, "payments.jsonl")) == ["alice", "bob"]


def test_a_wrong_number_of_decisions_is_refused_and_changes_nothing(
    hitl: Onward, workdir: Path
) -> None:
    tid = _start(hitl, PAY_A, PAY_B)
    before = hitl.drive(tid).pending
    with pytest.raises(AnswerError, match="asks about 2 actions"):
        hitl.decide(tid, [{"type": "approve"}] * 3, interrupt_id=before[0].interrupt_id)
    assert hitl.get(tid).pending == before
    # Sent straight to the graph: the question is asked again, with why.
    list(hitl.stream(tid, command=Command(resume={"decisions": [{"type": "approve"}]})))
    again = hitl.get(tid).pending
    assert [p.step_id for p in again] == ["a", "b"]
    assert "asks about 2 actions (a, b)" in again[0].errors[0]
    assert rows(workdir, "payments.jsonl") == []


def test_decisions_for_steps_not_asked_are_refused(hitl: Onward, workdir: Path) -> None:
    tid = _start(
        hitl, PAY_A, PlanStep(id="c", tool="pay", args={"amount": 9, "to": "eve"}, depends_on=["a"])
    )
    hitl.drive(tid)
    value = {"decisions": [{"type": "approve"}], "targets": ["c"]}
    list(hitl.stream(tid, command=Command(resume=value)))
    [again] = hitl.get(tid).pending
    assert again.step_id == "a"
    assert "not asked: 'c'" in again.errors[0]
    assert rows(workdir, "payments.jsonl") == []


def test_a_run_waiting_on_several_questions_needs_to_be_told_which(hitl: Onward) -> None:
    tid = _start(hitl, PAY_A, PlanStep(id="b", tool="pay", args={"amount": 7, "to": "bob"}))
    hitl.drive(tid)
    with pytest.raises(Exception, match="waits on 2 decisions"):
        hitl.approve(tid)


# ----------------------------------------------------------------------------- the plan


def test_approve_plan_edit_and_reject(hitl: Onward, workdir: Path) -> None:
    tid = _start(hitl, PlanStep(id="n", tool="slow", args={"value": 1}), approve_plan=True)
    [question] = hitl.drive(tid).pending
    assert (question.kind, question.step_id, question.tool) == ("plan", None, "approve_plan")
    steps = [{"id": "m", "tool": "slow", "args": {"value": 2}}]
    view = hitl.approve(tid, "plan", args={"steps": steps})
    assert view.status == "done"
    assert [s.id for s in view.steps] == ["m"]
    assert view.plan_version == 2

    tid = _start(hitl, PlanStep(id="n", tool="slow"), approve_plan=True)
    hitl.drive(tid)
    view = hitl.reject(tid, "plan", reason="not today")
    assert view.status == "cancelled"
    assert view.failure is not None
    assert "not today" in view.failure.message


def test_a_plan_edit_at_approval_cannot_grow_the_plan_past_the_runs_limit(
    hitl: Onward,
) -> None:
    tid = _start(hitl, PlanStep(id="n", tool="slow"), approve_plan=True, max_plan_steps=2)
    hitl.drive(tid)
    steps = [{"id": f"m{i}", "tool": "slow"} for i in range(3)]
    with pytest.raises(AnswerError, match=r"3 steps; this run allows at most 2 \(max_plan_steps\)"):
        hitl.approve(tid, "plan", args={"steps": steps})
    assert [s.id for s in hitl.state(tid).plan.steps] == ["n"]  # nothing changed
    view = hitl.approve(tid, "plan", args={"steps": steps[:2]})
    assert view.status == "done"
    assert [s.id for s in view.steps] == ["m0", "m1"]


# ----------------------------------------------------------------------------- tokens


def test_resume_tokens(hitl: Onward, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONWARD_SECRET", "s3cret")
    tid = _start(hitl, PAY_A)
    hitl.drive(tid)
    [item] = hitl.inbox(user="alice")
    assert item.token
    with pytest.raises(TokenError, match="needs a resume token"):
        hitl.approve(tid, "a", by="alice")
    # A different last hex digit of the signature (one in 16 tokens already ends in "0").
    forged = item.token[:-1] + ("1" if item.token.endswith("0") else "0")
    with pytest.raises(TokenError, match="does not match"):
        hitl.approve(tid, "a", by="alice", token=forged)
    with pytest.raises(TokenError, match="issued to 'alice', not to 'bob'"):
        hitl.approve(tid, "a", by="bob", token=item.token)
    clock.now += timedelta(hours=1)  # past the 15-minute default lifetime
    with pytest.raises(TokenError, match="expired"):
        hitl.approve(tid, "a", by="alice", token=item.token)
    assert hitl.get(tid).status == "waiting_for_human"  # every refusal changed nothing
    [fresh] = hitl.inbox(user="alice")
    assert hitl.approve(tid, "a", by="alice", token=fresh.token).status == "done"


def test_a_token_is_for_one_decision_only(hitl: Onward, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONWARD_SECRET", "s3cret")
    tid = _start(hitl, PAY_A, PlanStep(id="b", tool="pay", args={"amount": 7, "to": "bob"}))
    hitl.drive(tid)
    tokens = {i.step_id: i.token for i in hitl.inbox(user="alice")}
    with pytest.raises(TokenError, match="does not match"):
        hitl.approve(tid, "a", by="alice", token=tokens["b"])
    # a and b are one batch: its batch token answers both at once, a step's token does not
    [item, _] = hitl.inbox(user="alice")
    both = [{"type": "approve"}, {"type": "approve"}]
    with pytest.raises(TokenError, match="does not match"):
        hitl.decide(tid, both, by="alice", token=tokens["a"])
    assert hitl.decide(tid, both, by="alice", token=item.batch_token).status == "done"


# ----------------------------------------------------------------------------- deadlines


def test_deadline_reminds_once_then_rejects_at_expiry(hitl: Onward, clock: Clock) -> None:
    tid = _start(hitl, PAY_A, PlanStep(id="b", tool="slow", depends_on=["a"]))
    asked = clock.now
    hitl.drive(tid)
    assert hitl.sweep(asked + timedelta(hours=5, minutes=59)).reminded == []
    report = hitl.sweep(asked + timedelta(hours=6))
    assert [i.step_id for i in report.reminded] == ["a"]
    assert hitl.sweep(asked + timedelta(hours=7)).reminded == []  # once
    [reminder] = hitl.store.events.list(tid, [EventKind.APPROVAL_REMINDER])
    assert reminder.at == asked + timedelta(hours=6)
    assert hitl.get(tid).status == "waiting_for_human"
    report = hitl.sweep(asked + timedelta(hours=24))
    assert [i.step_id for i in report.rejected] == ["a"]
    view = hitl.get(tid)
    assert view.status == "done"
    assert {s.id: s.status for s in view.steps} == {"a": "skipped", "b": "skipped"}
    assert view.decisions[-1].by == "onward-sweep"
    [expired] = hitl.store.events.list(tid, [EventKind.APPROVAL_EXPIRED])
    assert expired.detail["applied"] == "reject"


def test_an_expired_wave_has_every_question_rejected_by_one_sweep(
    hitl: Onward, clock: Clock, workdir: Path
) -> None:
    tid = _start(hitl, PAY_A, PAY_B)
    asked = clock.now
    hitl.drive(tid)
    report = hitl.sweep(asked + timedelta(hours=24))
    assert ([i.step_id for i in report.rejected], report.errors) == (["a", "b"], [])
    view = hitl.get(tid)
    assert view.status == "done"
    assert {s.id: s.status for s in view.steps} == {"a": "skipped", "b": "skipped"}
    assert rows(workdir, "payments.jsonl") == []


def test_deadline_can_suspend_the_run_and_an_answer_still_resumes_it(
    hitl: Onward, clock: Clock, workdir: Path
) -> None:
    deadline = Deadline(expire_after=timedelta(hours=2), on_expiry=ExpiryAction.SUSPEND)
    tid = _start(hitl, PAY_A, deadline=deadline)
    hitl.drive(tid)
    report = hitl.sweep(clock.now + timedelta(hours=2))
    assert [i.step_id for i in report.suspended] == ["a"]
    view = hitl.get(tid)
    assert view.status == "suspended"
    assert view.pending
    assert hitl.approve(tid, "a").status == "done"
    assert len(rows(workdir, "payments.jsonl")) == 1


def test_a_tool_can_carry_its_own_deadline(hitl: Onward, clock: Clock) -> None:
    tid = _start(hitl, PlanStep(id="s", tool="send", args={"to": "x", "text": "hi"}))
    [item] = hitl.drive(tid).pending
    assert item.expire_at - item.asked_at == timedelta(minutes=30)  # from the send spec
    policy = RunPolicy(tool_deadlines={"send": Deadline(expire_after=timedelta(minutes=5))})
    tid = hitl.start(
        "x",
        plan=Plan(steps=[PlanStep(id="s", tool="send", args={"to": "x", "text": "hi"})]),
        policy=policy,
    )
    [item] = hitl.drive(tid).pending
    assert item.expire_at - item.asked_at == timedelta(minutes=5)


# ----------------------------------------------------------------------------- allowlist


def test_a_plan_using_a_tool_outside_the_allowlist_is_refused(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    _write_plan(workdir, [{"id": "a", "tool": "pay", "args": {"amount": 5, "to": "alice"}}])
    refused = run_cli("run", "--plan", "plan.yaml", "--tools", TOOLS, "--allow-tools", "slow")
    assert refused.code == 2
    assert "tool 'pay' is not allowed in this run (allowed: slow)" in refused.stderr


def test_edits_that_introduce_a_tool_outside_the_allowlist_are_refused(hitl: Onward) -> None:
    tid = _start(hitl, PAY_A, allow_tools={"pay", "slow"})
    hitl.drive(tid)
    with pytest.raises(AnswerError, match="'send' is not allowed"):
        hitl.decide(
            tid,
            {"type": "edit", "edited_action": {"name": "send", "args": {"to": "x", "text": "y"}}},
        )
    tid = _start(hitl, PlanStep(id="n", tool="slow"), approve_plan=True, allow_tools={"slow"})
    hitl.drive(tid)
    with pytest.raises(AnswerError, match="'pay' is not allowed"):
        hitl.approve(tid, "plan", args={"steps": [PAY_A.model_dump()]})


def test_a_revision_may_not_change_done_steps_or_leave_the_allowlist() -> None:
    old = Plan(steps=[PlanStep(id="n", tool="slow", args={"value": 1})])
    new = Plan(version=2, steps=[PlanStep(id="n", tool="slow", args={"value": 2}), PAY_A])
    done = {"n": StepRecord(id="n", status=StepStatus.DONE)}
    problems = [
        str(p)
        for p in revision_problems(
            old, new, done, default_registry, allow_tools=frozenset({"slow"})
        )
    ]
    assert any("a done step cannot be changed" in p for p in problems)
    assert any("'pay' is not allowed" in p for p in problems)


def test_a_plan_object_outside_the_allowlist_fails_at_planning(hitl: Onward) -> None:
    view = hitl.drive(_start(hitl, PAY_A, allow_tools={"slow"}))
    assert view.status == "failed"
    assert view.failure is not None
    assert view.failure.kind == "planning"
    assert "'pay' is not allowed" in view.failure.message


# ----------------------------------------------------------------------------- cancel


def _paid_three(hitl: Onward) -> str:
    """Three payments done (auto-approved), then a step that waits for a person."""
    steps = [
        PlanStep(
            id=f"p{i}",
            tool="pay",
            args={"amount": i, "to": f"r{i}"},
            depends_on=[f"p{i - 1}"] if i > 1 else [],
        )
        for i in (1, 2, 3)
    ]
    steps.append(
        PlanStep(id="last", tool="send", args={"to": "x", "text": "done"}, depends_on=["p3"])
    )
    tid = _start(hitl, *steps, auto_approve={"pay"})
    assert hitl.drive(tid).status == "waiting_for_human"
    return tid


def test_cancel_with_compensation_undoes_effects_newest_first_once(
    hitl: Onward, workdir: Path
) -> None:
    tid = _paid_three(hitl)
    report = hitl.cancel(tid, compensate=True, reason="customer withdrew", by="frank")
    assert report.view.status == "cancelled"
    assert report.complete
    assert not report.view.pending
    assert [r["to"] for r in rows(workdir, "refunds.jsonl")] == ["r3", "r2", "r1"]
    assert [c.status for c in report.compensations] == ["done"] * 3
    again = hitl.cancel(tid, compensate=True)  # repeating changes nothing
    assert [c.status for c in again.compensations] == ["already"] * 3
    assert len(rows(workdir, "refund_calls.jsonl")) == 3
    assert report.view.decisions[-1].action == "cancel"
    assert len(hitl.store.events.list(tid, [EventKind.COMPENSATED])) == 3
    assert hitl.resume(tid).status == "cancelled"  # nothing runs after a cancel
    assert rows(workdir, "sent.jsonl") == []


@pytest.mark.parametrize("fault", ["after_compensate", "after_compensation_record"])
def test_cancel_killed_mid_compensation_finishes_when_repeated(
    hitl: Onward, workdir: Path, db_url: str, fault: str
) -> None:
    tid = _paid_three(hitl)

    def cancel(**env: str) -> subprocess.CompletedProcess[str]:
        return zygote.run(
            ["cancel", tid, "--compensate", "--tools", TOOLS, "--db", db_url, "--json"],
            cwd=workdir,
            timeout=120,
            env=cli_env(ONWARD_LEASE_TTL="0.5", ONWARD_HEARTBEAT="0.1", **env),
        )

    killed = cancel(ONWARD_FAULT_KILL=f"{fault}:p2")
    assert killed.returncode == -9, killed.stderr
    time.sleep(0.6)  # the killed canceller's lease expires
    done = cancel()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "cancelled"
    # Each refund happened once, newest first; only a compensation killed before its ledger
    # record was called again (with the same key, so the idempotent refund did nothing).
    assert [r["to"] for r in rows(workdir, "refunds.jsonl")] == ["r3", "r2", "r1"]
    calls = [c["to"] for c in rows(workdir, "refund_calls.jsonl")]
    assert calls == (
        ["r3", "r2", "r2", "r1"] if fault == "after_compensate" else ["r3", "r2", "r1"]
    )


def test_cancel_asks_a_live_driver_to_stop_at_its_next_step(
    run_cli,
    workdir: Path,
    db_url: str,  # type: ignore[no-untyped-def]
) -> None:
    steps = [
        {
            "id": f"s{i}",
            "tool": "slow",
            "args": {"seconds": 0.5, "value": i},
            **({"depends_on": [f"s{i - 1}"]} if i else {}),
        }
        for i in range(40)
    ]
    _write_plan(workdir, steps)
    driver = start_run(workdir, db_url, "t-live", TOOLS)
    try:
        _until_a_step_is_done(run_cli, "t-live")  # the driver is live, whatever the host's load
        cancelled = run_cli("cancel", "t-live", "--reason", "enough", "--json")
        assert cancelled.code == 0, cancelled.stderr
        out, _ = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1  # the driver stopped; its run is cancelled
    view = json.loads(out)
    assert view["status"] == "cancelled"
    done = [s for s in view["steps"] if s["status"] == "done"]
    assert 0 < len(done) < 40
    assert cancelled.json()["status"] == "cancelled"


def _until_a_step_is_done(run_cli: Any, thread_id: str, timeout: float = 60) -> None:
    """Wait until the run exists and has a step done (a loaded host starts a driver late)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        shown = run_cli("status", thread_id, "--json")
        if shown.code == 0 and any(s["status"] == "done" for s in shown.json()["steps"]):
            return
        time.sleep(0.2)
    raise AssertionError(f"{thread_id} had no step done within {timeout} s")


def test_a_finished_run_cannot_be_cancelled(hitl: Onward) -> None:
    tid = _start(hitl, PlanStep(id="n", tool="slow"))
    hitl.drive(tid)
    with pytest.raises(Exception, match="already finished"):
        hitl.cancel(tid)


def test_cancel_of_a_run_that_finished_meanwhile_undoes_nothing(
    hitl: Onward, workdir: Path
) -> None:
    tid = _start(hitl, PAY_A, auto_approve={"pay"})
    hitl.drive(tid)
    with pytest.raises(Exception, match="already finished"):
        hitl.cancel(tid, compensate=True)
    assert rows(workdir, "refunds.jsonl") == []


def test_a_plan_edit_mid_run_cannot_change_a_done_step(hitl: Onward) -> None:
    first = PlanStep(id="n", tool="slow", args={"value": 1})
    second = PAY_A.model_copy(update={"id": "m", "depends_on": ["n"]})
    tid = _start(hitl, first, second, approve_plan=True)
    hitl.drive(tid)
    assert [p.kind for p in hitl.approve(tid, "plan").pending] == ["approval"]  # n done
    # The plan's shape changes under the run (a new step): it is put to a person again.
    extra = PlanStep(id="z", tool="slow", depends_on=["m"])
    state = hitl.state(tid)
    hitl.graph.update_state(
        hitl._config(tid),
        {"plan": state.plan.model_copy(update={"steps": [*state.plan.steps, extra]})},
        as_node="gate",
    )
    view = hitl.resume(tid)
    assert [p.kind for p in view.pending] == ["plan"]
    changed = [first.model_copy(update={"args": {"value": 999}}).model_dump(), extra.model_dump()]
    with pytest.raises(AnswerError, match="a done step cannot be changed"):
        hitl.approve(tid, "plan", args={"steps": changed})
