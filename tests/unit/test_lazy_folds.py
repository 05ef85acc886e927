"""Folding a write into a step-records version (what LangGraph's channel and
``graph/schedule.after_writes`` both do) gives a new version with the write applied in
order, reads the write as it is at the time of the fold, and leaves the version it
started from unchanged."""

from __future__ import annotations

from pathlib import Path

from onward import Onward, Plan, PlanStep
from onward.model.state import StepRecord, StepRecords, StepStatus, merge_steps


def rec(sid: str, status: StepStatus) -> StepRecord:
    return StepRecord(id=sid, status=status)


def test_folding_one_write_twice_gives_equal_versions_and_leaves_the_base_unchanged() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED), "b": rec("b", StepStatus.PENDING)})
    write = {"a": rec("a", StepStatus.DONE)}
    first = merge_steps(base, [write])
    second = merge_steps(base, [write])
    assert dict(second) == {"a": rec("a", StepStatus.DONE), "b": rec("b", StepStatus.PENDING)}
    assert dict(second) == dict(first)
    assert second.statuses == first.statuses
    assert dict(base) == {"a": rec("a", StepStatus.PRODUCED), "b": rec("b", StepStatus.PENDING)}


def test_a_write_changed_in_place_between_the_folds_is_folded_as_it_now_is() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    write = {"a": rec("a", StepStatus.DONE)}
    first = merge_steps(base, [write])
    write["a"] = rec("a", StepStatus.FAILED)
    second = merge_steps(base, [write])
    assert first["a"].status is StepStatus.DONE
    assert second["a"].status is StepStatus.FAILED


def test_a_write_of_plain_values_changed_in_place_is_folded_as_it_now_is() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    write = {"a": {"id": "a", "status": "done"}}
    first = merge_steps(base, [write])
    write["a"]["status"] = "failed"
    second = merge_steps(base, [write])
    assert first["a"].status is StepStatus.DONE
    assert second["a"].status is StepStatus.FAILED


def test_a_write_whose_keys_were_reordered_is_folded_in_its_new_order() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PENDING), "b": rec("b", StepStatus.PENDING)})
    a, b = rec("a", StepStatus.RUNNING), rec("b", StepStatus.RUNNING)
    write = {"c": a, "d": b}
    first = merge_steps(base, [write])
    del write["c"]
    write["c"] = a
    second = merge_steps(base, [write])
    assert list(first) == ["a", "b", "c", "d"]
    assert list(second) == ["a", "b", "d", "c"]


def test_a_batch_of_writes_is_folded_in_order_later_wins() -> None:
    base = StepRecords({"a": rec("a", StepStatus.PRODUCED)})
    one, two = {"a": rec("a", StepStatus.DONE)}, {"a": rec("a", StepStatus.FAILED)}
    assert merge_steps(base, [one, two])["a"].status is StepStatus.FAILED
    assert merge_steps(base, [two, one])["a"].status is StepStatus.DONE


def test_a_chain_of_plan_steps_ends_with_every_record_done(tmp_path: Path) -> None:
    steps = [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else [])
        for i in range(8)
    ]
    with Onward(tmp_path / "onward.db", model=None) as ow:
        view = ow.run(plan=Plan(steps=steps), thread_id="t")
        assert view.status.value == "done"
        assert [s.status.value for s in view.steps] == ["done"] * 8
        state = ow.state("t")
    assert [state.record(f"s{i}").status for i in range(8)] == [StepStatus.DONE] * 8
