"""What a step costs the store (issue 19): models without their defaults, short channel
versions, and the SQLite writes table keyed once — each reading back exactly what was
saved, and stores written the old way still loading."""

from __future__ import annotations

import sqlite3
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Send

from onward import Onward, Plan, PlanStep, RunStatus
from onward.checkpointing.format import COMPRESSED, COMPRESSED_1, ZDICT, inflate
from onward.checkpointing.savers import OnwardSqliteSaver
from onward.checkpointing.serde import checkpoint_serde
from onward.model.state import (
    ApproveTask,
    ArtifactRef,
    ExecuteTask,
    Goal,
    StepRecord,
    StepStatus,
    WaitKind,
)
from onward.observe.kinds import EventKind
from onward.policies.run import Deadline
from onward.store.database import STORE_SCHEMA_VERSION
from onward.verification.checks import FileExists, RowCount
from tests.support.common import postgres_schema


def _task() -> ExecuteTask:
    step = PlanStep(
        id="s1",
        tool="noop",
        args={"value": 1},
        checks=[FileExists(path="out.csv"), RowCount(min=1)],
    )
    ref = ArtifactRef(name="step:s0", uri="artifact://x", sha256="0" * 64, size=2)
    return ExecuteTask(
        step=step,
        record=StepRecord(id="s1", status=StepStatus.PENDING),
        inputs={"s0": ref},
        workdir="/w",
        wave=3,
    )


def test_a_task_with_defaults_and_checks_reads_back_equal_and_typed() -> None:
    serde = checkpoint_serde(None)
    goal = Goal(objective="o", acceptance=[FileExists(path="report.md")])
    value = {"__pregel_tasks": [Send("execute", _task())], "goal": goal}
    back = serde.loads_typed(serde.dumps_typed(value))
    assert back == value
    task = back["__pregel_tasks"][0].arg
    # The checks' discriminator is at its default, so it is not written: each check
    # still comes back as its own class.
    assert [type(c) for c in task.step.checks] == [FileExists, RowCount]
    assert type(back["goal"].acceptance[0]) is FileExists


def test_a_question_about_the_plan_reads_back_with_its_plan() -> None:
    # A plan inside a task is kept as plain values: LangGraph decodes a model's fields
    # with its own hook, which knows none of onward's lazy collections.
    serde = checkpoint_serde(None)
    plan = Plan(steps=[_task().step, PlanStep(id="s2", tool="noop", depends_on=["s1"])])
    task = ApproveTask(
        kind=WaitKind.PLAN,
        plan=plan,
        args_hash="h",
        asked_at=datetime(2026, 1, 2, tzinfo=UTC),
        deadline=Deadline(),
    )
    back = serde.loads_typed(serde.dumps_typed([Send("approve", task)]))[0].arg
    assert back == task
    assert back.plan is not None
    assert [s.id for s in back.plan.steps] == ["s1", "s2"]
    assert [type(c) for c in back.plan.steps[0].checks] == [FileExists, RowCount]


def test_fields_at_their_defaults_are_not_written() -> None:
    ours = checkpoint_serde(None).dumps_typed(_task())
    full = JsonPlusSerializer().dumps_typed(_task())
    assert b"approval_required" not in ours[1]
    assert b"approval_required" in full[1]
    assert len(ours[1]) < len(full[1])


def test_models_written_with_every_field_still_read() -> None:
    full = JsonPlusSerializer().dumps_typed({"task": _task()})
    assert checkpoint_serde(None).loads_typed(full) == {"task": _task()}


def test_sqlite_versions_count_up_and_order_after_older_suffixed_ones() -> None:
    saver = OnwardSqliteSaver.__new__(OnwardSqliteSaver)  # get_next_version reads no state
    first = saver.get_next_version(None, None)
    assert first == f"{1:032}"
    assert saver.get_next_version(first, None) > first
    older = f"{103:032}.0.23017743097189647"  # LangGraph's own format, in older stores
    assert saver.get_next_version(older, None) > older
    assert saver.get_next_version(older, None) == f"{104:032}"


