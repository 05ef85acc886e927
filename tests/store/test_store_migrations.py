"""The store's numbered migrations: one contiguous list, replayed from nothing it makes the
schema today's release made, each applied in its own transaction past the stored version,
and stores written by older releases (golden v1, v2, v3) migrate and resume."""

from __future__ import annotations

import inspect
import json
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from onward import Onward
from onward.errors import StoreError
from onward.store import tables
from onward.store.database import STORE_SCHEMA_VERSION, Store
from onward.store.migrations import MIGRATIONS, RECORD_VERSION, SCHEMA_VERSION, serve_statements
from onward.store.postgres import PostgresStore
from onward.store.sql import Backend, Db, backend_of
from onward.store.sqlite import SqliteStore
from tests.support.common import PG_URL
from tests.support.paths import GOLDEN
from tests.support.store_schema import schema_of


def _reference(name: str) -> Any:
    return json.loads((GOLDEN / "schema" / f"{name}.json").read_text())


def _version(url: str) -> int:
    db = Db.open(url)
    try:
        return tables.schema_version(db)
    finally:
        db.close()


def _store_at(url: str, version: int) -> None:
    """A store as a release at ``version`` left it: migrations 1..``version`` applied (the
    checkpointer's tables come with the first later migration)."""
    if backend_of(url) is Backend.SQLITE:
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    db = Db.open(url)
    try:
        for migration in MIGRATIONS[:version]:
            with db.transaction():
                for statement in migration.statements(db.backend):
                    db.execute(statement)
                db.execute(RECORD_VERSION, (str(migration.number),))
    finally:
        db.close()


