"""The store on both backends: encryption at rest, retention, and clear errors for a store
that cannot be used (unreachable Postgres, a tampered artifact row, a wrong key)."""

from __future__ import annotations

import base64
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from onward import Onward
from onward.errors import ArtifactError, EncryptionKeyError, StoreError
from onward.model.state import Plan, PlanStep, RunStatus
from onward.store.database import Store
from onward.store.sql import Db, sqlite_path
from tests.support.common import PG_URL, postgres_schema
from tests.support.paths import SUPPORT

SECRET = "zebra-7Q-sapphire-secret"
KEY = base64.b64encode(os.urandom(32)).decode()
HITL_TOOLS = str(SUPPORT / "hitl_tools.py")


def secret_plan() -> Plan:
    """The secret in a step's args, in a file read into an artifact, in a notify message."""
    return Plan(
        steps=[
            PlanStep(
                id="write",
                tool="write_file",
                # Long enough that the file's artifact is a stored body, not inline.
                args={"path": "secret.txt", "content": f"the code is {SECRET}. " + "-" * 300},
            ),
            PlanStep(
                id="read",
                tool="read_file",
                args={"path": "secret.txt"},
                output="doc",
                depends_on=["write"],
            ),
            PlanStep(
                id="tell",
                tool="notify",
                args={"outbox": "outbox.jsonl", "message": f"sent {SECRET}"},
                depends_on=["read"],
            ),
        ]
    )


def stored_bytes(db_url: str) -> list[bytes]:
    """Everything the store holds, as bytes: SQLite's files (database, WAL, artifact bodies),
    or every value of every table in the Postgres schema, bytea columns raw."""
    if db_url.startswith("sqlite"):
        root = sqlite_path(db_url).parent
        return [p.read_bytes() for p in root.rglob("*") if p.is_file()]
    found: list[bytes] = []
    with psycopg.connect(db_url, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            )
        ]
        assert "onward_effects" in tables
        assert "checkpoint_blobs" in tables
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    found.append(value if isinstance(value, bytes) else str(value).encode())
    return found


