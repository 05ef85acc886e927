"""Circuit breakers: the state machine on a fake clock, and 20 steps against a loopback
service that answers 503 until it heals."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from onward import Onward, Plan, PlanStep
from onward.store.breakers import BreakerPolicy, Breakers, BreakerState
from onward.store.database import Store
from tests.support.httpfake import FakeService
from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "failure_tools.py")
POLICY = BreakerPolicy(consecutive=3, min_calls=10, failure_rate=0.3, cooldown=30.0)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def breakers(db_url: str) -> Iterator[tuple[Breakers, Clock]]:
    clock = Clock()
    with Store(db_url) as store:
        store.breakers.clock = clock
        yield store.breakers, clock


def _state(b: Breakers) -> BreakerState | None:
    row = b.get("svc")
    return row.state if row else None


def test_consecutive_failures_open_the_breaker(breakers: tuple[Breakers, Clock]) -> None:
    b, _ = breakers
    for _ in range(2):
        b.record("svc", False, POLICY, "t")
    assert _state(b) is BreakerState.CLOSED
    b.record("svc", False, POLICY, "t")
    assert _state(b) is BreakerState.OPEN


def test_the_failure_rate_over_the_window_opens_the_breaker(
    breakers: tuple[Breakers, Clock],
) -> None:
    b, _ = breakers
    outcomes = [True, True, False, True, False, True, True, False, True]  # 3 of 9, never 3 in a row
    for ok in outcomes:
        b.record("svc", ok, POLICY, "t")
    assert _state(b) is BreakerState.CLOSED  # under min_calls
    b.record("svc", False, POLICY, "t")  # 4 of 10 = 40 % ≥ 30 %
    assert _state(b) is BreakerState.OPEN


def test_open_defers_then_one_half_open_probe_closes_it(
    breakers: tuple[Breakers, Clock], db_url: str
) -> None:
    b, clock = breakers
    for _ in range(3):
        b.record("svc", False, POLICY, "t")
    assert b.acquire("svc", POLICY, "t") == clock.now + timedelta(seconds=30)
    clock.now += timedelta(seconds=30)
    assert b.acquire("svc", POLICY, "t") is None  # the probe
    assert _state(b) is BreakerState.HALF_OPEN
    assert b.acquire("svc", POLICY, "t") is not None  # one probe at a time
    b.record("svc", True, POLICY, "t")
    assert _state(b) is BreakerState.CLOSED
    assert b.acquire("svc", POLICY, "t") is None
    with Store(db_url) as store:
        kinds = [e.kind for e in store.events.list("t")]
    assert kinds == ["breaker_opened", "breaker_half_open", "breaker_closed"]


def test_a_failed_probe_opens_it_again(breakers: tuple[Breakers, Clock]) -> None:
    b, clock = breakers
    for _ in range(3):
        b.record("svc", False, POLICY, "t")
    clock.now += timedelta(seconds=31)
    assert b.acquire("svc", POLICY, "t") is None
    b.record("svc", False, POLICY, "t")
    assert _state(b) is BreakerState.OPEN
    assert b.acquire("svc", POLICY, "t") == clock.now + timedelta(seconds=30)


def test_breaker_bounds_requests_and_other_steps_go_on(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 steps against a service answering 503: the breaker opens after 3 failures, the
    server sees a bounded number of requests while it is down, steps on other services
    finish meanwhile, a second run started then sees the breaker open, and once the
    service heals the half-open probe closes it and both runs complete."""
    cooldown = 1.0  # failure_tools.ping's breaker
    with FakeService() as service:
        service.fail_next(10**6, 503)
        pings = [
            PlanStep(id=f"p{i}", tool="ping", args={"url": service.url, "n": i}) for i in range(20)
        ]
        others = [PlanStep(id=f"o{i}", tool="slow", args={"seconds": 0.1}) for i in range(4)]
        plan = Plan(steps=[*pings, *others])
        result: dict[str, object] = {}

        def drive() -> None:
            with Onward(db_url, tool_modules=[TOOLS]) as ow:
                result["view"] = ow.run("ping", plan=plan, max_concurrency=4)

        runner = threading.Thread(target=drive)
        runner.start()
        with Store(db_url) as store:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                row = store.breakers.get("svc")
                if row and row.state is BreakerState.OPEN:
                    break
                time.sleep(0.01)
            else:
                pytest.fail("the breaker never opened")
            opened = time.monotonic()
            failed_when_opened = len(service.posts)
            # A second run started while the breaker is open makes no request: it waits.
            # Its clock stays at the opening: on a slow host the cooldown (1 s) could end
            # before its step asks, and it would be the half-open probe instead.
            assert row is not None
            assert row.opened_at is not None
            at_opening = row.opened_at
            monkeypatch.setenv("ONWARD_MAX_WAIT", "0")
            with Onward(db_url, tool_modules=[TOOLS], clock=lambda: at_opening) as second:
                late = second.run(
                    "late",
                    plan=Plan(
                        steps=[PlanStep(id="q", tool="ping", args={"url": service.url, "n": 99})]
                    ),
                )
                assert late.status == "suspended"
                assert late.resume_at is not None
                assert late.steps[0].attempts == 0  # deferred, not attempted
            monkeypatch.delenv("ONWARD_MAX_WAIT")
            time.sleep(2.5)  # down a while longer: only half-open probes get through
            down_for = time.monotonic() - opened
            failed = len(service.posts)
            service.fail_next(0)  # heal
        runner.join(timeout=120)
        assert not runner.is_alive()
        view = result["view"]
        assert view.status == "done"  # type: ignore[attr-defined]
        # Bounded: up to 3 failures to open it (+3 already in flight with concurrency 4),
        # then one probe per cooldown while it was down.
        assert failed_when_opened <= 3 + 3
        assert failed - failed_when_opened <= math.ceil(down_for / cooldown) + 1
        assert len(service.received) == 20  # every ping arrived exactly once
        with Store(db_url) as store:
            events = [e for e in store.events.list(view.thread_id)]  # type: ignore[attr-defined]
            assert store.breakers.get("svc").state is BreakerState.CLOSED  # type: ignore[union-attr]
        kinds = [e.kind for e in events if e.kind.startswith("breaker_")]
        assert kinds[0] == "breaker_opened"
        assert kinds[-1] == "breaker_closed"
        opened_at = next(e.at for e in events if e.kind == "breaker_opened")
        closed_at = [e.at for e in events if e.kind == "breaker_closed"][-1]
        with Onward(db_url, tool_modules=[TOOLS]) as ow:
            state = ow.state(view.thread_id)  # type: ignore[attr-defined]
            late_view = ow.resume(late.thread_id)
        ended = [state.record(f"o{i}").ended_at for i in range(4)]
        assert any(e is not None and opened_at < e < closed_at for e in ended)  # went on
        assert late_view.status == "done"