def test_a_new_sqlite_store_keys_its_writes_once_and_runs(tmp_path: Path) -> None:
    db = tmp_path / "store" / "onward.db"
    plan = Plan(
        steps=[
            PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"])
            if i
            else PlanStep(id="s0", tool="noop", args={"value": 0})
            for i in range(3)
        ]
    )
    with Onward(f"sqlite:///{db}") as ow:
        view = ow.run(plan=plan, workdir=str(tmp_path))
    assert view.status == RunStatus.DONE
    conn = sqlite3.connect(db)
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'writes'").fetchone()
        indexes = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'writes'"
        ).fetchall()
        rows = conn.execute("SELECT count(*) FROM writes").fetchone()[0]
    finally:
        conn.close()
    assert "WITHOUT ROWID" in sql.upper()
    assert indexes == []  # the key is the table: no second copy of it
    assert rows > 0


def _wave_writes(db: Path) -> list[bytes]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT value FROM writes WHERE channel = 'wave'").fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


def test_a_chain_writes_its_wave_size_once_and_waves_still_join(tmp_path: Path) -> None:
    chain = tmp_path / "chain" / "onward.db"
    steps = [PlanStep(id="s0", tool="noop", args={"value": 0})]
    steps += [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"])
        for i in range(1, 6)
    ]
    with Onward(f"sqlite:///{chain}") as ow:
        assert ow.run(plan=Plan(steps=steps), workdir=str(tmp_path)).status == RunStatus.DONE
    # Only the run's input sets it: every lone step finds the state saying 1 already.
    assert len(_wave_writes(chain)) == 1

    # Waves of 2, then a lone step, then 2 again: each change of size is written, and
    # every step ends done (a lone step after a wave goes to verify, not to the gate).
    waves = tmp_path / "waves" / "onward.db"
    plan = Plan(
        steps=[
            PlanStep(id="a", tool="noop", args={"value": 1}),
            PlanStep(id="b", tool="noop", args={"value": 2}),
            PlanStep(id="c", tool="noop", args={"value": 3}, depends_on=["a", "b"]),
            PlanStep(id="d", tool="noop", args={"value": 4}, depends_on=["c"]),
            PlanStep(id="e", tool="noop", args={"value": 5}, depends_on=["c"]),
        ]
    )
    with Onward(f"sqlite:///{waves}") as ow:
        view = ow.run(plan=plan, workdir=str(tmp_path))
    assert view.status == RunStatus.DONE
    assert {s.id: s.status for s in view.steps} == dict.fromkeys("abcde", StepStatus.DONE)
    assert len(_wave_writes(waves)) > 1


def _chain(n: int) -> Plan:
    return Plan(
        steps=[
            PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"])
            if i
            else PlanStep(id="s0", tool="noop", args={"value": 0})
            for i in range(n)
        ]
    )


_OLD_EVENT_INDEXES = {
    12: {
        "onward_events_kind": "CREATE INDEX onward_events_kind "
        "ON onward_events (thread_id, kind, id)",
        "onward_events_once": "CREATE UNIQUE INDEX onward_events_once "
        "ON onward_events (thread_id, dedupe) WHERE dedupe IS NOT NULL",
    },
    13: {
        "onward_events_kind_once": "CREATE UNIQUE INDEX onward_events_kind_once "
        "ON onward_events (thread_id, kind, dedupe)",
    },
}
"""The event indexes of older store schemas (14 replaced them)."""
NEW_EVENT_INDEXES = {"onward_events_thread", "onward_events_attempt", "onward_events_unkeyed_kind"}
SAVER_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def _with_old_event_indexes(db: Any, version: int) -> None:
    """Put back the event indexes of store schema ``version`` (on a ``Db`` or a sqlite3
    connection) and mark the store as of that version."""
    db.execute("DROP INDEX onward_events_attempt")
    db.execute("DROP INDEX onward_events_unkeyed_kind")
    for sql in _OLD_EVENT_INDEXES[version].values():
        db.execute(sql)
    db.execute("UPDATE onward_meta SET value = ? WHERE key = 'schema_version'", (str(version),))