def test_encrypted_store_holds_no_plaintext_and_needs_its_key(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONWARD_AES_KEY", f"base64:{KEY}")
    with Onward(db_url, model=None) as ow:
        view = ow.run(f"keep {SECRET} safe", plan=secret_plan())
        assert view.status is RunStatus.DONE
        tid = view.thread_id
        state = ow.state(tid)
        assert SECRET in str(ow.store.artifacts.get(state.artifacts["doc"]))
        assert SECRET in str(ow.store.ledger.for_thread(tid)[0].args)
    assert SECRET in (workdir / "secret.txt").read_text()  # the work itself is the user's
    blobs = stored_bytes(db_url)
    assert blobs
    assert not [b for b in blobs if SECRET.encode() in b]

    monkeypatch.setenv("ONWARD_AES_KEY", "another key of 32 bytes, exactly")
    with pytest.raises(EncryptionKeyError, match="not the key"):
        Onward(db_url, model=None)
    monkeypatch.delenv("ONWARD_AES_KEY")
    with pytest.raises(EncryptionKeyError, match="is encrypted; set ONWARD_AES_KEY"):
        Onward(db_url, model=None)
    monkeypatch.setenv("ONWARD_AES_KEY", "short")
    with pytest.raises(EncryptionKeyError, match="16, 24 or 32 bytes"):
        Onward(db_url, model=None)

    # The right key again: everything is there.
    monkeypatch.setenv("ONWARD_AES_KEY", f"base64:{KEY}")
    with Onward(db_url, model=None) as ow:
        assert ow.get(tid).status is RunStatus.DONE
        assert ow.state(tid).goal.objective == f"keep {SECRET} safe"  # type: ignore[union-attr]
        assert len(ow.timeline(tid)) > 3


def test_cli_reports_a_wrong_key_clearly(db_url: str, workdir: Path, run_cli: Any) -> None:
    key = {"ONWARD_AES_KEY": "0123456789abcdef"}
    done = run_cli("demo", "--json", env=key)
    assert done.code == 0, done.stderr
    tid = done.json()["thread_id"]
    wrong = run_cli("status", tid, env={"ONWARD_AES_KEY": "fedcba9876543210"})
    assert wrong.code == 2
    assert "ONWARD_AES_KEY is not the key" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    assert run_cli("status", tid, env=key).code == 0


def test_tampered_encrypted_artifact_is_reported(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONWARD_AES_KEY", "0123456789abcdef")
    with Onward(db_url, model=None) as ow:
        tid = ow.run(plan=secret_plan()).thread_id
        ref = ow.state(tid).artifacts["doc"]
        _flip_a_byte(ow.store, db_url, ref.sha256)
        with pytest.raises(ArtifactError, match="changed at rest"):
            ow.store.artifacts.get(ref)


def _flip_a_byte(store: Store, db_url: str, sha256: str) -> None:
    if db_url.startswith("sqlite"):
        path = Path(store.artifacts.location(sha256))
        body = bytearray(path.read_bytes())
        body[-1] ^= 1
        path.write_bytes(bytes(body))
        return
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(  # the last byte's lowest bit flipped: a change whatever the byte was
            "UPDATE onward_artifacts SET body = set_byte(body, length(body) - 1, "
            "get_byte(body, length(body) - 1) # 1) WHERE sha256 = %s",
            (sha256,),
        )


def test_tampered_artifact_row_on_postgres_is_reported(db_url: str, workdir: Path) -> None:
    with Onward(db_url, model=None) as ow:
        tid = ow.run(plan=secret_plan()).thread_id
        ref = ow.state(tid).artifacts["doc"]
        _flip_a_byte(ow.store, db_url, ref.sha256)
        with pytest.raises(ArtifactError, match=ref.sha256[:12]):
            ow.store.artifacts.get(ref)


def test_unreachable_postgres_is_a_clear_error(workdir: Path, run_cli: Any) -> None:
    url = "postgresql://postgres@127.0.0.1:1/nothing"
    with pytest.raises(StoreError, match="cannot reach the Postgres database"):
        Store(url)
    res = run_cli("list", db=url)
    assert res.code == 2
    assert "cannot reach the Postgres database postgresql://postgres@127.0.0.1:1" in res.stderr


def many_steps(tag: str, n: int = 15) -> Plan:
    return Plan(
        steps=[
            PlanStep(
                id=f"w{i}",
                tool="write_file",
                # A long path: write_file's output (path, bytes, sha256) is then a stored
                # body of this run's own, not inline in its ref.
                args={"path": f"{tag}/{'y' * 200}-{i}.txt", "content": f"{tag} {i} " + "x" * 2000},
            )
            for i in range(n)
        ]
        + [PlanStep(id="shared", tool="read_file", args={"path": "common.txt"})]
    )


def test_prune_removes_old_finished_runs_and_nothing_a_live_run_needs(
    db_url: str, workdir: Path
) -> None:
    (workdir / "common.txt").write_text("every run reads this " * 20)  # a stored body
    with Onward(db_url, model=None, tool_modules=[HITL_TOOLS]) as ow:
        old = [ow.run(plan=many_steps(f"old{i}")).thread_id for i in range(3)]
        newest = ow.run(plan=many_steps("new")).thread_id
        waiting = ow.run(
            plan=Plan(steps=[PlanStep(id="pay", tool="pay", args={"amount": 5, "to": "bo"})])
        ).thread_id
        resumable = ow.start(plan=many_steps("later"))
        assert ow.get(waiting).status is RunStatus.WAITING_FOR_HUMAN
        shared = ow.state(newest).artifacts
        assert ow.state(old[0]).steps["shared"].output == ow.state(newest).steps["shared"].output

        dry = ow.prune(timedelta(0), keep_last=1, dry_run=True)
        assert sorted(dry.removed) == sorted(old)
        assert all(ow.store.get_run(t) is not None for t in old)

        report = ow.prune(timedelta(0), keep_last=1)
        assert sorted(report.removed) == sorted(old)
        assert report.kept == 1
        assert report.skipped == 2
        assert report.rows > 0
        assert report.artifact_bytes > 0
        for tid in old:
            assert ow.store.get_run(tid) is None
            assert ow.store.events.list(tid) == []
            assert ow.store.ledger.for_thread(tid) == []
            assert list(ow.store.saver.list({"configurable": {"thread_id": tid}})) == []
        if db_url.startswith("sqlite"):
            assert report.db_bytes_after < report.db_bytes_before

        # What is left works: the kept run reads its artifacts (one body was shared with a
        # removed run), the waiting run takes its answer, the resumable run resumes.
        for ref in shared.values():
            ow.store.artifacts.get(ref)
        ow.store.artifacts.get(ow.state(newest).steps["shared"].output)  # type: ignore[arg-type]
        assert ow.approve(waiting, continue_run=True).status is RunStatus.DONE
        assert ow.resume(resumable).status is RunStatus.DONE
        assert ow.prune(timedelta(days=1)).removed == []


def test_prune_cli_dry_run_and_report(db_url: str, workdir: Path, run_cli: Any) -> None:
    tid = run_cli("demo", "--json").json()["thread_id"]
    dry = run_cli("prune", "--older-than", "0s", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert dry.json()["removed"] == [tid]
    assert run_cli("status", tid).code == 0
    done = run_cli("prune", "--older-than", "0s")
    assert done.code == 0, done.stderr
    assert "removed 1 finished runs" in done.stdout
    assert run_cli("status", tid).code == 2
    assert run_cli("prune", "--older-than", "soon").code == 2


def test_test_database_is_reachable() -> None:
    """CI must run the Postgres tests, never skip them."""
    with psycopg.connect(PG_URL, connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_transaction_lock_in_one_schema_does_not_block_another_schema() -> None:
    """Advisory-lock keys are per schema: stores sharing a database do not queue on each
    other's ``queue`` or ``breaker:`` locks, while two holders in one schema still do."""
    with postgres_schema() as url_a, postgres_schema() as url_b:
        holder, other_schema, same_schema = (Db.open(u) for u in (url_a, url_b, url_a))
        try:
            other_schema.execute("SET lock_timeout = '5s'")  # fail, not hang, if it waits
            with holder.transaction(lock="queue"):
                with other_schema.transaction(lock="queue"):
                    pass  # would wait for the holder if the key were database-wide
                same_schema.execute("SET lock_timeout = '200ms'")
                with pytest.raises(StoreError), same_schema.transaction(lock="queue"):
                    pass
        finally:
            for db in (holder, other_schema, same_schema):
                db.close()
