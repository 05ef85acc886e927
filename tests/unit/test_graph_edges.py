"""Every drawn edge that is not taken on the way elsewhere in the suite is taken here, by a
real run, and each test reads the edge back from the run's checkpoint history.

Together with the rest of the suite this keeps the drawing exact: the session check in
conftest.py fails when a run takes an edge that is not drawn, and when a whole-suite run
leaves a drawn edge untaken (tests/support/route_trace.py). Most of these edges come from the
scheduler running after a node that is not the usual one: a person's answer, a retry's
backoff, a replan, a wait. Budget warnings go out only beside work that runs, so a warning
crossed while a failure or a person was being handled goes out after that.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Send

from onward import Budget, Onward, Plan, PlanStep, RunPolicy
from onward.graph import schedule
from onward.graph.trace import thread_transitions
from onward.llm.fake import ScriptedChatModel
from onward.policies.retry import RetryPolicy
from onward.store.breakers import BreakerPolicy
from onward.testing import FakeTime
from onward.verification.checks import Equals
from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "failure_tools.py")

LATER = RetryPolicy(max_attempts=3, initial_delay=100.0, max_delay=100.0)
"""A backoff long enough that the step is still deferred when the scheduler next looks."""
AT_ONCE = RetryPolicy(max_attempts=3, initial_delay=0.0, max_delay=0.0)
ASK_SLOW = RunPolicy(approve_tools=frozenset({"slow"}))


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def fow(db_url: str, workdir: Path, fake: FakeTime) -> Iterator[Onward]:
    """A client with the failing test tools, on a clock the test moves; long in-process
    waits, so a backoff is waited out (on the fake clock) rather than suspending the run."""
    with Onward(
        db_url,
        tool_modules=[TOOLS],
        clock=fake.clock,
        sleep=fake.sleep,
        rng=random.Random(3),
        max_wait=1000.0,
    ) as client:
        yield client


def _taken(ow: Onward, thread_id: str) -> set[tuple[str, str]]:
    return thread_transitions(ow.graph, thread_id)


def _skip(ow: Onward, thread_id: str, step: str) -> Any:
    return ow.decide(thread_id, {"type": "skip", "message": "leave it"}, step=step)


def _steps(*steps: PlanStep) -> Plan:
    return Plan(steps=list(steps))


def _wrong(sid: str = "w", tool: str = "wrong_output") -> PlanStep:
    """A step whose output fails its check (a validation failure) until its tool's
    fallback replaces it."""
    return PlanStep(id=sid, tool=tool, args={"n": 2}, checks=[Equals(field="value", value=2)])


def _fails(sid: str) -> PlanStep:
    """A deterministic failure no rule can fix: a person is asked."""
    return PlanStep(id=sid, tool="always_value_error", args={"x": 1})


def _flaky(sid: str, retry: RetryPolicy) -> PlanStep:
    return PlanStep(id=sid, tool="flaky", args={"times": 1}, retry=retry)


def _slow(sid: str) -> PlanStep:
    return PlanStep(id=sid, tool="slow", args={"value": 1})


# ------------------------------------------------------------------------- after approve


def test_an_approved_plan_goes_on_to_a_step_that_needs_approval(fow: Onward, workdir: Path) -> None:
    policy = RunPolicy(approve_plan=True, approve_tools=frozenset({"slow"}))
    view = fow.run("two questions", plan=_steps(_slow("a")), workdir=workdir, policy=policy)
    assert [p.kind for p in view.pending] == ["plan"]
    view = fow.approve(view.thread_id)
    assert [p.step_id for p in view.pending] == ["a"]
    view = fow.approve(view.thread_id, "a")
    assert view.status == "done"
    assert ("approve", "approve") in _taken(fow, view.thread_id)


def test_feedback_instead_of_an_approval_sends_the_step_to_replan(
    fow: Onward, workdir: Path
) -> None:
    policy = RunPolicy(approve_tools=frozenset({"wrong_output"}))
    view = fow.run("feedback", plan=_steps(_wrong()), workdir=workdir, policy=policy)
    view = fow.respond(view.thread_id, "that tool gives the wrong sign", step="w")
    assert view.status == "done"
    assert view.steps[0].tool == "right_output"
    assert ("approve", "replan") in _taken(fow, view.thread_id)


def test_time_a_person_takes_to_answer_counts_against_the_run_time_budget(
    fow: Onward, fake: FakeTime, workdir: Path
) -> None:
    budget = Budget(max_run_time=timedelta(seconds=100))
    view = fow.run(
        "slow answer", plan=_steps(_slow("a")), workdir=workdir, policy=ASK_SLOW, budget=budget
    )
    fake.advance(60)  # the person answers after 60 % of the run's time
    view = fow.approve(view.thread_id, "a")
    assert view.status == "done"
    assert {("approve", "execute"), ("approve", "note")} <= _taken(fow, view.thread_id)
    assert "run_time:50:100" in fow.state(view.thread_id).budget_warnings


# --------------------------------------------------------------------------- after retry


def test_a_step_in_backoff_leaves_the_next_step_to_its_approval_then_to_a_wait(
    fow: Onward, workdir: Path
) -> None:
    plan = _steps(_flaky("f", LATER), _slow("a"))
    view = fow.run("backoff", plan=plan, workdir=workdir, policy=ASK_SLOW, max_concurrency=1)
    assert [p.step_id for p in view.pending] == ["a"]
    view = fow.reject(view.thread_id, "a", reason="not today")
    assert view.status == "done"
    assert [s.status for s in view.steps] == ["done", "skipped"]
    assert {("retry", "approve"), ("approve", "wait"), ("wait", "execute")} <= _taken(
        fow, view.thread_id
    )


def test_a_transient_and_a_fixable_failure_in_one_wave_retry_first_then_replan(
    fow: Onward, workdir: Path
) -> None:
    # Two attempts of four: the 50 % warning is crossed while failures are handled, so it
    # goes out beside the next work, after the replan.
    plan = _steps(_flaky("f", LATER), _wrong())
    view = fow.run("both", plan=plan, workdir=workdir, budget=Budget(max_steps=4))
    assert view.status == "done"
    taken = _taken(fow, view.thread_id)
    assert {("verify", "retry"), ("retry", "replan"), ("replan", "note")} <= taken


def test_a_warning_crossed_by_a_failing_attempt_goes_out_beside_its_retry(
    fow: Onward, workdir: Path
) -> None:
    plan = _steps(_flaky("f", AT_ONCE))
    view = fow.run("warned", plan=plan, workdir=workdir, budget=Budget(max_steps=2))
    assert view.status == "done"
    assert {("retry", "execute"), ("retry", "note")} <= _taken(fow, view.thread_id)


# ------------------------------------------------------------------------ after escalate


def test_a_skipped_failure_hands_on_to_the_next_question_with_the_warning_it_crossed(
    fow: Onward, workdir: Path
) -> None:
    plan = _steps(_fails("v"), _slow("c"))
    view = fow.run(
        "escalate then approve",
        plan=plan,
        workdir=workdir,
        policy=ASK_SLOW,
        max_concurrency=1,
        budget=Budget(max_steps=2),
    )
    assert [p.step_id for p in view.pending] == ["v"]
    view = _skip(fow, view.thread_id, "v")
    assert [p.step_id for p in view.pending] == ["c"]
    view = fow.approve(view.thread_id, "c")
    assert view.status == "done"
    assert {("escalate", "approve"), ("escalate", "note")} <= _taken(fow, view.thread_id)


@pytest.mark.parametrize(
    ("other", "route"),
    [(_wrong(), "replan"), (_flaky("f", AT_ONCE), "retry")],
    ids=["fixable", "transient"],
)
def test_a_failure_for_a_person_is_asked_before_its_siblings_failures_are_handled(
    fow: Onward, workdir: Path, other: PlanStep, route: str
) -> None:
    view = fow.run("people first", plan=_steps(_fails("v"), other), workdir=workdir)
    assert [p.step_id for p in view.pending] == ["v"]
    view = _skip(fow, view.thread_id, "v")
    assert view.status == "done"
    assert ("escalate", route) in _taken(fow, view.thread_id)


def test_a_skipped_failure_leaves_only_a_step_in_backoff_so_the_run_waits(
    fow: Onward, workdir: Path
) -> None:
    plan = _steps(_flaky("f", LATER), _fails("v"))
    view = fow.run("wait after", plan=plan, workdir=workdir, max_concurrency=1)
    assert [p.step_id for p in view.pending] == ["v"]
    view = _skip(fow, view.thread_id, "v")
    assert view.status == "done"
    assert ("escalate", "wait") in _taken(fow, view.thread_id)


# --------------------------------------------------------------------------- after a wave


@pytest.fixture
def one_interrupt_per_escalation(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an older onward wrote for a wave of escalations: one task (one interrupt) per
    step, each told its wave's size, joined at the gate. Their checkpoints still resume."""
    original = schedule._one_interrupt

    def older(node: str, questions: list[Any]) -> Any:
        if node != "escalate" or len(questions) == 1:
            return original(node, questions)
        return [Send(node, q) for q in questions]

    def wave(sends: list[Any], current: int | None = None) -> list[Send]:
        flat = [x for s in sends for x in (s if isinstance(s, list) else [s])]
        return plain_wave(flat, current)

    plain_wave = schedule._wave
    monkeypatch.setattr(schedule, "_one_interrupt", older)
    monkeypatch.setattr(schedule, "_wave", wave)


