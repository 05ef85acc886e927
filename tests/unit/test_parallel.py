"""Parallel steps: independent steps overlap in time, max_concurrency bounds how many,
and a dependent step waits for all of its dependencies.

Every assertion is on timestamps the run recorded, never on how long the test took:
the ``started_at`` / ``ended_at`` the built-in ``wait`` tool puts in each step's output
artifact, and the execution journal (``ONWARD_EXECUTION_LOG``), which has one line per
tool call start and end, including executions whose output a later write replaced.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from onward import Onward, Plan, PlanStep, RunStatus, RunView

Span = tuple[datetime, datetime]


def wait_step(step_id: str, seconds: float, depends_on: tuple[str, ...] = ()) -> PlanStep:
    return PlanStep(
        id=step_id,
        tool="wait",
        args={"seconds": seconds, "label": step_id},
        depends_on=list(depends_on),
    )


def independent_waits(n: int, seconds: float = 0.3) -> Plan:
    return Plan(steps=[wait_step(f"w{i}", seconds) for i in range(n)])


def recorded_spans(ow: Onward, view: RunView) -> dict[str, Span]:
    """Step id → (started_at, ended_at) from the step's output artifact."""
    spans = {}
    for step in view.steps:
        assert step.output is not None, f"step {step.id} has no output artifact"
        out = ow.store.artifacts.get(step.output)
        spans[step.id] = (
            datetime.fromisoformat(out["started_at"]),
            datetime.fromisoformat(out["ended_at"]),
        )
    return spans


def max_overlap(edges: list[tuple[float, int]]) -> int:
    """Most intervals open at one instant; ``edges`` are (time, +1 start / -1 end).
    An interval ending at the instant another starts does not overlap it."""
    open_now = peak = 0
    for _t, delta in sorted(edges):  # at equal times -1 sorts first: ends before starts
        open_now += delta
        peak = max(peak, open_now)
    return peak


def span_edges(spans: dict[str, Span]) -> list[tuple[float, int]]:
    return [(t.timestamp(), d) for s, e in spans.values() for t, d in ((s, 1), (e, -1))]


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "executions.jsonl"
    monkeypatch.setenv("ONWARD_EXECUTION_LOG", str(path))
    return path


def journal_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def journal_edges(path: Path) -> list[tuple[float, int]]:
    return [(float(str(j["t"])), 1 if j["phase"] == "start" else -1) for j in journal_lines(path)]


def executions_per_step(path: Path) -> Counter[str]:
    return Counter(str(j["step"]) for j in journal_lines(path) if j["phase"] == "start")


def run_done(ow: Onward, plan: Plan, max_concurrency: int) -> RunView:
    view = ow.run(plan=plan, max_concurrency=max_concurrency)
    assert view.status is RunStatus.DONE, view.failure
    return view


def test_independent_steps_run_at_the_same_time_once_each(ow: Onward, journal: Path) -> None:
    view = run_done(ow, independent_waits(4), max_concurrency=4)

    spans = recorded_spans(ow, view)
    latest_start = max(start for start, _ in spans.values())
    earliest_end = min(end for _, end in spans.values())
    assert latest_start < earliest_end, f"the four waits did not all overlap: {spans}"
    assert executions_per_step(journal) == dict.fromkeys(spans, 1)


def test_parallel_steps_each_execute_exactly_once(ow: Onward, journal: Path) -> None:
    started: Counter[str] = Counter()
    view = ow.run(
        plan=independent_waits(4, seconds=0.05),
        max_concurrency=4,
        on_event=lambda e: started.update([e.step_id] if e.kind == "step_started" else []),
    )

    assert view.status is RunStatus.DONE
    assert [s.attempts for s in view.steps] == [1, 1, 1, 1]
    assert started == {"w0": 1, "w1": 1, "w2": 1, "w3": 1}
    assert executions_per_step(journal) == started


def test_max_concurrency_bounds_how_many_steps_overlap(ow: Onward, journal: Path) -> None:
    view = run_done(ow, independent_waits(6), max_concurrency=2)

    spans = recorded_spans(ow, view)
    assert max_overlap(span_edges(spans)) == 2, f"recorded intervals: {spans}"
    # Every execution, not only the ones whose output was kept.
    assert max_overlap(journal_edges(journal)) <= 2
    assert sum(executions_per_step(journal).values()) == 6


FAN_IN = Plan(
    steps=[
        wait_step("slow", 0.3),
        wait_step("fast", 0.05),
        wait_step("join", 0.05, depends_on=("slow", "fast")),
    ]
)
WITH_UNRELATED_SIBLING = Plan(
    steps=[
        wait_step("first", 0.1),
        wait_step("sibling", 0.3),
        wait_step("then", 0.05, depends_on=("first",)),
    ]
)


@pytest.mark.parametrize(
    ("plan", "dependent"),
    [
        pytest.param(FAN_IN, "join", id="fan-in"),
        pytest.param(WITH_UNRELATED_SIBLING, "then", id="beside-a-sibling"),
    ],
)
def test_dependent_step_starts_only_after_all_its_dependencies_ended(
    ow: Onward, journal: Path, plan: Plan, dependent: str
) -> None:
    view = run_done(ow, plan, max_concurrency=4)
    deps = plan.step(dependent).depends_on

    spans = recorded_spans(ow, view)
    assert spans[dependent][0] >= max(spans[d][1] for d in deps), spans
    # Every execution of the dependent starts after every execution of its dependencies.
    lines = journal_lines(journal)
    dep_ends = [float(str(j["t"])) for j in lines if j["step"] in deps and j["phase"] == "end"]
    starts = [float(str(j["t"])) for j in lines if j["step"] == dependent and j["phase"] == "start"]
    assert dep_ends
    assert starts
    assert min(starts) >= max(dep_ends)
