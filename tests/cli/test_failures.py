"""Failure classes and their routes, with fault-injecting tools (tests/support/failure_tools.py)
whose calls are counted in the work directory: transient → backoff retry, deterministic
→ fallback or a person, validation → replan, non-convergent → a person; the breaker,
budgets, the loop guard and hung tools."""

from __future__ import annotations

import itertools
import json
import random
import signal
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, Plan, PlanStep
from onward.model.state import Budget, FailureClass
from onward.policies.retry import RetryPolicy
from onward.testing import FakeTime
from onward.verification.checks import Equals
from onward.verification.failures import classify, signature
from tests.support import zygote
from tests.support.common import cli_env, start_run
from tests.support.failure_tools import calls
from tests.support.httpfake import FakeService
from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "failure_tools.py")


@pytest.fixture
def fo(db_url: str, workdir: Path) -> Iterator[Onward]:
    with Onward(db_url, tool_modules=[TOOLS]) as client:
        yield client


def _run(ow: Onward, *steps: PlanStep, **start: Any) -> Any:
    return ow.run("failures", plan=Plan(steps=list(steps)), **start)


def _classes(view: Any, step: str) -> list[str]:
    [s] = [s for s in view.steps if s.id == step]
    return [f.failure_class for f in s.failures]


# ----------------------------------------------------------------------------- classifier


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (TimeoutError("slow"), "transient"),
        (ConnectionResetError("reset"), "transient"),
        (ValueError("bad"), "deterministic"),
        (TypeError("bad"), "deterministic"),
        (KeyError("k"), "deterministic"),
        (FileNotFoundError("f"), "deterministic"),
        (PermissionError("p"), "deterministic"),
        (AttributeError("a bug"), "deterministic"),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, BaseException) else str(x),
)
def test_default_classes(exc: BaseException, cls: str) -> None:
    assert classify(exc, tool="t").failure_class == cls


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (429, "transient"),
        (503, "transient"),
        (500, "transient"),
        (404, "deterministic"),
        (400, "deterministic"),
    ],
)
def test_http_status_classes(status: int, cls: str) -> None:
    import urllib.error

    err = urllib.error.HTTPError("http://x", status, "x", None, None)  # type: ignore[arg-type]
    assert classify(err, tool="t").failure_class == cls


def test_retry_on_makes_a_tool_specific_error_transient() -> None:
    class Busy(Exception):
        pass

    assert classify(Busy(), tool="t").failure_class == "deterministic"
    assert classify(Busy(), tool="t", retry_on=(Busy,)).failure_class == "transient"


def test_signature_ignores_numbers_and_ids() -> None:
    a = signature(FailureClass.TRANSIENT, "t", "call 3 failed after 0.52s (key 9f8e7d6c5b4a)")
    b = signature(FailureClass.TRANSIENT, "t", "call 4 failed after 1.07s (key 0a1b2c3d4e5f)")
    assert a == b
    assert a != signature(FailureClass.TRANSIENT, "t", "call 4 refused")


# ----------------------------------------------------------------------------- transient


def test_a_flaky_tool_succeeds_on_its_third_attempt(fo: Onward, workdir: Path) -> None:
    view = _run(fo, PlanStep(id="f", tool="flaky", args={"times": 2}))
    assert view.status == "done"
    [step] = view.steps
    assert step.attempts == 3
    assert _classes(view, "f") == ["transient", "transient"]
    assert len(calls(workdir, "f")) == 3


def test_backoff_delays_lie_within_the_policy_bounds(db_url: str, workdir: Path) -> None:
    fake = FakeTime()
    policy = RetryPolicy(
        max_attempts=6, initial_delay=1.0, backoff=2.0, max_delay=3.0, same_failure_limit=10
    )
    with Onward(
        db_url, tool_modules=[TOOLS], clock=fake.clock, sleep=fake.sleep, rng=random.Random(7)
    ) as ow:
        view = _run(ow, PlanStep(id="f", tool="flaky", args={"times": 4}, retry=policy))
        assert view.status == "done"
        scheduled = ow.store.events.list(view.thread_id, ["retry_scheduled"])
    delays = [e.detail["delay"] for e in scheduled]
    caps = [min(3.0, 1.0 * 2.0 ** (n - 1)) for n in range(1, 5)]
    assert [e.detail["cap"] for e in scheduled] == caps
    assert all(0.0 <= d <= cap for d, cap in zip(delays, caps, strict=True))
    assert len(set(delays)) == 4  # jittered, not fixed
    assert sum(fake.slept) == pytest.approx(sum(delays))  # waited exactly the backoff