def _as_schema_12(db: Path) -> None:
    """Rewrite a store as onward wrote it at store schema 12: events indexed by (thread,
    kind, id) and (thread, dedupe key), and blobs deflated with the names-only dictionary."""
    conn = sqlite3.connect(db)
    try:
        _with_old_event_indexes(conn, 12)
        for table, column, key in (
            ("checkpoints", "checkpoint", "checkpoint_id"),
            ("writes", "value", "checkpoint_id || task_id || idx"),
        ):
            rows = conn.execute(
                f"SELECT {key}, {column} FROM {table} WHERE type = ?", (COMPRESSED,)
            ).fetchall()
            assert rows, f"the run wrote no compressed {table}"
            for id_, blob in rows:
                squeeze = zlib.compressobj(1, zdict=ZDICT)
                old = squeeze.compress(inflate(blob, COMPRESSED)) + squeeze.flush()
                conn.execute(
                    f"UPDATE {table} SET type = ?, {column} = ? WHERE {key} = ?",
                    (COMPRESSED_1, old, id_),
                )
        conn.commit()
    finally:
        conn.close()


def test_a_schema_12_store_opens_reads_and_goes_on_after_the_upgrade(tmp_path: Path) -> None:
    """Store schema 13: one index of events by (thread, kind, dedupe key), blobs deflated
    with the skeleton dictionary. A schema-12 store's state, events and dedupe keys read as
    they did, and a run on it goes on."""
    db = tmp_path / "store" / "onward.db"
    url = f"sqlite:///{db}"
    with Onward(url) as ow:
        thread = ow.start(plan=_chain(4), workdir=str(tmp_path))
        for event in ow.stream(thread):
            if event.kind == "step_done" and event.step_id == "s1":
                break
        state = ow.state(thread)
        events = [(e.kind, e.detail) for e in ow.store.events.list(thread)]
    _as_schema_12(db)

    with Onward(url) as ow:
        assert ow.state(thread).steps == state.steps
        assert [(e.kind, e.detail) for e in ow.store.events.list(thread)] == events
        done = ow.store.events.list(thread, [EventKind.STEP_DONE])
        assert [e.detail["step_id"] for e in done] == ["s0", "s1"]
        # An event logged again (a step re-run after a crash) is still dropped.
        ow.store.events.record_many(
            thread, [(done[0].at, "step_done", {"step_id": "s0"}, "step_done:s0:1")]
        )
        assert len(ow.store.events.list(thread, [EventKind.STEP_DONE])) == 2
        view = ow.resume(thread)
    assert view.status == RunStatus.DONE
    assert [s.status for s in view.steps] == [StepStatus.DONE] * 4

    conn = sqlite3.connect(db)
    try:
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'onward_events'"
            )
        }
        version = conn.execute(
            "SELECT value FROM onward_meta WHERE key='schema_version'"
        ).fetchone()
        step_done = conn.execute(
            "SELECT count(*) FROM onward_events WHERE kind = 'step_done'"
        ).fetchone()
        types = {r[0] for r in conn.execute("SELECT type FROM checkpoints")}
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM onward_events WHERE thread_id = ? "
            "AND kind IN ('run_suspended') AND dedupe IS NULL ORDER BY +id",
            (thread,),
        ).fetchall()
    finally:
        conn.close()
    assert indexes == NEW_EVENT_INDEXES
    assert version == (str(STORE_SCHEMA_VERSION),)
    assert step_done == (4,)
    assert types == {COMPRESSED_1, COMPRESSED}  # old blobs kept, new ones in the new form
    assert "onward_events_unkeyed_kind" in str(plan)  # kind lookups read only that kind's rows


def _event_indexes(ow: Onward) -> set[str]:
    with ow.store.db.use() as db:
        if db.postgres:
            rows = db.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'onward_events' "
                "AND schemaname = current_schema()"
            ).fetchall()
        else:
            rows = db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
                ("onward_events",),
            ).fetchall()
    return {str(r[0]) for r in rows} - {"onward_events_pkey"}


