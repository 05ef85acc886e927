"""A write folded into a step-records version by a conditional edge (to route without a
superstep) is not folded again when LangGraph's channel folds the same write into the same
version: the edge's result is reused, once, and only while the write is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from onward import Onward, Plan, PlanStep
from onward.model import lazy
from onward.model.state import StepRecord, StepRecords, StepStatus, merge_steps


def rec(sid: str, status: StepStatus) -> StepRecord:
    return StepRecord(id=sid, status=status)


@pytest.fixture(autouse=True)
def fresh_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lazy, "_FOLDS", lazy._Folds())


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
    merge_steps(base, [one, two])  # the channel folds the wave's writes together
    assert lazy._FOLDS._folds == {}


def test_closing_a_client_drops_the_kept_folds(tmp_path: Path) -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    merge_steps(base, [{"a": rec("a", StepStatus.DONE)}])
    assert lazy._FOLDS._folds
    Onward(str(tmp_path / "onward.db"), model=None).close()
    assert lazy._FOLDS._folds == {}


def test_at_most_a_few_folds_are_kept() -> None:
    versions = [StepRecords({f"s{i}": rec(f"s{i}", StepStatus.PENDING)}) for i in range(20)]
    for v in versions:
        merge_steps(v, [{"x": rec("x", StepStatus.PENDING)}])
    assert len(lazy._FOLDS._folds) == lazy._Folds.KEPT


def test_each_plan_step_folds_its_verify_write_once_and_the_run_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reused: list[bool] = []
    take = lazy._FOLDS.take

    def counting(base: object, write: object) -> object:
        result = take(base, write)  # type: ignore[arg-type]
        reused.append(result is not None)
        return result

    monkeypatch.setattr(lazy._FOLDS, "take", counting)
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
