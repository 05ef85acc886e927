"""A store's schema as plain data, comparable across ways of making it.

SQLite: each table's columns (``PRAGMA table_xinfo``), whether it is ``WITHOUT ROWID`` or
``AUTOINCREMENT``, and each index's statement (whitespace collapsed). Postgres: the
columns, indexes, constraints, sequences and functions of the URL's schema (its name
replaced by ``S``). A column added later by ``ALTER TABLE`` compares equal to one made by
``CREATE TABLE`` in the same place: the SQL text SQLite keeps differs, the table does not.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Any

from onward.store.sql import Backend, backend_of, sqlite_path

Schema = dict[str, Any]


def schema_of(url: str) -> Schema:
    """The schema of the store at ``url`` (which must exist)."""
    if backend_of(url) is Backend.SQLITE:
        return sqlite_schema(sqlite_path(url).expanduser().absolute())
    return postgres_schema(url)


def _squash(sql: str) -> str:
    sql = re.sub(r"\s+", " ", sql).strip()
    return sql.replace("IF NOT EXISTS ", "")


def sqlite_schema(path: Path) -> Schema:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        tables: dict[str, Any] = {}
        indexes: dict[str, str] = {}
        for kind, name, sql in rows:
            if kind == "table":
                columns = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()
                tables[name] = {
                    "columns": [list(c) for c in columns],
                    "without_rowid": "WITHOUT ROWID" in (sql or "").upper(),
                    "autoincrement": "AUTOINCREMENT" in (sql or "").upper(),
                }
            elif kind == "index" and sql is not None:  # autoindexes follow the tables
                indexes[name] = _squash(sql)
    finally:
        conn.close()
    return {"tables": tables, "indexes": indexes}


_PG_QUERIES = {
    "columns": (
        "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, "
        "column_default FROM information_schema.columns WHERE table_schema = current_schema() "
        "ORDER BY table_name, ordinal_position"
    ),
    "indexes": (
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
        "ORDER BY indexname"
    ),
    "constraints": (
        "SELECT table_name, constraint_name, constraint_type FROM "
        "information_schema.table_constraints WHERE table_schema = current_schema() "
        "AND constraint_type <> 'CHECK' ORDER BY table_name, constraint_name"
    ),
    "sequences": (
        "SELECT sequence_name, data_type FROM information_schema.sequences "
        "WHERE sequence_schema = current_schema() ORDER BY sequence_name"
    ),
    "functions": (
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = current_schema() ORDER BY p.proname"
    ),
}


def postgres_schema(url: str) -> Schema:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()
        assert schema is not None
        name = str(schema[0])
        found: Schema = {}
        for key, query in _PG_QUERIES.items():
            rows = conn.execute(query).fetchall()
            found[key] = [[_unschema(v, name) for v in row] for row in rows]
    found["functions"] = [
        [proname, hashlib.sha256(src.encode()).hexdigest()[:16]]
        for proname, src in found["functions"]
    ]
    return found


def _unschema(value: Any, schema: str) -> Any:
    return value.replace(f"{schema}.", "S.") if isinstance(value, str) else value
