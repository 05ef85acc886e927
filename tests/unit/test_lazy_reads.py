"""Reading a long run decodes only what is read: settled step records stay encoded, a
view builds the steps it is asked for, and finalize's report reads the statuses."""

from __future__ import annotations

from array import array
from pathlib import Path

import ormsgpack
import pytest

from onward import Onward, Plan, PlanStep, RunStatus
from onward.checkpointing.lazy import pack, unpack
from onward.model.state import (
    FailureClass,
    Goal,
    RunState,
    StepFailure,
    StepRecord,
    StepRecords,
    StepStatus,
)
from onward.nodes.finalize import execution_report


def record(sid: str, status: StepStatus, **kw: object) -> StepRecord:
    return StepRecord(id=sid, status=status, **kw)  # type: ignore[arg-type]


def test_settled_records_stay_encoded_until_read() -> None:
    done = record("a", StepStatus.DONE, attempts=2)
    running = record("b", StepStatus.RUNNING, attempts=1)
    recs = StepRecords().merged([{"a": done, "b": running}])
    assert recs.decoded() == 1  # only the running one is an object
    assert recs.peek("a", "attempts") == 2
    assert recs.peek("b", "attempts") == 1
    assert recs.decoded() == 1  # peeking decoded nothing
    assert recs["a"] == done
    assert recs.decoded() == 2
    again = unpack(StepRecords, pack(recs), ormsgpack.unpackb)
    assert again.peek("a", "attempts") == 2
    assert again.decoded() == 0
    assert dict(again) == {"a": done, "b": running}


def old_report_lines(state: RunState) -> list[str]:
    """What the report listed before it read statuses: every step and record decoded."""
    lines = []
    by_status: dict[str, int] = {}
    for s in state.plan.steps:
        st = state.record(s.id).status.value
        by_status[st] = by_status.get(st, 0) + 1
    lines.append(", ".join(f"{v} {k}" for k, v in sorted(by_status.items())))
    retried = [s.id for s in state.plan.steps if state.record(s.id).attempts > 1]
    if retried:
        lines.append(f"Deviations: re-attempted {', '.join(retried)}")
    shown = 0
    for s in state.plan.steps:
        rec = state.record(s.id)
        if rec.status is StepStatus.DONE and shown < 10:
            lines.append(f"  ✓ {s.id} ({s.tool}): ")
            shown += 1
        elif rec.status is StepStatus.FAILED:
            lines.append(f"  ✗ {s.id} ({s.tool}): {rec.failure.message if rec.failure else ''}")
        elif rec.status is StepStatus.SKIPPED and rec.note:
            lines.append(f"  – {s.id} ({s.tool}): {rec.note}")
    return lines


def test_report_from_statuses_lists_what_decoding_every_step_listed() -> None:
    ids = [f"s{i}" for i in range(16)]
    boom = StepFailure(failure_class=FailureClass.DETERMINISTIC, message="boom")
    records = {sid: record(sid, StepStatus.DONE, attempts=1) for sid in ids[:12]}
    records["s3"] = record("s3", StepStatus.DONE, attempts=3)
    records["s11"] = record("s11", StepStatus.DONE, attempts=2)  # the 12th done: not shown
    records["s12"] = record("s12", StepStatus.FAILED, attempts=2, failure=boom)
    records["s13"] = record("s13", StepStatus.SKIPPED, note="not needed")
    records["s14"] = record("s14", StepStatus.SKIPPED)  # skipped without a note: not listed
    plan = Plan(steps=[PlanStep(id=sid, tool="noop", args={"value": 1}) for sid in ids])
    fresh = RunState(goal=Goal(objective="o"), plan=plan, steps=records)
    packed = pack(fresh.steps)  # as loaded from a checkpoint: every record a slot
    loaded = fresh.model_copy(update={"steps": unpack(StepRecords, packed, ormsgpack.unpackb)})
    once = {sid: r.model_copy(update={"attempts": 1}) for sid, r in records.items()}
    once["s13"] = record("s13", StepStatus.SKIPPED, note="not needed")  # these never ran
    once["s14"] = record("s14", StepStatus.SKIPPED)
    no_retries = fresh.model_copy(update={"steps": StepRecords(once)})
    for state in (fresh, loaded, no_retries):
        report = execution_report(state, RunStatus.FAILED, None).splitlines()
        assert report[1].startswith("Steps: 16 in plan v1 — ")
        assert [report[1].split(" — ", 1)[1], *report[2:]] == old_report_lines(state)
        retried = "Deviations: re-attempted s3, s11, s12"
        assert (retried in report) is (state is not no_retries)
    assert loaded.steps.decoded() < len(ids)