@pytest.mark.usefixtures("one_interrupt_per_escalation")
def test_an_older_checkpoints_two_questions_join_at_the_gate_which_asks_the_next(
    fow: Onward, workdir: Path
) -> None:
    plan = _steps(_fails("v1"), _fails("v2"), _slow("c"))
    view = fow.run(
        "two at once",
        plan=plan,
        workdir=workdir,
        policy=ASK_SLOW,
        max_concurrency=2,
        budget=Budget(max_steps=4),
    )
    assert sorted(p.step_id or "" for p in view.pending) == ["v1", "v2"]
    _skip(fow, view.thread_id, "v1")
    view = _skip(fow, view.thread_id, "v2")
    assert [p.step_id for p in view.pending] == ["c"]
    view = fow.approve(view.thread_id, "c")
    assert view.status == "done"
    assert {("escalate", "gate"), ("gate", "approve"), ("gate", "note")} <= _taken(
        fow, view.thread_id
    )


@pytest.mark.usefixtures("one_interrupt_per_escalation")
def test_after_an_older_wave_of_questions_only_a_step_in_backoff_is_left_so_the_run_waits(
    fow: Onward, workdir: Path
) -> None:
    first = _steps(_flaky("f", LATER), _slow("x"), _fails("v1"), _fails("v2"))
    view = fow.run("gate waits", plan=first, workdir=workdir, max_concurrency=2)
    assert sorted(p.step_id or "" for p in view.pending) == ["v1", "v2"]
    _skip(fow, view.thread_id, "v1")
    view = _skip(fow, view.thread_id, "v2")
    assert view.status == "done"
    assert ("gate", "wait") in _taken(fow, view.thread_id)


