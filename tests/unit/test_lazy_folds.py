"""A write folded into a step-records version by a conditional edge (to route without a
superstep) is not folded again when LangGraph's channel folds the same write into the same
version: the edge's result is reused, once, and only while the write is unchanged. The
version holds that one result only until it is taken or replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from onward import Onward, Plan, PlanStep
from onward.model import lazy
from onward.model.state import StepRecord, StepRecords, StepStatus, merge_steps


def rec(sid: str, status: StepStatus) -> StepRecord:
    return StepRecord(id=sid, status=status)


def test_the_second_fold_of_one_write_into_one_version_reuses_the_first() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED), "b": rec("b", StepStatus.PENDING)})
    write = {"a": rec("a", StepStatus.DONE)}
    first = merge_steps(base, [write])
    second = merge_steps(base, [write])
    assert second is first
    assert dict(second) == {"a": rec("a", StepStatus.DONE), "b": rec("b", StepStatus.PENDING)}
    assert second.statuses == first.statuses
    third = merge_steps(base, [write])  # a fold is used once
    assert third is not first
    assert dict(third) == dict(first)
    assert dict(base) == {"a": rec("a", StepStatus.PRODUCED), "b": rec("b", StepStatus.PENDING)}


def test_a_write_changed_in_place_between_the_folds_is_folded_again() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    write = {"a": rec("a", StepStatus.DONE)}
    first = merge_steps(base, [write])
    write["a"] = rec("a", StepStatus.FAILED)
    second = merge_steps(base, [write])
    assert second is not first
    assert second["a"].status is StepStatus.FAILED


def test_other_writes_or_versions_or_batches_are_folded_afresh() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    other = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    write = {"a": rec("a", StepStatus.DONE)}
    first = merge_steps(base, [write])
    assert merge_steps(other, [write]) is not first
    assert merge_steps(base, [dict(write)]) is not first
    assert merge_steps(base, [write, {"b": rec("b", StepStatus.PENDING)}]) is not first


def test_a_write_of_plain_values_is_never_reused_as_they_could_change_in_place() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    write = {"a": {"id": "a", "status": "done"}}
    first = merge_steps(base, [write])
    write["a"]["status"] = "failed"
    second = merge_steps(base, [write])
    assert first["a"].status is StepStatus.DONE
    assert second["a"].status is StepStatus.FAILED


def test_a_write_whose_keys_were_reordered_is_folded_again() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PENDING), "b": rec("b", StepStatus.PENDING)})
    a, b = rec("a", StepStatus.RUNNING), rec("b", StepStatus.RUNNING)
    write = {"c": a, "d": b}
    first = merge_steps(base, [write])
    del write["c"]
    write["c"] = a
    second = merge_steps(base, [write])
    assert list(first) == ["a", "b", "c", "d"]
    assert list(second) == ["a", "b", "d", "c"]


def test_a_batch_of_writes_drops_the_fold_kept_for_its_version() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    one, two = {"a": rec("a", StepStatus.DONE)}, {"b": rec("b", StepStatus.PENDING)}
    merge_steps(base, [one])  # a routing edge's fold in a wave of two
    assert base._fold is not None
    merge_steps(base, [one, two])  # the channel folds the wave's writes together
    assert base._fold is None


def test_a_version_holds_its_fold_only_until_it_is_taken() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    write = {"a": rec("a", StepStatus.DONE)}
    first = merge_steps(base, [write])
    assert base._fold is not None
    assert base._fold.result is first
    assert merge_steps(base, [write]) is first
    assert base._fold is None  # taken: the version no longer holds the result
    assert first._fold is None  # a result holds no fold of its own until it is folded into


def test_a_version_keeps_one_fold_at_most() -> None:
    versions = [StepRecords({f"s{i}": rec(f"s{i}", StepStatus.PENDING)}) for i in range(20)]
    for v in versions:
        writes = [{"x": rec("x", StepStatus.PENDING)} for _ in range(3)]
        results = [merge_steps(v, [w]) for w in writes]
        assert v._fold is not None
        assert v._fold.write is writes[-1]
        assert v._fold.result is results[-1]


def test_each_plan_step_folds_its_verify_write_once_and_the_run_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reused: list[bool] = []
    matches = lazy._Fold.matches

    def counting(self: Any, write: Any) -> bool:
        hit = matches(self, write)
        reused.append(hit)
        return hit

    monkeypatch.setattr(lazy._Fold, "matches", counting)
    steps = [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else [])
        for i in range(8)
    ]
    with Onward(tmp_path / "onward.db", model=None) as ow:
        view = ow.run(plan=Plan(steps=steps), thread_id="t")
        assert view.status.value == "done"
        assert [s.status.value for s in view.steps] == ["done"] * 8
        state = ow.state("t")
    assert sum(reused) == 8
    assert [state.record(f"s{i}").status for i in range(8)] == [StepStatus.DONE] * 8