@pytest.mark.parametrize("version", [12, 13])
def test_the_event_indexes_of_an_older_store_are_replaced(
    db_url: str, workdir: Path, version: int
) -> None:
    with Onward(db_url) as ow:
        view = ow.run(plan=_chain(2), workdir=str(workdir))
        thread = view.thread_id
        with ow.store.db.use() as db:
            _with_old_event_indexes(db, version)
        assert _event_indexes(ow) == {"onward_events_thread", *_OLD_EVENT_INDEXES[version]}
    with Onward(db_url) as ow:
        assert _event_indexes(ow) == NEW_EVENT_INDEXES
        done = ow.store.events.list(thread, [EventKind.STEP_DONE])
        assert [e.detail["step_id"] for e in done] == ["s0", "s1"]
        again = (done[1].at, "step_done", {"step_id": "s1"}, "step_done:s1:1")
        ow.store.events.record_many(thread, [again])
        assert len(ow.store.events.list(thread, [EventKind.STEP_DONE])) == 2
        # Rows without a dedupe key never conflict with each other.
        ow.store.events.record(thread, EventKind.ADOPTED, {"n": 1})
        ow.store.events.record(thread, EventKind.ADOPTED, {"n": 2})
        assert len(ow.store.events.list(thread, [EventKind.ADOPTED])) == 2


SERVE_TABLES = {
    "onward_threads",
    "onward_api_runs",
    "onward_api_run_events",
    "onward_assistants",
    "onward_crons",
}


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}


def test_a_store_that_never_served_has_no_serve_tables_until_one_is_used(tmp_path: Path) -> None:
    """Their empty pages were a fifth of a 100-step run's store: a SQLite store makes the
    tables of `onward serve` on first use, and a run, its deletion and its API records work
    either side of that."""
    db = tmp_path / "o.db"
    with Onward(f"sqlite:///{db}", model=None) as ow:
        first = ow.start(plan=_chain(3), workdir=tmp_path)
        assert ow.resume(first).status is RunStatus.DONE
        assert not ow.store.serving()
        assert ow.store.delete_run(first)[0] > 0  # the tables it lacks are skipped
    assert not SERVE_TABLES & _tables(db)
    with Onward(f"sqlite:///{db}", model=None) as ow:
        assert ow.store.threads.get("t-api") is None  # first use: the tables appear
        assert ow.store.serving()
        assert ow.store.threads.create("t-api", None, {})
        second = ow.start(plan=_chain(2), workdir=tmp_path, thread_id="t-api")
        assert ow.resume(second).status is RunStatus.DONE
    assert _tables(db) >= SERVE_TABLES
    with Onward(f"sqlite:///{db}", model=None) as ow:
        assert ow.store.serving()  # another instance finds them
        ow.store.delete_run("t-api")
        assert ow.store.threads.get("t-api") is None


def test_a_postgres_store_keeps_no_second_index_on_thread_id(workdir: Path) -> None:
    """PostgresSaver's tables have a primary key that begins with thread_id; the extra
    thread_id index its migrations add cost a WAL record per row and served no lookup.
    A new store is made without them, an older one loses them, and what reads by thread
    (state, history, delete) goes on by the primary key."""
    with postgres_schema() as url:
        with Onward(url) as ow:
            thread = ow.run(plan=_chain(3), workdir=str(workdir)).thread_id
            assert _thread_indexes(ow) == set()
            with ow.store.db.use() as db:  # a store of schema 13, as LangGraph made it
                for table in SAVER_TABLES:
                    db.execute(f"CREATE INDEX {table}_thread_id_idx ON {table} (thread_id)")
                db.execute("UPDATE onward_meta SET value = '13' WHERE key = 'schema_version'")
            assert len(_thread_indexes(ow)) == 3
        with Onward(url) as ow:
            assert _thread_indexes(ow) == set()
            assert [r.status for r in ow.state(thread).steps.values()] == [StepStatus.DONE] * 3
            assert len(list(ow.history(thread))) > 3
            ow.store.delete_run(thread)
            with ow.store.db.use() as db:
                left = db.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread,))
                assert left.fetchone()[0] == 0


def _thread_indexes(ow: Onward) -> set[str]:
    with ow.store.db.use() as db:
        rows = db.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND indexname LIKE '%thread_id_idx'"
        ).fetchall()
    return {str(r[0]) for r in rows}


