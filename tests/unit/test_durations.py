"""Every policy duration is a timedelta: numbers are seconds, plans may write ``90s``, and a
checkpoint from a release whose policies held float seconds still loads as timedeltas."""

from __future__ import annotations

import math
import random
from datetime import timedelta
from pathlib import Path

import pytest

from onward import (
    BreakerPolicy,
    LeasePolicy,
    PlanValidationError,
    RetryPolicy,
    WorkerPolicy,
    load_plan_file,
)
from onward.checkpointing.serde import checkpoint_serde
from onward.model.state import PlanStep

POLICIES = [
    (RetryPolicy, ("initial_delay", "max_delay")),
    (BreakerPolicy, ("cooldown", "probe_timeout")),
    (LeasePolicy, ("ttl", "heartbeat")),
    (WorkerPolicy, ("poll", "max_wait", "error_backoff")),
]


@pytest.mark.parametrize(("cls", "fields"), POLICIES, ids=lambda v: getattr(v, "__name__", ""))
def test_policy_durations_are_timedeltas_by_default(cls: type, fields: tuple[str, ...]) -> None:
    policy = cls()
    for name in fields:
        assert isinstance(getattr(policy, name), timedelta), name


@pytest.mark.parametrize(("cls", "fields"), POLICIES, ids=lambda v: getattr(v, "__name__", ""))
def test_a_number_is_seconds_and_a_bad_duration_names_its_field(
    cls: type, fields: tuple[str, ...]
) -> None:
    name = fields[0]
    extra = {"heartbeat": 0.1} if name == "ttl" else {}
    assert getattr(cls(**{name: 0.25}, **extra), name) == timedelta(milliseconds=250)
    for bad in (-1, math.inf, math.nan, "soon", [1]):
        with pytest.raises(ValueError, match=name):
            cls(**{name: bad})


def test_a_lease_heartbeat_must_be_shorter_than_its_ttl() -> None:
    with pytest.raises(ValueError, match="heartbeat must be shorter than ttl"):
        LeasePolicy(ttl=timedelta(seconds=5), heartbeat=timedelta(seconds=5))


def test_a_breaker_failure_rate_is_a_share() -> None:
    with pytest.raises(ValueError, match="failure_rate"):
        BreakerPolicy(failure_rate=1.5)


def test_backoff_grows_to_its_cap_and_a_long_streak_does_not_overflow() -> None:
    p = RetryPolicy(
        initial_delay=timedelta(seconds=1), backoff=10, max_delay=timedelta(minutes=1), jitter=False
    )
    assert [p.cap(n).total_seconds() for n in (1, 2, 3)] == [1, 10, 60]
    assert p.cap(100_000) == timedelta(minutes=1)
    assert p.delay(2, random.Random(1)) == timedelta(seconds=10)
    jittered = RetryPolicy(initial_delay=timedelta(seconds=4))
    assert timedelta(0) <= jittered.delay(1, random.Random(1)) <= timedelta(seconds=4)


@pytest.mark.parametrize(
    ("written", "seconds"), [(2, 2), (0.5, 0.5), ("30s", 30), ("5m", 300), ("PT1M", 60)]
)
def test_a_plan_writes_retry_delays_as_seconds_or_with_a_unit(
    written: object, seconds: float
) -> None:
    step = PlanStep(id="a", tool="t", retry={"initial_delay": written})  # type: ignore[arg-type]
    assert step.retry is not None
    assert step.retry.initial_delay == timedelta(seconds=seconds)


@pytest.mark.parametrize("written", ["-5m", "soon", "inf"])
def test_a_plan_with_a_bad_retry_delay_is_refused_with_its_field(
    tmp_path: Path, written: str
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: g\nsteps:\n  - id: a\n    tool: write_file\n"
        f"    args: {{path: x.txt, content: hi}}\n    retry: {{max_delay: '{written}'}}\n"
    )
    with pytest.raises(PlanValidationError, match="max_delay"):
        load_plan_file(plan)


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic sees the old floats as it writes
def test_a_checkpoint_whose_retry_policy_held_float_seconds_loads_as_timedeltas() -> None:
    # What a release before timedelta policies wrote: the same class, its delays as floats.
    old = RetryPolicy()
    object.__setattr__(old, "initial_delay", 2.5)
    object.__setattr__(old, "max_delay", 40.0)
    serde = checkpoint_serde(None)
    step = PlanStep.model_construct(id="a", tool="t", retry=old)
    loaded = serde.loads_typed(serde.dumps_typed({"step": step}))["step"]
    assert loaded.retry.initial_delay == timedelta(seconds=2.5)
    assert loaded.retry.max_delay == timedelta(seconds=40)
    assert loaded.retry.cap(10) == timedelta(seconds=40)


def test_a_tool_timeout_is_a_timedelta_and_a_bad_one_is_refused() -> None:
    from onward import Registry, tool

    registry = Registry()

    @tool(timeout=0.5, registry=registry)
    def quick() -> dict[str, int]:
        return {}

    @tool(timeout=timedelta(minutes=2), registry=registry)
    def slow() -> dict[str, int]:
        return {}

    assert quick.timeout == timedelta(milliseconds=500)
    assert slow.timeout == timedelta(minutes=2)
    with pytest.raises(ValueError, match="timeout"):

        @tool(timeout=-1, registry=registry)
        def never() -> dict[str, int]:
            return {}
