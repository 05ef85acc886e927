"""Artifact bodies are verified against their sha256 on every read.

A body edited, truncated or deleted on disk between the step that produced it and
the step that consumes it fails the consumer with a message that names the
artifact and says what happened; the run's saved state is not touched.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from onward import (
    ArtifactError,
    FailureClass,
    Onward,
    Plan,
    PlanStep,
    Registry,
    RunStatus,
    StepStatus,
    default_registry,
    tool,
)
from onward.policies.run import RunPolicy
from onward.store.artifacts import INLINE_LIMIT, ArtifactStore, canonical_json
from onward.store.database import sqlite_path

VALUE = {"orders": list(range(100)), "note": "produced by step 1"}
"""Large enough to be stored as a body (smaller values ride in their ref)."""
assert len(canonical_json(VALUE)) > INLINE_LIMIT

FAIL_FAST = RunPolicy(escalate_failures=False)  # a failed step fails the run here


def body_path(artifacts_dir: Path, value: Any) -> Path:
    """Where the store keeps a value's body: ``artifacts/<sha[:2]>/<sha[2:]>``."""
    sha = hashlib.sha256(canonical_json(value)).hexdigest()
    return artifacts_dir / sha[:2] / sha[2:]


@pytest.fixture
def registry() -> Registry:
    """The built-in tools plus one that damages an artifact body the way a user might."""
    reg = Registry(default_registry)

    @tool(registry=reg)
    def tamper(target: Any, artifacts_dir: str, how: str) -> dict[str, Any]:
        """Edit, truncate or delete the stored body of ``target`` (an artifact's value)."""
        path = body_path(Path(artifacts_dir), target)
        body = path.read_bytes()
        if how == "edit":
            path.write_bytes(body.replace(b"produced", b"PRODUCED"))
        elif how == "truncate":
            path.write_bytes(body[: len(body) // 2])
        else:
            path.unlink()
        return {"tampered": str(path), "how": how}

    return reg


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """These tests edit artifact files on disk: the SQLite store's (Postgres keeps bodies in
    a table; its tamper test is in test_store_backends.py)."""
    return sqlite_url


@pytest.fixture
def artifacts_dir(db_url: str) -> Path:
    return sqlite_path(db_url).parent / "artifacts"


def tamper_plan(artifacts_dir: Path, how: str) -> Plan:
    return Plan(
        steps=[
            PlanStep(id="produce", tool="noop", args={"value": VALUE}, output="data"),
            PlanStep(
                id="tamper",
                tool="tamper",
                args={"target": "${data}", "artifacts_dir": str(artifacts_dir), "how": how},
                depends_on=["produce"],
            ),
            PlanStep(
                id="consume",
                tool="noop",
                args={"value": "${data}"},
                depends_on=["tamper"],
                output="copy",
            ),
        ]
    )


@pytest.mark.parametrize("how", ["edit", "truncate"])
def test_consumer_of_an_artifact_changed_on_disk_fails_naming_the_artifact(
    registry: Registry, db_url: str, workdir: Path, artifacts_dir: Path, how: str
) -> None:
    with Onward(db_url, registry=registry) as ow:
        view = ow.run(plan=tamper_plan(artifacts_dir, how), policy=FAIL_FAST)

    assert view.status is RunStatus.FAILED
    by_id = {s.id: s for s in view.steps}
    consume = by_id["consume"]
    assert consume.status is StepStatus.FAILED
    assert consume.failure_class == FailureClass.DETERMINISTIC
    assert consume.error is not None
    assert "artifact 'data'" in consume.error
    assert "changed on disk" in consume.error
    assert "re-run the step that produces it" in consume.error
    assert view.failure is not None
    assert view.failure.step_id == "consume"
    assert "changed on disk" in view.failure.message
    assert "copy" not in view.artifacts


@pytest.mark.parametrize("how", ["edit", "delete"])
def test_saved_state_stays_intact_when_an_artifact_body_is_damaged(
    registry: Registry, db_url: str, workdir: Path, artifacts_dir: Path, how: str
) -> None:
    with Onward(db_url, registry=registry) as ow:
        tid = ow.run(plan=tamper_plan(artifacts_dir, how), policy=FAIL_FAST).thread_id
        produced = ow.get(tid).artifacts["data"]

    with Onward(db_url, registry=registry) as reopened:
        view = reopened.get(tid)
        state = reopened.state(tid)

    assert view.status is RunStatus.FAILED
    assert [(s.id, s.status) for s in view.steps] == [
        ("produce", StepStatus.DONE),
        ("tamper", StepStatus.DONE),
        ("consume", StepStatus.FAILED),
    ]
    assert state.steps["produce"].attempts == 1
    assert state.steps["tamper"].attempts == 1
    assert state.artifacts["data"] == produced
    assert produced.sha256 == hashlib.sha256(canonical_json({"value": VALUE})).hexdigest()


def test_consumer_of_a_deleted_artifact_body_fails_saying_it_is_missing(
    registry: Registry, db_url: str, workdir: Path, artifacts_dir: Path
) -> None:
    with Onward(db_url, registry=registry) as ow:
        view = ow.run(plan=tamper_plan(artifacts_dir, "delete"), policy=FAIL_FAST)

    assert view.status is RunStatus.FAILED
    consume = {s.id: s for s in view.steps}["consume"]
    assert consume.status is StepStatus.FAILED
    assert consume.error is not None
    assert "artifact 'data' is missing from the artifact store" in consume.error
    assert str(body_path(artifacts_dir, {"value": VALUE})) in consume.error


def test_reading_an_edited_body_raises_with_both_hashes(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    ref = store.put("data", VALUE)
    path = body_path(store.root, VALUE)
    path.write_bytes(canonical_json({**VALUE, "note": "edited"}))
    actual = hashlib.sha256(path.read_bytes()).hexdigest()

    with pytest.raises(ArtifactError, match="changed on disk") as info:
        store.get(ref)

    message = str(info.value)
    assert "artifact 'data'" in message
    assert ref.sha256[:12] in message
    assert actual[:12] in message
    assert str(path) in message


def test_reading_a_missing_body_says_missing_and_what_to_do(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    ref = store.put("data", VALUE)
    body_path(store.root, VALUE).unlink()

    with pytest.raises(ArtifactError, match="missing") as info:
        store.get(ref)

    message = str(info.value)
    assert "artifact 'data' is missing from the artifact store" in message
    assert "re-run the step that produces it" in message


def test_intact_body_reads_back_the_stored_value(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    ref = store.put("data", VALUE)

    assert body_path(store.root, VALUE).read_bytes() == canonical_json(VALUE)
    assert ref.size == len(canonical_json(VALUE))
    assert store.get(ref) == VALUE


def test_a_small_value_rides_in_its_ref_and_writes_no_body(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    small = {"value": 7}
    ref = store.put("small", small)

    assert ref.body == canonical_json(small).decode()
    assert ref.sha256 == hashlib.sha256(canonical_json(small)).hexdigest()
    assert not (tmp_path / "artifacts").exists()
    assert store.get(ref) == small


def test_a_changed_inline_body_raises_naming_the_artifact(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    ref = store.put("small", {"value": 7})
    edited = ref.model_copy(update={"body": canonical_json({"value": 8}).decode()})

    with pytest.raises(ArtifactError, match="changed in the run's saved state") as info:
        store.get(edited)
    assert "artifact 'small'" in str(info.value)
    assert ref.sha256[:12] in str(info.value)
