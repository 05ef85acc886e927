"""The scheduler's parts, called on a ``RunState`` without building or running a graph.

Each test builds a state by hand and asks one method of :class:`Scheduler` what it makes of
it: the scan of the steps, the failure routes, the ready wave, the questions, the routers.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END
from langgraph.types import Send

from onward.graph.routes import Node, label
from onward.graph.schedule import Scheduler
from onward.model.state import (
    PLAN_TARGET,
    AskBatch,
    FailureClass,
    Plan,
    PlanStep,
    RunState,
    RunStatus,
    StepFailure,
    StepRecord,
    StepStatus,
    Waiting,
    WaitKind,
)
from onward.nodes.deps import NodeDeps
from onward.policies.run import RunPolicy
from onward.store.artifacts import ArtifactStore
from onward.tools.registry import default_registry

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def scheduler(tmp_path: Path) -> Scheduler:
    deps = NodeDeps(registry=default_registry, artifacts=ArtifactStore(tmp_path), clock=lambda: NOW)
    return Scheduler(deps)


def _step(sid: str, *deps: str, **more: Any) -> PlanStep:
    return PlanStep(id=sid, tool="noop", depends_on=list(deps), **more)


def _record(sid: str, status: StepStatus, **more: Any) -> StepRecord:
    return StepRecord(id=sid, status=status, attempts=1, **more)


def _failed(sid: str, cls: FailureClass) -> StepRecord:
    failure = StepFailure(failure_class=cls, message="boom")
    return _record(sid, StepStatus.FAILED, failure=failure)


def _state(steps: list[PlanStep], records: Sequence[StepRecord] = (), **more: Any) -> RunState:
    return RunState(
        plan=Plan(steps=steps),
        steps={r.id: r for r in records},
        status=RunStatus.RUNNING,
        **more,
    )


def test_the_scan_sorts_steps_into_ready_produced_failed_deferred_and_due(
    scheduler: Scheduler,
) -> None:
    later = NOW + timedelta(minutes=5)
    state = _state(
        [
            _step("ok"),
            _step("made"),
            _step("bad"),
            _step("backoff"),
            _step("after_backoff", "backoff"),
            PlanStep(id="m", milestone="later work", depends_on=["ok"]),
            _step("free"),
        ],
        [
            _record("ok", StepStatus.DONE),
            _record("made", StepStatus.PRODUCED),
            _failed("bad", FailureClass.TRANSIENT),
            _record("backoff", StepStatus.PENDING, not_before=later),
        ],
    )
    scan = scheduler.scan(state, NOW)
    assert scan.produced
    assert [sid for sid, _ in scan.failed] == ["bad"]
    assert scan.deferred == {"backoff"}
    assert scan.due, "the milestone's dependency is done"
    assert [s.id for s in scan.ready] == ["free"], "a step waiting on a deferred one waits"


def test_produced_output_is_verified_before_failures_are_routed(scheduler: Scheduler) -> None:
    state = _state(
        [_step("a"), _step("b")],
        [_record("a", StepStatus.PRODUCED), _failed("b", FailureClass.TRANSIENT)],
    )
    assert scheduler(state) == Node.VERIFY.value


@pytest.mark.parametrize(
    ("cls", "escalate", "route"),
    [
        (FailureClass.TRANSIENT, True, Node.RETRY.value),
        (FailureClass.DETERMINISTIC, False, Node.FINALIZE.value),
        (FailureClass.NON_CONVERGENT, False, Node.FINALIZE.value),
    ],
)
def test_a_failure_takes_the_first_open_route_of_its_class(
    scheduler: Scheduler, cls: FailureClass, escalate: bool, route: str
) -> None:
    policy = RunPolicy(escalate_failures=escalate)
    state = _state([_step("a")], [_failed("a", cls)], policy=policy)
    scan = scheduler.scan(state, NOW)
    assert scheduler.failure_route(state, scan.failed) == route


def test_failures_for_people_go_out_as_one_interrupt(scheduler: Scheduler) -> None:
    records = [_failed(s, FailureClass.NON_CONVERGENT) for s in ("a", "b")]
    state = _state([_step("a"), _step("b")], records)
    route = scheduler.failure_route(state, scheduler.scan(state, NOW).failed)
    assert isinstance(route, list)
    assert len(route) == 1
    (send,) = route
    assert send.node == Node.ESCALATE.value
    assert isinstance(send.arg, AskBatch)
    assert [q.step.id for q in send.arg.questions if q.step] == ["a", "b"]
    assert all(q.kind is WaitKind.ESCALATION for q in send.arg.questions)


def test_without_a_model_or_rule_a_deterministic_failure_asks_a_person(
    scheduler: Scheduler,
) -> None:
    state = _state([_step("a")], [_failed("a", FailureClass.DETERMINISTIC)])
    step = state.plan.step("a")
    assert not scheduler.is_open(state, step, Node.REPLAN)
    assert scheduler.is_open(state, step, Node.ESCALATE)
    route = scheduler.failure_route(state, scheduler.scan(state, NOW).failed)
    assert isinstance(route, list)
    assert route[0].node == Node.ESCALATE.value


def test_a_ready_wave_is_cut_at_max_concurrency_and_told_its_size(scheduler: Scheduler) -> None:
    state = _state([_step(f"s{i}") for i in range(5)], max_concurrency=3)
    route = scheduler(state)
    assert isinstance(route, list)
    assert [s.arg.step.id for s in route] == ["s0", "s1", "s2"]
    assert all(s.node == Node.EXECUTE.value and s.arg.wave == 3 for s in route)


def test_approvals_of_a_wave_are_one_question_sent_before_its_executes(
    scheduler: Scheduler,
) -> None:
    policy = RunPolicy(approve_tools=frozenset({"noop"}))
    state = _state([_step("a"), _step("b")], policy=policy)
    sends, deferred = scheduler.ready_tasks(state, scheduler.scan(state, NOW))
    assert deferred == set()
    assert [s.node for s in sends] == [Node.APPROVE.value]
    assert isinstance(sends[0].arg, AskBatch)
    assert {q.kind for q in sends[0].arg.questions} == {WaitKind.APPROVAL}


def test_only_deferred_steps_wait_and_nothing_left_finalizes(scheduler: Scheduler) -> None:
    later = NOW + timedelta(seconds=30)
    waiting = _state([_step("a")], [_record("a", StepStatus.PENDING, not_before=later)])
    assert scheduler(waiting) == Node.WAIT.value
    done = _state([_step("a")], [_record("a", StepStatus.DONE)])
    assert scheduler(done) == Node.FINALIZE.value


def test_a_suspended_run_ends_and_a_finished_one_finalizes(scheduler: Scheduler) -> None:
    state = _state([_step("a")])
    assert scheduler(state.model_copy(update={"status": RunStatus.SUSPENDED})) == END
    assert scheduler(state.model_copy(update={"status": RunStatus.DONE})) == Node.FINALIZE.value


def test_the_plan_question_is_asked_until_the_plan_as_it_is_is_approved(
    scheduler: Scheduler,
) -> None:
    assert scheduler.plan_question(_state([_step("a")])) is None
    state = _state([_step("a")], policy=RunPolicy(approve_plan=True))
    question = scheduler.plan_question(state)
    assert question is not None
    assert question.kind is WaitKind.PLAN
    assert question.asked_at == NOW
    assert scheduler(state) == [Send(Node.APPROVE.value, question)]


def test_an_unknown_outcome_is_asked_before_a_review(scheduler: Scheduler) -> None:
    waits = {
        "a": Waiting(step_id="a", reason="did it run?"),
        PLAN_TARGET: Waiting(step_id=PLAN_TARGET, reason="judge down", judge=True),
    }
    state = _state([_step("a")], [_record("a", StepStatus.RUNNING)], waiting=waits)
    (send,) = scheduler.waiting_route(state)
    assert send.node == Node.ESCALATE.value
    assert send.arg.kind is WaitKind.ESCALATION
    state = state.model_copy(update={"waiting": {PLAN_TARGET: waits[PLAN_TARGET]}})
    (send,) = scheduler.waiting_route(state)
    assert send.node == Node.APPROVE.value
    assert send.arg.kind is WaitKind.JUDGE


def test_routers_join_a_wave_at_the_gate_and_end_a_finished_run(scheduler: Scheduler) -> None:
    state = _state([_step("a")], [_record("a", StepStatus.DONE)], wave=2)
    assert scheduler.router(Node.APPROVE)(state) == label(Node.APPROVE, Node.GATE)
    lone = state.model_copy(update={"wave": 1})
    assert scheduler.router(Node.APPROVE)(lone) == label(Node.APPROVE, Node.FINALIZE)
    finished = state.model_copy(update={"status": RunStatus.DONE})
    assert scheduler.router(Node.FINALIZE)(finished) == label(Node.FINALIZE, END)