def test_attempt_count_survives_a_sigkill_between_attempts(workdir: Path, db_url: str) -> None:
    (workdir / "plan.yaml").write_text(
        json.dumps(
            {
                "steps": [
                    {
                        "id": "f",
                        "tool": "flaky",
                        "args": {"times": 2},
                        "retry": {"max_attempts": 5, "initial_delay": 3.0, "jitter": False},
                    }
                ]
            }
        )
    )
    proc = start_run(
        workdir, db_url, "t-flaky", TOOLS, ONWARD_LEASE_TTL="0.5", ONWARD_HEARTBEAT="0.1"
    )
    try:
        deadline = time.monotonic() + 60
        while len(calls(workdir, "f")) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # attempt 1 failed and was saved; the driver sleeps out its backoff
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(calls(workdir, "f")) == 1
    time.sleep(0.6)
    resumed = zygote.run(
        ["resume", "t-flaky", "--takeover", "--tools", TOOLS, "--db", db_url, "--json"],
        cwd=workdir,
        timeout=120,
        env=cli_env(),
    )
    assert resumed.returncode == 0, resumed.stderr
    [step] = json.loads(resumed.stdout)["steps"]
    assert step["attempts"] == 3  # 1 before the kill + 2 after: the count was not reset
    assert [c["attempt"] for c in calls(workdir, "f")] == [1, 2, 3]


def test_a_long_backoff_suspends_the_run_until_its_time(db_url: str, workdir: Path) -> None:
    fake = FakeTime()
    policy = RetryPolicy(max_attempts=3, initial_delay=600.0, max_delay=600.0, jitter=False)
    with Onward(db_url, tool_modules=[TOOLS], clock=fake.clock, sleep=fake.sleep) as ow:
        view = _run(ow, PlanStep(id="f", tool="flaky", args={"times": 1}, retry=policy))
        assert view.status == "suspended"
        assert view.resume_at == fake.now + timedelta(seconds=600)
        assert fake.slept == []  # over ONWARD_MAX_WAIT: not slept in-process
        early = list(ow.stream(view.thread_id, wait=False))
        assert early == []
        assert ow.get(view.thread_id).status == "suspended"
        done = ow.resume(view.thread_id)  # waits out the rest, then goes on
        assert done.status == "done"
        assert fake.slept == [600.0]


# ----------------------------------------------------------------------------- deterministic


def test_a_deterministic_failure_is_not_retried_and_waits_for_a_person(
    fo: Onward, workdir: Path
) -> None:
    view = _run(fo, PlanStep(id="d", tool="always_value_error", args={"x": 1}))
    assert view.status == "waiting_for_human"
    assert len(calls(workdir, "d")) == 1  # exactly one call: no blind retry
    [question] = view.pending
    assert question.kind == "escalation"
    assert "deterministic" in (question.reason or "")
    assert "cannot handle x=1" in (question.reason or "")
    assert _classes(view, "d") == ["deterministic"]
    skipped = fo.decide(view.thread_id, {"type": "skip"}, step="d")
    assert skipped.status == "done"


def test_a_declared_fallback_tool_is_used(fo: Onward, workdir: Path) -> None:
    view = _run(fo, PlanStep(id="b", tool="bad_parse", args={"text": "hi"}, output="parsed"))
    assert view.status == "done"
    assert [c["tool"] for c in calls(workdir, "b")] == ["bad_parse", "good_parse"]
    assert view.plan_version == 2
    [decision] = view.decisions
    assert (decision.action, decision.by) == ("replan", "onward-replanner")
    assert "fallback bad_parse → good_parse" in decision.reason
    assert view.artifact_value(fo, "parsed") == {"parsed": "HI"}


