"""A big argument is stored once (issue 19): the run's request keeps its long strings as
files (SQLite) only until a checkpoint with the state is durable; a run killed before that
starts from them intact; stores written before read as they did."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import pytest

from onward import Onward, Plan, PlanStep, RunStatus
from onward.errors import StoreError
from onward.store import blobs

BIG = "ü" * blobs.LONG_CHARS + "end"  # non-ASCII: the files keep text, not bytes of JSON


def _plan(value: str) -> Plan:
    return Plan(
        steps=[
            PlanStep(id="big", tool="noop", args={"value": value}),
            PlanStep(id="after", tool="noop", args={"value": 1}, depends_on=["big"]),
        ]
    )


def _stored_row(ow: Onward, thread_id: str) -> str:
    with ow.store.db.use() as db:
        row = db.execute(
            "SELECT request FROM onward_requests WHERE thread_id=?", (thread_id,)
        ).fetchone()
    return str(row[0])


def _request_row(ow: Onward, thread_id: str) -> str:
    """The request's row as JSON (SQLite deflates a long one: ``z:`` and base85)."""
    row = _stored_row(ow, thread_id)
    return zlib.decompress(base64.b85decode(row[2:])).decode() if row.startswith("z:") else row


def _request_files(ow: Onward) -> list[Path]:
    files = ow.store.request_blobs
    return [] if files is None or not files.root.exists() else sorted(files.root.rglob("*"))


def test_a_submitted_run_keeps_its_big_argument_out_of_the_row_and_runs_from_it(
    ow: Onward, workdir: Path
) -> None:
    tid = ow.submit(plan=_plan(BIG), workdir=str(workdir))
    row = _request_row(ow, tid)
    if ow.store.request_blobs is not None:  # SQLite: the row names a file instead
        assert len(row) < blobs.LONG_CHARS
        assert [p.is_file() for p in _request_files(ow)][-1:] == [True]
    assert ow.store.run_request(tid)["input"]["plan"]["steps"][0]["args"]["value"] == BIG
    view = ow.resume(tid)  # as a run killed before its first checkpoint goes on
    assert view.status is RunStatus.DONE
    assert ow.state(tid).plan.steps[0].args["value"] == BIG
    assert len(_request_row(ow, tid)) < blobs.LONG_CHARS  # settled: one copy, in checkpoints
    assert [p for p in _request_files(ow) if p.is_file()] == []


def test_a_settled_request_is_never_read_as_if_whole(ow: Onward, workdir: Path) -> None:
    view = ow.run(plan=_plan(BIG), workdir=str(workdir))
    assert view.status is RunStatus.DONE
    settled = json.loads(_request_row(ow, view.thread_id))
    assert settled[blobs.SETTLED] == [["input", "plan", "steps", 0, "args", "value"]]
    with pytest.raises(StoreError, match="settled after its first checkpoint"):
        ow.store.run_request(view.thread_id)
    assert ow.state(view.thread_id).status is RunStatus.DONE  # read from the checkpoint


def test_small_requests_and_old_rows_read_as_they_were(ow: Onward, workdir: Path) -> None:
    tid = ow.submit(plan=_plan("small"), workdir=str(workdir))
    stored = json.loads(_request_row(ow, tid))
    assert not {blobs.BLOBS, blobs.SETTLED} & set(stored)
    assert ow.store.run_request(tid) == stored  # a row written before this change, too
    assert ow.resume(tid).status is RunStatus.DONE
    assert json.loads(_request_row(ow, tid)) == stored  # nothing to settle: not rewritten


def test_a_changed_request_file_is_an_error_not_another_argument(
    sqlite_url: str, workdir: Path
) -> None:
    with Onward(sqlite_url) as ow:
        tid = ow.submit(plan=_plan(BIG), workdir=str(workdir))
        (file,) = [p for p in _request_files(ow) if p.is_file()]
        file.write_text("x" * len(BIG), encoding="utf-8")
        with pytest.raises(StoreError, match="was changed on disk"):
            ow.store.run_request(tid)


def test_a_thread_id_cannot_put_request_files_outside_their_folder(
    sqlite_url: str, workdir: Path
) -> None:
    with Onward(sqlite_url) as ow:
        ow.submit(plan=_plan(BIG), workdir=str(workdir), thread_id="../../escape")
        root = ow.store.request_blobs.root if ow.store.request_blobs else None
        assert root is not None
        assert all(p.resolve().is_relative_to(root.resolve()) for p in root.rglob("*"))
        assert not (workdir.parent / "escape").exists()


def test_pruning_a_run_removes_its_request_files(sqlite_url: str, workdir: Path) -> None:
    with Onward(sqlite_url) as ow:
        tid = ow.submit(plan=_plan(BIG), workdir=str(workdir))
        ow.store.delete_run(tid)
        assert [p for p in _request_files(ow) if p.is_file()] == []


def test_a_long_request_is_stored_deflated_and_a_plain_one_still_reads(
    ow: Onward, workdir: Path
) -> None:
    steps = [PlanStep(id="s0", tool="noop", args={"value": 0})] + [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"])
        for i in range(1, 200)
    ]
    tid = ow.submit(plan=Plan(steps=steps), workdir=str(workdir))
    request = ow.store.run_request(tid)
    assert [s["id"] for s in request["input"]["plan"]["steps"]] == [f"s{i}" for i in range(200)]
    plain = json.dumps(request, ensure_ascii=False)
    row = _stored_row(ow, tid)
    if ow.store.request_blobs is not None:  # SQLite deflates it; Postgres compresses itself
        assert row.startswith("z:")
        assert len(row) * 4 < len(plain)
    # A row as onward wrote it before (plain JSON) reads the same.
    with ow.store.db.use() as db:
        db.execute("UPDATE onward_requests SET request=? WHERE thread_id=?", (plain, tid))
    assert ow.store.run_request(tid) == request
    assert ow.resume(tid).status is RunStatus.DONE


def test_a_damaged_deflated_request_is_a_store_error(ow: Onward, workdir: Path) -> None:
    tid = ow.submit(plan=_plan("small"), workdir=str(workdir))
    with ow.store.db.use() as db:
        db.execute("UPDATE onward_requests SET request='z:not base85 {' WHERE thread_id=?", (tid,))
    with pytest.raises(StoreError, match="compressed bytes are damaged"):
        ow.store.run_request(tid)
