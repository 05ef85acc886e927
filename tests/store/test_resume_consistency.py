"""Resume checks what it builds on, and state saved by an older onward keeps loading."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from onward import InconsistentRunError, Onward, Plan, PlanStep
from onward.model.state import SCHEMA_VERSION, migrate
from onward.store.database import STORE_SCHEMA_VERSION
from tests.support.paths import GOLDEN

BIG = "41" * 200
"""A value whose body is stored (smaller ones ride in their ref, see INLINE_LIMIT)."""
LONG_PATH = "reports/" + "q" * 200 + ".txt"
"""write_file's output names its path: a long one makes the output a stored body."""


def _stop_after(ow: Onward, thread_id: str, step_id: str) -> None:
    """Drive until ``step_id`` is done and saved, then stop (as a killed driver would).
    ``step_done`` streams while verify still runs, before its writes are saved (stopping
    there left the step produced on Postgres, where the writes go to LangGraph's
    executor); the next step starts only once that superstep is checkpointed."""
    done = False
    for event in ow.stream(thread_id):
        if event.kind == "step_done" and event.step_id == step_id:
            done = True
        elif done and event.kind == "step_started":
            break
    assert done, f"{step_id} never finished"


def _damage(ow: Onward, thread_id: str, name: str, new_body: bytes | None) -> None:
    """Delete or overwrite an artifact's stored body (a file, or a row on Postgres)."""
    sha = ow.state(thread_id).artifacts[name].sha256
    if new_body is None:
        assert ow.store.artifacts.delete_body(sha) > 0
    else:
        ow.store.artifacts.write_body(sha, new_body)


def _chain(producer: PlanStep) -> Plan:
    return Plan(
        steps=[
            producer,
            PlanStep(id="pause", tool="noop", depends_on=[producer.id]),
            PlanStep(
                id="use", tool="noop", args={"value": "${made}"}, depends_on=[producer.id, "pause"]
            ),
        ]
    )


@pytest.mark.parametrize("damage", ["delete", "alter"])
def test_pure_producer_of_a_damaged_artifact_is_reopened_and_rerun(
    ow: Onward, workdir: Path, damage: str
) -> None:
    plan = _chain(PlanStep(id="make", tool="noop", args={"value": BIG}, output="made"))
    thread_id = ow.start(plan=plan, workdir=workdir)
    _stop_after(ow, thread_id, "make")
    _damage(ow, thread_id, "made", None if damage == "delete" else b'{"value": 666}')

    view = ow.resume(thread_id)

    assert view.status == "done"
    make = next(s for s in view.steps if s.id == "make")
    assert make.attempts == 2  # re-opened and run again
    [decision] = view.decisions
    assert (decision.step_id, decision.action, decision.by) == ("make", "reopen", "onward")
    assert "'made'" in decision.reason
    assert ow.store.artifacts.get(ow.state(thread_id).artifacts["made"]) == {"value": BIG}


def test_non_pure_producer_of_a_damaged_artifact_stops_the_resume(
    ow: Onward,
    workdir: Path,
    run_cli,
    db_url: str,  # type: ignore[no-untyped-def]
) -> None:
    plan = _chain(
        PlanStep(
            id="make",
            tool="write_file",
            output="made",
            args={"path": LONG_PATH, "content": "hello"},
        )
    )
    thread_id = ow.start(plan=plan, workdir=workdir)
    _stop_after(ow, thread_id, "make")
    _damage(ow, thread_id, "made", b"tampered")
    before = ow.state(thread_id)

    with pytest.raises(InconsistentRunError, match="artifact 'made'") as err:
        ow.resume(thread_id)
    assert "step 'make' (write_file)" in str(err.value)
    assert ow.state(thread_id) == before  # nothing changed, nothing lost
    assert ow.store.leases.get(thread_id) is None  # and the lease was released

    cli = run_cli("resume", thread_id)
    assert cli.code == 3
    assert "artifact 'made' was changed on disk" in cli.stderr