def test_a_person_can_retry_a_failed_step_with_a_fresh_round_of_attempts(
    fo: Onward, workdir: Path
) -> None:
    view = _run(fo, PlanStep(id="a", tool="always_503"))
    assert view.status == "waiting_for_human"
    assert len(calls(workdir, "a")) == 3
    again = fo.decide(view.thread_id, {"type": "retry"}, step="a")
    assert again.status == "waiting_for_human"
    assert len(calls(workdir, "a")) == 6  # three more, as the policy allows, not one


# ----------------------------------------------------------------------------- validation


def test_wrong_output_is_replanned_with_the_findings_to_a_fallback(
    fo: Onward, workdir: Path
) -> None:
    check = Equals(field="value", value=3)
    view = _run(fo, PlanStep(id="w", tool="wrong_output", args={"n": 3}, checks=[check]))
    assert view.status == "done"
    assert [c["tool"] for c in calls(workdir, "w")] == ["wrong_output", "right_output"]
    [failure] = view.steps[0].failures
    assert failure.failure_class == "validation"
    assert "value is -3, expected 3" in failure.message
    assert "value is -3, expected 3" in view.decisions[0].reason  # replanned with findings


def test_validation_escalates_after_max_replans(fo: Onward, workdir: Path) -> None:
    check = Equals(field="value", value=3)
    step = PlanStep(
        id="s",
        tool="stubborn",
        args={"n": 3},
        checks=[check],
        retry=RetryPolicy(same_failure_limit=10),
    )
    view = _run(fo, step, budget=Budget(max_replans=2))
    assert view.status == "waiting_for_human"
    assert len(calls(workdir, "s")) == 3  # the first try and two replans, no more
    assert _classes(view, "s") == ["validation", "validation", "non_convergent"]
    assert [d.action for d in view.decisions] == ["replan", "replan"]
    assert "after 2 replans" in (view.pending[0].reason or "")


# ----------------------------------------------------------------------------- non-convergent


def test_an_always_failing_tool_stops_within_its_attempts(fo: Onward, workdir: Path) -> None:
    view = _run(fo, PlanStep(id="a", tool="always_503"))
    assert view.status == "waiting_for_human"
    assert len(calls(workdir, "a")) == 3  # max_attempts of its policy, never more
    assert _classes(view, "a")[-1] == "non_convergent"
    assert view.pending[0].allowed == [
        "approve",
        "edit",
        "reject",
        "retry",
        "skip",
        "done",
        "abort",
    ]