def test_a_view_builds_only_the_steps_read(tmp_path: Path) -> None:
    steps = [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else [])
        for i in range(30)
    ]
    with Onward(f"sqlite:///{tmp_path / 'onward.db'}", model=None) as ow:
        thread_id = ow.run(plan=Plan(steps=steps), workdir=tmp_path).thread_id
    with Onward(f"sqlite:///{tmp_path / 'onward.db'}", model=None) as ow:
        view = ow.get(thread_id)
        last = view.steps[-1]
        assert last.id == "s29"
        assert last.status is StepStatus.DONE
        assert sum(built is not None for built in view.steps._built) == 1
        dumped = view.model_dump(mode="json")
        assert [s["id"] for s in dumped["steps"]] == [s.id for s in steps]
        assert view.steps == [ow.get(thread_id).steps[i] for i in range(30)]


def test_the_final_chat_report_of_a_long_chain_decodes_only_the_steps_it_shows(
    tmp_path: Path,
) -> None:
    """The Markdown report looks up each done step's tool without decoding the step: of a
    chain of tools it has no result view for, it builds only the table's rows."""
    from onward.observe.chat import MAX_STEP_ROWS, markdown_report

    n = MAX_STEP_ROWS * 3
    steps = [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else [])
        for i in range(n)
    ]
    with Onward(f"sqlite:///{tmp_path / 'onward.db'}", model=None) as ow:
        thread_id = ow.run(plan=Plan(steps=steps), workdir=tmp_path).thread_id
    with Onward(f"sqlite:///{tmp_path / 'onward.db'}", model=None) as ow:
        state = RunState.model_validate(ow.graph.get_state(ow._config(thread_id)).values)
        plan_steps = state.plan.index()
        assert plan_steps.decoded() == 0
        report = markdown_report(state, RunStatus.DONE, None, lambda ref: None)
        assert f"| s{MAX_STEP_ROWS - 1} | noop |" in report
        assert f"…and {n - MAX_STEP_ROWS} more steps" in report
        assert plan_steps.decoded() == MAX_STEP_ROWS