def test_a_new_postgres_store_opens_while_another_client_holds_a_snapshot() -> None:
    """Setting up PostgresSaver's tables used to run CREATE INDEX CONCURRENTLY, which waits
    for every transaction in the database that holds an older snapshot: a new store
    (a new schema) could not be opened while anyone kept a REPEATABLE READ transaction
    open. onward runs LangGraph's migrations without those indexes, recorded as done, so
    LangGraph's own setup() on the store later adds nothing."""
    import threading

    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from tests.support.common import PG_URL

    with psycopg.connect(PG_URL) as other, postgres_schema() as url:
        other.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        other.execute("SELECT 1")  # idle in a transaction that holds its snapshot
        opened: list[Exception | None] = []

        def open_store() -> None:
            try:
                with Onward(url) as ow:
                    ow.store  # noqa: B018  # opening it makes the store
                opened.append(None)
            except Exception as exc:  # reported below, with the snapshot released
                opened.append(exc)

        worker = threading.Thread(target=open_store, daemon=True)
        worker.start()
        worker.join(120)  # a guard against a hang, not a time limit on the open
        opened_meanwhile = bool(opened)  # before the other transaction ends
        other.rollback()
        worker.join(120)
        assert opened == [None]
        assert opened_meanwhile, "the store waited for another client's transaction"
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            PostgresSaver(conn).setup()  # LangGraph's own setup finds its migrations done
            versions = [r["v"] for r in conn.execute("SELECT v FROM checkpoint_migrations")]
        assert sorted(versions) == list(range(len(PostgresSaver.MIGRATIONS)))
        with Onward(url) as ow:
            assert _thread_indexes(ow) == set()


def _wal_pages(tmp_path: Path, steps: int) -> float:
    """Pages in the WAL after a chain of ``steps`` no-op steps on a new SQLite store (no
    WAL checkpoint runs before 1,000 pages, store/sql.py: 60 steps stay under them)."""
    db = tmp_path / f"wal-{steps}" / "onward.db"
    with Onward(f"sqlite:///{db}") as ow:
        ow.run(plan=_chain(steps), workdir=str(tmp_path))
        page = ow.store.conn.execute("PRAGMA page_size").fetchone()[0]
        size = db.with_name("onward.db-wal").stat().st_size
    return (size - 32) / (page + 24)  # the WAL header, then a 24-byte header per page


def test_a_plan_step_writes_a_few_wal_pages_not_one_per_event_kind(tmp_path: Path) -> None:
    """A step's one commit writes every page it changed. With the schema-13 index on
    (thread, kind, key) each of a step's four event kinds dirtied a page of its own:
    16.5 pages a step (measured between 50 and 150 steps). Store schema 14 keeps a step attempt's
    events side by side and event ids without AUTOINCREMENT: 12.9 (bench/overhead.py
    prints the count beside DBOS's)."""
    per_step = (_wal_pages(tmp_path, 60) - _wal_pages(tmp_path, 10)) / 50
    assert per_step <= 14.5, per_step


def test_event_ids_of_a_new_sqlite_store_grow_within_a_run_without_autoincrement(
    tmp_path: Path,
) -> None:
    """No sqlite_sequence row to rewrite in every commit; a run's ids still grow, also
    after the run holding the highest ids is deleted."""
    with Onward(f"sqlite:///{tmp_path / 'store' / 'onward.db'}") as ow:
        first = ow.run(plan=_chain(2), workdir=str(tmp_path)).thread_id
        second = ow.run(plan=_chain(2), workdir=str(tmp_path)).thread_id
        sql = ow.store.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'onward_events'")
        assert "AUTOINCREMENT" not in sql.fetchone()[0]
        before = [e.id for e in ow.store.events.list(first)]
        assert max(e.id for e in ow.store.events.list(second)) > max(before)
        ow.store.delete_run(second)  # the highest ids go
        ow.store.events.record(first, EventKind.RUN_RESUMED)
        ids = [e.id for e in ow.store.events.list(first)]
    assert ids[:-1] == before
    assert ids[-1] > max(before)