def test_every_failure_class_shows_in_status_json(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    steps = [
        {"id": "t", "tool": "flaky", "args": {"times": 1}},
        {"id": "d", "tool": "bad_parse", "args": {"text": "x"}},
        {
            "id": "v",
            "tool": "wrong_output",
            "args": {"n": 2},
            "checks": [{"check": "equals", "field": "value", "value": 2}],
        },
        {"id": "n", "tool": "always_503"},
    ]
    (workdir / "plan.yaml").write_text(json.dumps({"steps": steps, "max_concurrency": 1}))
    ran = run_cli("run", "--plan", "plan.yaml", "--tools", TOOLS, "--json")
    assert ran.code == 3, ran.stderr
    shown = run_cli("status", ran.json()["thread_id"], "--json").json()
    classes = {s["id"]: [f["failure_class"] for f in s["failures"]] for s in shown["steps"]}
    assert classes == {
        "t": ["transient"],
        "d": ["deterministic"],
        "v": ["validation"],
        "n": ["transient", "transient", "non_convergent"],
    }
    evidence = {s["id"]: s["failures"][-1] for s in shown["steps"]}
    assert evidence["d"]["hint"] == "use good_parse"
    assert evidence["d"]["error_type"] == "DeterministicToolError"
    assert "expected 2" in evidence["v"]["message"]
    assert all(f["attempt"] and f["at"] and f["signature"] for f in evidence.values())


# ----------------------------------------------------------------------------- hang


def test_a_hung_call_is_abandoned_and_retried(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "plan.yaml").write_text(
        json.dumps({"steps": [{"id": "h", "tool": "hang", "args": {"hang_calls": 1}}]})
    )
    started = time.monotonic()
    ran = run_cli("run", "--plan", "plan.yaml", "--tools", TOOLS, "--json", timeout=60)
    assert ran.code == 0, ran.stderr  # and the process exited though a call still hangs
    assert time.monotonic() - started < 60
    [step] = ran.json()["steps"]
    assert step["attempts"] == 2
    assert step["failures"][0]["error_type"] == "TimeoutError"
    assert step["failures"][0]["failure_class"] == "transient"


def test_a_call_that_always_hangs_escalates_and_the_process_exits(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "plan.yaml").write_text(
        json.dumps({"steps": [{"id": "h", "tool": "hang", "args": {"hang_calls": 99}}]})
    )
    ran = run_cli("run", "--plan", "plan.yaml", "--tools", TOOLS, "--json", timeout=60)
    assert ran.code == 3, ran.stderr
    assert len(calls(workdir, "h")) == 3
    assert ran.json()["steps"][0]["failure_class"] == "non_convergent"


# ----------------------------------------------------------------------------- budgets


def test_step_budget_warns_at_50_and_80_percent_then_suspends_and_can_be_raised(
    fo: Onward,
) -> None:
    steps = [
        PlanStep(id=f"s{i}", tool="slow", depends_on=[f"s{i - 1}"] if i else []) for i in range(8)
    ]
    view = _run(fo, *steps, budget=Budget(max_steps=5))
    assert view.status == "suspended"
    assert sum(s.status == "done" for s in view.steps) == 5
    [question] = view.pending
    assert (question.kind, question.tool) == ("budget", "raise_budget")
    assert "steps 5 of 5" in (question.reason or "")
    warnings = [
        e.detail["marker"] for e in fo.store.events.list(view.thread_id, ["budget_warning"])
    ]
    assert warnings == ["steps:50:5", "steps:80:5"]
    texts = [m.text for m in fo.state(view.thread_id).messages if "Budget warning" in m.text]
    assert len(texts) == 2
    done = fo.approve(view.thread_id)  # approve = double what ran out
    assert done.status == "done"
    assert fo.state(view.thread_id).budget.max_steps == 11


def test_time_budget_suspends_and_an_edited_limit_lets_it_finish(fo: Onward) -> None:
    steps = [
        PlanStep(
            id=f"s{i}", tool="slow", args={"seconds": 0.3}, depends_on=[f"s{i - 1}"] if i else []
        )
        for i in range(6)
    ]
    view = _run(fo, *steps, budget=Budget(max_run_time=timedelta(seconds=1)))
    assert view.status == "suspended"
    assert view.pending[0].kind == "budget"
    markers = [e.detail["marker"] for e in fo.store.events.list(view.thread_id, ["budget_warning"])]
    assert [m.split(":")[:2] for m in markers] == [["run_time", "50"], ["run_time", "80"]]
    done = fo.approve(view.thread_id, args={"max_run_time": 3600})
    assert done.status == "done"


def test_a_step_that_jumps_past_every_threshold_still_gives_both_warnings(fo: Onward) -> None:
    """One step takes the run from 0 % to past 100 % of its time: the 50 and 80 %
    warnings are given with the budget question, not skipped."""
    steps = [
        PlanStep(id="long", tool="slow", args={"seconds": 1.2}),
        PlanStep(id="next", tool="slow", depends_on=["long"]),
    ]
    view = _run(fo, *steps, budget=Budget(max_run_time=timedelta(seconds=1)))
    assert view.status == "suspended"
    markers = [e.detail["marker"] for e in fo.store.events.list(view.thread_id, ["budget_warning"])]
    assert [m.split(":")[:2] for m in markers] == [["run_time", "50"], ["run_time", "80"]]
    assert fo.approve(view.thread_id, args={"max_run_time": 3600}).status == "done"


def test_rejecting_a_budget_question_aborts_the_run(fo: Onward) -> None:
    steps = [PlanStep(id=f"s{i}", tool="slow") for i in range(3)]
    view = _run(fo, *steps, budget=Budget(max_steps=1), max_concurrency=1)
    assert view.status == "suspended"
    assert fo.reject(view.thread_id, reason="too costly").status == "cancelled"


# ----------------------------------------------------------------------------- loop guard


def test_the_superstep_limit_comes_from_the_plan() -> None:
    from onward.api import MIN_SUPERSTEPS, superstep_limit
    from onward.model.state import RunState
    from onward.tools.registry import default_registry

    small = RunState(plan=Plan(steps=[PlanStep(id="a", tool="noop")]))
    assert superstep_limit(small, default_registry) == MIN_SUPERSTEPS
    big = RunState(plan=Plan(steps=[PlanStep(id=f"s{i}", tool="noop") for i in range(5000)]))
    assert MIN_SUPERSTEPS < superstep_limit(big, default_registry) < 1_000_000


def test_max_concurrent_limits_parallel_calls_to_a_service(fo: Onward, workdir: Path) -> None:
    steps = [PlanStep(id=f"x{i}", tool="exclusive", args={"seconds": 0.15}) for i in range(3)]
    view = _run(fo, *steps, max_concurrency=3)
    assert view.status == "done"
    spans = sorted(
        (json.loads(x)["start"], json.loads(x)["end"])
        for x in (workdir / "spans.jsonl").read_text().splitlines()
    )
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))


