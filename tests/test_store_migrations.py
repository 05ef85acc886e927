"""The store's numbered migrations: one contiguous list, replayed from nothing it makes the
schema today's release made, each applied in its own transaction past the stored version,
and stores written by older releases (golden v1, v2, v3) migrate and resume."""

from __future__ import annotations

import inspect
import json
import shutil
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
from tests.conftest import PG_URL
from tests.store_schema import schema_of

GOLDEN = Path(__file__).resolve().parent / "golden"


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
        assert migration.sqlite, migration.number
        assert migration.postgres, migration.number


def test_a_new_store_has_the_schema_todays_release_made(db_url: str) -> None:
    """Every migration from 1 gives what the release before numbered migrations created
    (tests/golden/schema, dumped from it): same tables, columns, keys and indexes."""
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
    """The run of tests/golden/make_golden.py (a and b done) resumes to its end."""
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
    columns and indexes are the current ones. (tests/test_resume_consistency.py resumes
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
