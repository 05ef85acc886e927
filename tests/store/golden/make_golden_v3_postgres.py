"""Writes golden store v3 on Postgres: the run of ``make_golden.py`` stopped mid-way, as the
release of 2026-12-06 (store schema 15, commit c00d5f6) saves it, dumped with
``pg_dump --inserts`` into ``v3/postgres.sql`` with its schema named ``golden_schema``
(a test loads it into a schema of its own). Run once; never regenerate it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

from onward import Onward

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_golden import THREAD, plan  # noqa: E402

SERVER = "postgresql://postgres@127.0.0.1:5432/test"
PLACEHOLDER = "golden_schema"


def main() -> None:
    out = HERE / "v3" / "postgres.sql"
    if out.exists():
        raise SystemExit(f"{out} exists: golden stores are never regenerated")
    schema = f"golden_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        url = f"{SERVER}?options=-csearch_path%3D{schema}"
        with Onward(url) as ow:
            ow.start(goal="golden run", plan=plan(), workdir=HERE / "v3", thread_id=THREAD)
            for event in ow.stream(THREAD):
                if event.kind == "step_done" and event.step_id == "b":
                    break  # stop mid-way: a and b done, c and d pending
        dump = subprocess.run(
            ["pg_dump", "--inserts", "--no-owner", "--no-privileges", f"--schema={schema}", SERVER],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    out.write_text(dump.replace(schema, PLACEHOLDER))


if __name__ == "__main__":
    main()