def test_an_unsafe_post_refused_with_503_is_retried_without_a_reconcile(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onward.policies.run import RunPolicy

    with FakeService() as service, Onward(db_url) as ow:
        monkeypatch.setenv("ONWARD_HTTP_ALLOW", f"127.0.0.1:{service.port}")
        service.fail_next(1, 503)
        step = PlanStep(
            id="p",
            tool="http_post",
            args={"url": service.url, "payload": {"a": 1}},
            retry=RetryPolicy(initial_delay=0.01),
        )
        view = ow.run(
            "post", plan=Plan(steps=[step]), policy=RunPolicy(auto_approve=frozenset({"http_post"}))
        )
        assert view.status == "done"
        assert view.steps[0].attempts == 2
        [key] = service.counts
        assert service.counts[key] == 2  # refused once, then accepted: same key
        assert service.received == {key}


def test_a_person_can_settle_a_failed_step_as_done_by_hand(fo: Onward, workdir: Path) -> None:
    view = _run(fo, PlanStep(id="d", tool="always_value_error", args={"x": 1}, output="res"))
    done = fo.decide(view.thread_id, {"type": "done", "result": {"value": 42}}, step="d")
    assert done.status == "done"
    assert done.artifact_value(fo, "res") == {"value": 42}


def test_max_replans_zero_means_no_replan(fo: Onward, workdir: Path) -> None:
    check = Equals(field="value", value=3)
    view = _run(
        fo,
        PlanStep(id="w", tool="wrong_output", args={"n": 3}, checks=[check]),
        budget=Budget(max_replans=0),
    )
    assert view.status == "waiting_for_human"
    assert [c["tool"] for c in calls(workdir, "w")] == ["wrong_output"]  # no fallback tried
    assert "replanning is off" in (view.pending[0].reason or "")


def test_a_run_may_end_exactly_on_its_step_budget(fo: Onward) -> None:
    steps = [PlanStep(id=f"s{i}", tool="slow") for i in range(2)]
    assert _run(fo, *steps, budget=Budget(max_steps=2)).status == "done"


def test_a_probe_failing_for_a_non_service_reason_still_settles_the_breaker(
    db_url: str, workdir: Path
) -> None:
    from onward.store.breakers import BreakerPolicy, BreakerState

    with Onward(db_url, tool_modules=[TOOLS]) as ow:
        policy = BreakerPolicy(consecutive=3, min_calls=10, failure_rate=0.3, cooldown=1.0)
        for _ in range(3):
            ow.store.breakers.record("svc", False, policy, "t")
        past = ow.store.breakers.get("svc")
        assert past is not None
        ow.store.breakers.clock = lambda: past.opened_at + timedelta(seconds=2)  # type: ignore[operator]
        # The probe fails before any request (a bad URL): not the service's fault.
        view = _run(ow, PlanStep(id="p", tool="ping", args={"url": "not-a-url", "n": 1}))
        assert view.status == "waiting_for_human"
        row = ow.store.breakers.get("svc")
        assert row is not None
        assert row.state is BreakerState.CLOSED