def test_migrations_are_numbered_contiguously_from_one() -> None:
    assert [m.number for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert SCHEMA_VERSION == STORE_SCHEMA_VERSION == tables.SCHEMA_VERSION == len(MIGRATIONS)
    for migration in MIGRATIONS:
        assert migration.description
        # One backend may have nothing to change (16: SQLite locks threads in a file).
        assert migration.sqlite or migration.postgres, migration.number


def test_a_new_store_has_the_schema_todays_release_made(db_url: str) -> None:
    """Every migration from 1 gives what the release before numbered migrations created
    (tests/store/golden/schema, dumped from it): same tables, columns, keys and indexes."""
    Store(db_url).close()
    name = "sqlite" if backend_of(db_url) is Backend.SQLITE else "postgres"
    assert schema_of(db_url) == _reference(name)
    assert _version(db_url) == SCHEMA_VERSION


def test_a_sqlite_store_makes_the_serve_tables_on_first_use_as_before(sqlite_url: str) -> None:
    with Store(sqlite_url) as store:
        assert not store.serving()
        assert store.threads.runs("nothing") == []
        assert store.serving()
    assert schema_of(sqlite_url) == _reference("sqlite-served")
    assert serve_statements(Backend.SQLITE)  # what made them: the serve migrations


def test_a_store_at_each_older_version_migrates_to_the_same_schema(db_url: str) -> None:
    """A store left at any version (its serve tables made, as a release that served left
    them) reaches the schema a new store has."""
    name = "sqlite-served" if backend_of(db_url) is Backend.SQLITE else "postgres"
    for version in (1, 6, 8, 12, 14):
        url = _fresh(db_url, version)
        _store_at(url, version)
        with Store(url) as store:
            store.threads.runs("nothing")
        assert _version(url) == SCHEMA_VERSION, version
        assert schema_of(url) == _reference(name), version


def _fresh(db_url: str, tag: int) -> str:
    """Another empty store beside ``db_url`` (SQLite: a file; Postgres: a schema, dropped
    with the test's by :func:`_schemas`)."""
    if backend_of(db_url) is Backend.SQLITE:
        return db_url.replace("onward.db", f"v{tag}/onward.db")
    schema = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    _CREATED.append(schema)
    return f"{PG_URL}?options=-csearch_path%3D{schema}"


_CREATED: list[str] = []


@pytest.fixture(autouse=True)
def _schemas() -> Iterator[None]:
    yield
    while _CREATED:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {_CREATED.pop()} CASCADE")


def test_a_failed_migration_leaves_the_store_at_the_last_one_that_committed(
    db_url: str,
) -> None:
    """From schema 12: migration 13 commits; 14 fails (two events its unique index cannot
    tell apart, which 13's could), rolls back alone, and the store says what failed."""
    _store_at(db_url, 12)
    db = Db.open(db_url)
    try:
        for key in ("a:1", "b:1"):
            db.execute(
                "INSERT INTO onward_events (thread_id, at, kind, dedupe) VALUES ('t', '', 'k', ?)",
                (key,),
            )
    finally:
        db.close()
    with pytest.raises(StoreError, match="cannot use the database"):
        Store(db_url)
    assert _version(db_url) == 13
    indexes = schema_of(db_url)["indexes"]
    names = {row[0] for row in indexes} if _pg(db_url) else set(indexes)
    assert "onward_events_kind_once" in names  # migration 13 committed
    assert "onward_events_attempt" not in names  # 14 did not, not even in part
    assert "onward_events_once" not in names


def test_a_column_an_older_release_added_without_recording_its_version_is_kept(
    db_url: str,
) -> None:
    """Releases before numbered migrations did not use a transaction per version: a store
    may hold a column of a version it never recorded. Its migration skips that column."""
    _store_at(db_url, 14)
    db = Db.open(db_url)
    try:
        db.execute("ALTER TABLE onward_leases ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0")
    finally:
        db.close()
    Store(db_url).close()
    assert _version(db_url) == SCHEMA_VERSION


def _pg(url: str) -> bool:
    return backend_of(url) is Backend.POSTGRES


def test_a_store_written_by_a_newer_onward_is_refused_and_left_alone(
    db_url: str, workdir: Path, run_cli: Any
) -> None:
    Store(db_url).close()
    db = Db.open(db_url)
    try:
        db.execute(RECORD_VERSION, (str(SCHEMA_VERSION + 1),))
    finally:
        db.close()
    with pytest.raises(StoreError, match=f"newer onward \\(store schema {SCHEMA_VERSION + 1}"):
        Store(db_url)
    res = run_cli("list")
    assert res.code == 2
    assert "upgrade onward to use it" in res.stderr
    assert "Traceback" not in res.stderr
    assert _version(db_url) == SCHEMA_VERSION + 1


def _resume_golden_thread(url: str) -> None:
    """The run of tests/store/golden/make_golden.py (a and b done) resumes to its end."""
    with Onward(url) as ow:
        before = ow.state("golden-thread")
        assert {k: v.status for k, v in before.steps.items()} == {"a": "done", "b": "done"}
        view = ow.resume("golden-thread")
    assert view.status == "done"
    assert [(s.id, s.status, s.attempts) for s in view.steps] == [
        ("a", "done", 1),
        ("b", "done", 1),
        ("c", "done", 1),
        ("d", "done", 1),
    ]


def test_golden_v3_sqlite_store_of_todays_release_opens_and_resumes(tmp_path: Path) -> None:
    shutil.copytree(GOLDEN / "v3", tmp_path / "v3")
    url = f"sqlite:///{tmp_path / 'v3' / 'onward.db'}"
    assert _version(url) == 15
    _resume_golden_thread(url)
    assert _version(url) == SCHEMA_VERSION


def test_golden_v3_postgres_store_of_todays_release_opens_and_resumes() -> None:
    """A pg_dump of a Postgres store the release of schema 15 wrote, loaded into a schema
    of its own."""
    schema = f"g_{uuid.uuid4().hex[:12]}"
    lines = (GOLDEN / "v3" / "postgres.sql").read_text().splitlines()
    dump = "\n".join(line for line in lines if not line.startswith("\\"))
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(dump.replace("golden_schema", schema).encode())
    _CREATED.append(schema)
    url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    assert _version(url) == 15
    _resume_golden_thread(url)
    assert _version(url) == SCHEMA_VERSION


@pytest.mark.parametrize("golden", ["v1", "v2"])
def test_golden_sqlite_stores_of_older_releases_migrate_to_the_current_schema(
    golden: str, tmp_path: Path
) -> None:
    """Golden v1 (schema 3) and v2 (schema 8, serve tables made) reach the current
    version; their older layouts stay (rowid tables, AUTOINCREMENT event ids), their
    columns and indexes are the current ones. (tests/store/test_resume_consistency.py resumes
    their runs.)"""
    shutil.copytree(GOLDEN / golden, tmp_path / golden)
    url = f"sqlite:///{tmp_path / golden / 'onward.db'}"
    with Store(url) as store:
        store.threads.runs("nothing")
    assert _version(url) == SCHEMA_VERSION
    found, new = schema_of(url), _reference("sqlite-served")
    assert set(found["indexes"]) == set(new["indexes"])
    for name, table in new["tables"].items():
        # name, type, default, key (a WITHOUT ROWID table's key is NOT NULL besides)
        assert _columns(found["tables"][name]) == _columns(table), name


def _columns(table: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(c[1], c[2], c[4], c[5]) for c in table["columns"]]


def test_the_base_store_has_no_branch_on_the_backend(db_url: str) -> None:
    """What differs lives in SqliteStore / PostgresStore; ``Store(url)`` picks one."""
    source = inspect.getsource(Store)
    for branch in ("Backend.", ".postgres", "backend is", "isinstance("):
        assert branch not in source, branch
    expected = SqliteStore if backend_of(db_url) is Backend.SQLITE else PostgresStore
    with Store(db_url) as store:
        assert type(store) is expected
        assert store.backend is backend_of(db_url)


def _golden_on_postgres(golden: str, url: str, version: int, tmp_path: Path) -> None:
    """The golden SQLite store ``golden`` (at schema ``version``) as a Postgres store of
    that release: onward's tables at ``version`` with the golden rows as written, and the
    checkpoints copied through LangGraph's PostgresSaver."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from onward.checkpointing.serde import checkpoint_serde

    _store_at(url, version)
    source = sqlite3.connect(f"{(GOLDEN / golden / 'onward.db').as_uri()}?mode=ro", uri=True)
    db = Db.open(url)
    try:
        names = source.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'onward_%'"
        ).fetchall()
        for (table,) in names:
            rows = source.execute(f"SELECT * FROM {table}").fetchall()
            if rows and table != "onward_meta":
                marks = ", ".join("?" * len(rows[0]))
                db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        db.execute("SELECT setval('onward_events_id_seq', (SELECT max(id) FROM onward_events))")
    finally:
        db.close()
        source.close()
    shutil.copytree(GOLDEN / golden, tmp_path / golden)
    with (
        Onward(f"sqlite:///{tmp_path / golden / 'onward.db'}") as ow,
        psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn,
    ):
        target = PostgresSaver(conn, serde=checkpoint_serde(None))
        target.setup()
        for found in reversed(list(ow.store.saver.list(None))):
            configurable = found.config["configurable"]
            parent = found.parent_config or {"configurable": {}}
            config: Any = {
                "configurable": {
                    "thread_id": configurable["thread_id"],
                    "checkpoint_ns": configurable.get("checkpoint_ns", ""),
                    **(
                        {"checkpoint_id": parent["configurable"]["checkpoint_id"]}
                        if found.parent_config
                        else {}
                    ),
                }
            }
            saved = target.put(
                config, found.checkpoint, found.metadata, found.checkpoint["channel_versions"]
            )
            by_task: dict[str, list[tuple[str, Any]]] = {}
            for task_id, channel, value in found.pending_writes or ():
                by_task.setdefault(task_id, []).append((channel, value))
            for task_id, writes in by_task.items():
                target.put_writes(saved, writes, task_id)


@pytest.mark.parametrize(("golden", "version"), [("v1", 3), ("v2", 8)])
def test_golden_stores_of_older_releases_migrate_and_resume_on_postgres(
    golden: str, version: int, tmp_path: Path, workdir: Path
) -> None:
    """Golden v1 and v2 as Postgres stores of their releases: migrated, their runs go on."""
    url = _fresh(PG_URL, version)
    _golden_on_postgres(golden, url, version, tmp_path)
    assert _version(url) == version
    with Onward(url) as ow:
        for body in (GOLDEN / golden).glob("artifacts/*/*"):  # files, in a release this old
            ow.store.artifacts.write_body(body.parent.name + body.name, body.read_bytes())
        if golden == "v1":
            view = ow.resume("golden-thread")
            assert [(s.id, s.status) for s in view.steps] == [(step, "done") for step in "abcd"]
        else:
            target = tmp_path / "written.txt"
            view = ow.approve("golden-v2", "w", edit={"path": str(target)})
            assert target.read_text() == "golden"
        assert view.status == "done"
    assert _version(url) == SCHEMA_VERSION
    assert schema_of(url) == _reference("postgres")