def test_golden_v1_store_resumes_to_completion(tmp_path: Path) -> None:
    store = tmp_path / "v1"
    shutil.copytree(GOLDEN / "v1", store)
    with Onward(f"sqlite:///{store / 'onward.db'}") as ow:
        before = ow.state("golden-thread")
        assert before.schema_version == 1
        assert {k: v.status for k, v in before.steps.items()} == {"a": "done", "b": "done"}
        view = ow.resume("golden-thread")
    assert view.status == "done"
    assert [(s.id, s.status, s.attempts) for s in view.steps] == [
        ("a", "done", 1),
        ("b", "done", 1),
        ("c", "done", 1),
        ("d", "done", 1),
    ]


def test_golden_stores_are_never_rewritten_by_tests() -> None:
    conn = sqlite3.connect(f"file:{GOLDEN / 'v1' / 'onward.db'}?mode=ro", uri=True)
    try:
        version = conn.execute(
            "SELECT value FROM onward_meta WHERE key='schema_version'"
        ).fetchone()[0]
    finally:
        conn.close()
    assert int(version) >= 1
    assert not (GOLDEN / "v1" / "onward.db-wal").exists()


def test_migrate_brings_state_to_the_current_schema() -> None:
    values = {"schema_version": 1, "workdir": "."}
    assert migrate(json.loads(json.dumps(values)))["schema_version"] == SCHEMA_VERSION


def test_opening_an_older_store_moves_run_requests_to_their_own_table(tmp_path: Path) -> None:
    """Store schema 8: a status change no longer rewrites the request (the whole plan)."""
    store = tmp_path / "v1"
    shutil.copytree(GOLDEN / "v1", store)
    db = store / "onward.db"
    conn = sqlite3.connect(db)
    try:
        (old_request,) = conn.execute(
            "SELECT request FROM onward_runs WHERE thread_id = 'golden-thread'"
        ).fetchone()
    finally:
        conn.close()
    assert json.loads(old_request)["input"]

    with Onward(f"sqlite:///{db}") as ow:
        assert ow.store.run_request("golden-thread") == json.loads(old_request)

    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT request FROM onward_runs").fetchall() == [("",)]
        assert conn.execute("SELECT count(*) FROM onward_requests").fetchone() == (1,)
    finally:
        conn.close()


def test_golden_v2_store_waiting_for_approval_resumes_after_the_move(tmp_path: Path) -> None:
    """Written by the release before the package moved into folders: its pending interrupt
    carries an ``onward.model.state.ApproveTask``, which must still load and be answered."""
    store = tmp_path / "v2"
    shutil.copytree(GOLDEN / "v2", store)
    target = tmp_path / "written.txt"
    with Onward(f"sqlite:///{store / 'onward.db'}") as ow:
        before = ow.state("golden-v2")
        assert before.status == "waiting_for_human"
        assert {k: v.status for k, v in before.steps.items()} == {
            "a": "done",
            "b": "done",
            "c": "done",
        }
        view = ow.approve("golden-v2", "w", edit={"path": str(target)})
    assert view.status == "done"
    assert [(s.id, s.status) for s in view.steps] == [
        ("a", "done"),
        ("b", "done"),
        ("c", "done"),
        ("w", "done"),
        ("z", "done"),
    ]
    assert target.read_text() == "golden"
    assert not (GOLDEN / "v2" / "out.txt").exists()


def test_a_schema_8_store_gets_the_api_run_columns_of_schema_9(tmp_path: Path) -> None:
    """The golden v2 store (schema 8, its API run table without pause points) opens, its
    run table gains the columns, and a run recorded on it keeps its pause points."""
    store = tmp_path / "v2"
    shutil.copytree(GOLDEN / "v2", store)
    url = f"sqlite:///{store / 'onward.db'}"
    with Onward(url) as ow:
        ow.store.threads.add_run("r1", "golden-v2", "onward", {}, pause_before=["verify"])
        [run] = ow.store.threads.runs("golden-v2")
    assert run.pause_before == ("verify",)
    assert run.from_checkpoint is None
    conn = sqlite3.connect(store / "onward.db")
    try:
        assert conn.execute(
            "SELECT value FROM onward_meta WHERE key='schema_version'"
        ).fetchone() == (str(STORE_SCHEMA_VERSION),)  # migrated on to the current schema
    finally:
        conn.close()
