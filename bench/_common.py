"""Shared by the bench scripts (run as ``python bench/NAME.py``, so this is importable)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from onward import Plan, PlanStep

PG_URL = os.environ.get("ONWARD_BENCH_PG") or "postgresql://postgres@127.0.0.1:5432/test"
"""The Postgres the benches use ($ONWARD_BENCH_PG); each run gets a fresh schema in it."""


@contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh schema (dropped afterwards); the URL selects it through search_path."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def chain_plan(n: int) -> Plan:
    """N noop steps, each depending on the previous one."""
    return Plan(
        steps=[
            PlanStep(
                id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else []
            )
            for i in range(n)
        ]
    )


def write_json(path: Path | None, rows: list[dict[str, Any]]) -> None:
    """The script's results for ``run_all.py``: one row per ratio, with its target."""
    if path is not None:
        path.write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")