class CountingDecoder:
    """A lazy collection's decoder that counts the items it decodes (peeks included)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, blob: bytes) -> object:
        self.calls += 1
        return ormsgpack.unpackb(blob)


def test_where_finds_items_by_a_field_decoding_only_the_candidates() -> None:
    from onward.model.state import PlanSteps

    steps = [PlanStep(id=f"s{i}", tool="noop", args={"value": i}) for i in range(300)]
    steps[17] = PlanStep(id="s17", tool="find_anomalies")
    steps[250] = PlanStep(id="s250", tool="render_report")
    # The bytes of `tool: find_anomalies` in another step's args: a candidate, not a match.
    steps[40] = PlanStep(id="s40", tool="noop", args={"tool": "find_anomalies"})
    decode = CountingDecoder()
    loaded = unpack(PlanSteps, pack(PlanSteps(steps)), decode)
    assert loaded.where("tool", "find_anomalies", "render_report") == [17, 250]
    assert decode.calls == 3  # the two matches and the look-alike, of 300
    assert loaded.where("tool", "no_such_tool") == []
    assert decode.calls == 3
    # A step read (decoded) or replaced is found from its object.
    swapped = loaded.replaced(PlanStep(id="s5", tool="render_report"))
    assert swapped.where("tool", "render_report") == [5, 250]
    # A value that is the field's default is not in an encoded item: every item is peeked.
    assert loaded.where("description", "") == list(range(300))
    assert decode.calls > 300


def test_the_final_chat_report_of_a_long_chain_peeks_no_step_of_other_tools() -> None:
    """The report's result section looks for the steps of the tools it shows among the
    encoded steps' bytes: on a chain of other tools its decodes are the table's rows,
    however long the chain (it used to peek every done step's tool)."""
    from onward.model.state import PlanSteps
    from onward.observe.chat import MAX_STEP_ROWS, markdown_report

    n = MAX_STEP_ROWS * 10
    steps = [PlanStep(id=f"s{i}", tool="noop", args={"value": i}) for i in range(n)]
    decode = CountingDecoder()
    plan = Plan(steps=unpack(PlanSteps, pack(PlanSteps(steps)), decode))
    records = StepRecords({s.id: record(s.id, StepStatus.DONE, attempts=1) for s in steps})
    state = RunState(goal=Goal(objective="o"), plan=plan, steps=records)
    report = markdown_report(state, RunStatus.DONE, None, lambda ref: None)
    assert f"| s{MAX_STEP_ROWS - 1} | noop | ✓ done |" in report
    assert f"({n} of plan v1: {n} done)" in report
    assert decode.calls == MAX_STEP_ROWS


def test_open_steps_of_a_long_run_reuse_what_they_know_of_unrecorded_steps() -> None:
    """Which plan steps have no record is found once per plan and carried to the merged
    versions of the records (the scheduler asks after every step): a write to a step
    with a record keeps it, a first record of a step drops it (found again when asked)."""
    n = 400
    plan = Plan(steps=[PlanStep(id=f"s{i}", tool="noop") for i in range(n)])
    index = plan.index()
    done = {f"s{i}": record(f"s{i}", StepStatus.DONE) for i in range(n - 2)}
    state = RunState(goal=Goal(objective="o"), plan=plan, steps=StepRecords(done))
    assert [s.id for s in state.open_steps()] == [f"s{n - 2}", f"s{n - 1}"]
    known = state.steps.unrecorded(index)
    assert known == {f"s{n - 2}", f"s{n - 1}"}
    rerun = state.steps.merged([{"s3": record("s3", StepStatus.PENDING)}])
    assert rerun.unrecorded(index) is known  # not found again: no scan of every id
    later = state.model_copy(update={"steps": rerun})
    assert [s.id for s in later.open_steps()] == ["s3", f"s{n - 2}", f"s{n - 1}"]
    started = rerun.merged([{f"s{n - 2}": record(f"s{n - 2}", StepStatus.RUNNING)}])
    assert started.unrecorded(index) == {f"s{n - 1}"}
    assert rerun.unrecorded(index) is known  # the older version is unchanged
    other = Plan(steps=[PlanStep(id="s0", tool="noop"), PlanStep(id="new", tool="noop")])
    assert started.unrecorded(other.index()) == {"new"}  # another plan: its own answer


def _long_records(n: int) -> StepRecords:
    done = {f"s{i}": record(f"s{i}", StepStatus.DONE, attempts=1, note=f"n{i}") for i in range(n)}
    return StepRecords().merged([done])


def test_a_large_collection_is_stored_in_chunks_and_a_read_inflates_only_its_chunk() -> None:
    """A long run's snapshot is not one deflated blob that every load inflates whole: its
    body is stored in chunks, and reading one record inflates one chunk."""
    from onward.checkpointing.format import CHUNK_BYTES, ChunkedBody
    from onward.checkpointing.serde import checkpoint_serde

    serde = checkpoint_serde(None)
    recs = _long_records(10_000)
    type_, blob = serde.dumps_typed({"steps": recs})
    # Its body in deflated chunks: the blob is not deflated again (a load would inflate it).
    assert type_ == "msgpack"
    body = unpack(StepRecords, pack(recs), ormsgpack.unpackb)._items.body
    assert isinstance(body, ChunkedBody)
    assert len(body) > 4 * CHUNK_BYTES
    assert len(body.starts) > 5
    assert len(blob) < len(body) / 3  # the chunks are deflated
    loaded = serde.loads_typed((type_, blob))["steps"]
    chunks = loaded._items.body
    assert chunks.inflated() == 0  # loading inflated nothing
    assert loaded["s4321"] == recs["s4321"]
    assert chunks.inflated() == 1
    assert loaded.status_of("s10") is StepStatus.DONE  # read without decoding
    assert chunks.inflated() == 1
    assert dict(loaded) == dict(recs)  # every item, across every chunk boundary
    # Stored again (a later snapshot) it is the same.
    again = serde.loads_typed(serde.dumps_typed({"steps": loaded}))["steps"]
    assert dict(again) == dict(recs)


def test_a_small_collection_is_one_body_and_its_blob_is_deflated() -> None:
    from onward.checkpointing.format import COMPRESSED
    from onward.checkpointing.serde import checkpoint_serde

    recs = _long_records(50)
    assert isinstance(pack(recs)[1], bytes)
    assert checkpoint_serde(None).dumps_typed({"steps": recs})[0] == COMPRESSED


def test_where_searches_a_chunked_body() -> None:
    from onward.checkpointing.format import ChunkedBody
    from onward.model.state import PlanSteps

    steps = [PlanStep(id=f"s{i}", tool="noop", args={"value": "x" * 80}) for i in range(3000)]
    steps[2900] = PlanStep(id="s2900", tool="render_report")
    decode = CountingDecoder()
    loaded = unpack(PlanSteps, pack(PlanSteps(steps)), decode)
    assert isinstance(loaded._items.body, ChunkedBody)
    assert loaded.where("tool", "render_report") == [2900]
    assert decode.calls == 1
    assert loaded[2999] == steps[2999]


def test_a_damaged_chunk_is_a_store_error_when_it_is_read() -> None:
    from onward.checkpointing.format import ChunkedBody
    from onward.errors import StoreCorruptError

    ids, (starts, chunks), offsets, *summary = pack(_long_records(10_000))
    chunks = list(chunks)
    chunks[1] = chunks[1][:10] + bytes(len(chunks[1]) - 10)  # zeros after its header
    loaded = unpack(StepRecords, [ids, [starts, chunks], offsets, *summary], ormsgpack.unpackb)
    assert isinstance(loaded._items.body, ChunkedBody)
    assert loaded["s0"].status is StepStatus.DONE  # chunk 0 is intact
    with pytest.raises(StoreCorruptError, match="restore the store from a backup"):
        dict(loaded)
    with pytest.raises(ValueError, match="differ in number"):
        unpack(StepRecords, [ids, [starts, chunks[:-1]], offsets, *summary], ormsgpack.unpackb)
    # Chunks in each other's places: the last, short one inflates short of the first's
    # slot; the first inflates past the last's and is cut one byte past it. Both refused.
    whole = pack(_long_records(10_000))[1][1]
    swapped = [whole[-1], *whole[1:-1], whole[0]]
    bad = unpack(StepRecords, [ids, [starts, swapped], offsets, *summary], ormsgpack.unpackb)
    for sid in ("s0", "s9999"):
        with pytest.raises(StoreCorruptError, match="wrong length"):
            bad[sid]
    backwards = array("Q", [0, 5, 3, *array("Q", starts)[3:]]).tobytes()
    with pytest.raises(ValueError, match="go backwards"):
        ChunkedBody(backwards, list(whole))
