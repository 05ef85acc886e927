"""execute and verify route themselves (a Command) instead of through a conditional edge.

A conditional edge reads a fresh copy of every channel with the task's writes applied;
verify now schedules on ``after_writes(state, update)`` instead. These tests hold that to
what LangGraph's own channels make of the same writes, and check that the graph still
routes and draws the same way (the drawing: tests/cli/test_graph_routes.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from onward.graph.build import compile_graph
from onward.graph.schedule import after_writes
from onward.model.state import (
    ArtifactRef,
    Decision,
    DecisionAction,
    Plan,
    PlanStep,
    RunState,
    StepRecord,
    StepStatus,
    Usage,
    Waiting,
)
from onward.nodes.deps import NodeDeps
from onward.store.artifacts import ArtifactStore
from onward.tools.registry import default_registry


def _ref(name: str) -> ArtifactRef:
    return ArtifactRef(name=name, uri=f"artifact://sha256/{'a' * 64}", sha256="a" * 64, size=2)


def _state() -> RunState:
    return RunState(
        plan=Plan(steps=[PlanStep(id="a", tool="noop"), PlanStep(id="b", tool="noop")]),
        steps={"a": StepRecord(id="a", status=StepStatus.PRODUCED, attempts=1)},
        artifacts={"x": _ref("x")},
        usage=Usage(calls=1, input_tokens=10),
        waiting={"b": Waiting(step_id="b", reason="asked")},
        wave=3,
    )


UPDATES: list[dict[str, Any]] = [
    # verify's own writes: a record, an artifact, the judge's usage
    {
        "steps": {"a": StepRecord(id="a", status=StepStatus.DONE, attempts=1)},
        "artifacts": {"y": _ref("y")},
        "usage": Usage(calls=2, output_tokens=5, cost=0.5),
    },
    # the other kinds of channel: a keyed merge that drops None, the last value, a
    # delta list, a replaced plan
    {
        "waiting": {"b": None},
        "wave": 1,
        "decisions": [
            Decision(step_id="a", action=DecisionAction.APPROVE, by="me", at=datetime.now(UTC))
        ],
        "plan": Plan(steps=[PlanStep(id="c", tool="noop")]),
    },
]


def _graph(tmp_path: Path) -> Any:
    deps = NodeDeps(registry=default_registry, artifacts=ArtifactStore(tmp_path))
    return compile_graph(deps)


@pytest.mark.parametrize("update", UPDATES, ids=["verify-writes", "other-channels"])
def test_after_writes_is_what_langgraphs_channels_make_of_the_writes(
    update: dict[str, Any], tmp_path: Path
) -> None:
    state = _state()
    graph = _graph(tmp_path)
    got = after_writes(state, update)
    for field in RunState.model_fields:
        channel = graph.channels[field].from_checkpoint(getattr(state, field))
        if field in update:
            channel.update([update[field]])
        expected = channel.get()
        assert getattr(got, field) == expected, field
    assert state == _state(), "the input state is left as it was"


def test_after_writes_folds_a_keyed_merge_and_a_sum() -> None:
    got = after_writes(_state(), UPDATES[0])
    assert got.steps.status_of("a") is StepStatus.DONE
    assert set(got.artifacts) == {"x", "y"}
    assert got.usage == Usage(calls=3, input_tokens=10, output_tokens=5, cost=0.5)
    assert after_writes(_state(), {"waiting": {"b": None}}).waiting == {}