# -------------------------------------------------------------------------- after replan


def test_a_replacement_tool_that_needs_approval_is_asked_about(fow: Onward, workdir: Path) -> None:
    policy = RunPolicy(approve_tools=frozenset({"right_output"}))
    view = fow.run("ask the fix", plan=_steps(_wrong()), workdir=workdir, policy=policy)
    assert [p.step_id for p in view.pending] == ["w"]
    view = fow.approve(view.thread_id, "w")
    assert view.status == "done"
    assert ("replan", "approve") in _taken(fow, view.thread_id)


def test_a_refused_revision_with_no_one_to_ask_fails_the_run(fow: Onward, workdir: Path) -> None:
    policy = RunPolicy(allow_tools=frozenset({"wrong_output"}), escalate_failures=False)
    view = fow.run("no fix allowed", plan=_steps(_wrong()), workdir=workdir, policy=policy)
    assert view.status == "failed"
    assert ("replan", "finalize") in _taken(fow, view.thread_id)


def test_a_replacement_whose_service_rests_waits_for_it(fow: Onward, workdir: Path) -> None:
    fow.store.breakers.record("resting", False, BreakerPolicy(consecutive=1, cooldown=3600.0), "x")
    view = fow.run("resting", plan=_steps(_wrong(tool="tired")), workdir=workdir)
    assert view.status == "suspended"  # the breaker's hour is longer than any in-process wait
    assert view.steps[0].tool == "rested"
    assert ("replan", "wait") in _taken(fow, view.thread_id)


def test_rules_revise_first_and_the_model_revises_what_is_left_on_the_next_pass(
    db_url: str, workdir: Path
) -> None:
    model = ScriptedChatModel(responses=[{"steps": [], "need_help": "I cannot fix x=1"}])
    with Onward(db_url, tool_modules=[TOOLS], model=model) as ow:
        view = ow.run("rules then model", plan=_steps(_wrong(), _fails("v")), workdir=workdir)
        assert [p.step_id for p in view.pending] == ["v"]
        assert ("replan", "replan") in _taken(ow, view.thread_id)


# ---------------------------------------------------------------------------- after wait


def test_a_budget_used_up_during_a_backoff_is_asked_about_after_the_wait(
    fow: Onward, workdir: Path
) -> None:
    view = fow.run(
        "budget", plan=_steps(_flaky("f", LATER)), workdir=workdir, budget=Budget(max_steps=1)
    )
    assert [p.kind for p in view.pending] == ["budget"]
    view = fow.approve(view.thread_id)
    assert view.status == "done"
    assert {("wait", "approve"), ("wait", "note")} <= _taken(fow, view.thread_id)
