"""A Postgres commit sent as one statement (checkpointing/onestatement.py) writes exactly
what the statements sent one by one in a transaction would, and is used only where it can."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from onward import Onward
from onward.checkpointing import onestatement
from onward.checkpointing.onestatement import MAX_PARAMS, one_statement, send
from onward.model.state import Plan, PlanStep
from tests.conftest import postgres_schema

EVENTS = "INSERT INTO ev (thread_id, kind, dedupe) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
CKPT = (
    "\n    INSERT INTO ck (thread_id, ns, id, body)\n    VALUES (%s, %s, %s, %s)\n"
    "    ON CONFLICT (thread_id, ns, id)\n    DO UPDATE SET\n        body = EXCLUDED.body;\n"
)
BLOBS = "INSERT INTO bl (k, v) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING"
PLAIN = "INSERT INTO pl (k, v) VALUES (%s, %s)"
SCHEMA = """
CREATE TABLE ev (id BIGSERIAL PRIMARY KEY, thread_id TEXT, kind TEXT, dedupe TEXT UNIQUE);
CREATE TABLE ck (thread_id TEXT, ns TEXT, id TEXT, body BYTEA, PRIMARY KEY (thread_id, ns, id));
CREATE TABLE bl (k TEXT PRIMARY KEY, v BYTEA);
CREATE TABLE pl (k TEXT NOT NULL, v BYTEA);
"""


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    with postgres_schema() as url, psycopg.connect(url, autocommit=True) as c:
        c.execute(SCHEMA)
        yield c


def contents(conn: psycopg.Connection[Any]) -> dict[str, list[Any]]:
    return {
        t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
        for t in ("ev", "ck", "bl", "pl")
    }


def in_sequence(conn: psycopg.Connection[Any], batch: list[Any]) -> None:
    with conn.transaction(), conn.cursor(binary=True) as cur:
        for sql, rows in batch:
            cur.executemany(sql, rows)


def as_one(conn: psycopg.Connection[Any], batch: list[Any]) -> None:
    joined = one_statement(batch)
    assert joined is not None
    send(conn, joined)


def reset(conn: psycopg.Connection[Any]) -> None:
    conn.execute("TRUNCATE ev, ck, bl, pl RESTART IDENTITY")


STEP = [
    (BLOBS, [("b1", b"\x00blob"), ("b2", b"x" * 300)]),
    (CKPT, [("T", "", "c1", b"one"), ("T", "", "c2", b"two")]),
    # Equal dedupe keys: DO NOTHING keeps the first, in sequence as in one statement;
    # serial ids follow the rows' order (the event log is read in id order).
    (EVENTS, [("T", "started", "d1"), ("T", "again", "d1"), ("T", "done", None)]),
    (PLAIN, [("p", None), ("q", b"")]),
]


def test_one_statement_writes_what_the_statements_in_sequence_write(
    conn: psycopg.Connection[Any],
) -> None:
    # Rows already there: a DO UPDATE replaces one, a DO NOTHING keeps one.
    existing = [(CKPT, [("T", "", "c1", b"old")]), (BLOBS, [("b1", b"kept")])]
    in_sequence(conn, existing)
    in_sequence(conn, STEP)
    expected = contents(conn)
    reset(conn)
    in_sequence(conn, existing)
    as_one(conn, STEP)
    assert contents(conn) == expected
    assert expected["ck"][0][3] == b"one"
    assert expected["bl"][0][1] == b"kept"
    assert [r[2] for r in expected["ev"]] == ["started", "done"]


def test_a_failing_statement_writes_none_of_its_rows(conn: psycopg.Connection[Any]) -> None:
    bad = [(BLOBS, [("b9", b"x")]), (PLAIN, [("k", b""), (None, b"")])]  # k is NOT NULL
    joined = one_statement(bad)
    assert joined is not None
    with pytest.raises(psycopg.Error):
        send(conn, joined)
    assert contents(conn)["bl"] == []


def test_the_text_joins_tables_and_repeats_rows_and_keeps_params_in_order() -> None:
    joined = one_statement([(BLOBS, [("a", b"1"), ("b", b"2")]), (PLAIN, [("c", b"3")])])
    assert joined is not None
    sql, params = joined
    assert sql == (
        "WITH w0 AS (INSERT INTO bl (k, v) VALUES ($1, $2), ($3, $4) ON CONFLICT (k) DO "
        "NOTHING) INSERT INTO pl (k, v) VALUES ($5, $6)"
    )
    assert params == ["a", b"1", "b", b"2", "c", b"3"]
    assert one_statement([(CKPT, [("T", "", "c", b"")])]) == (
        "INSERT INTO ck (thread_id, ns, id, body) VALUES ($1, $2, $3, $4) ON CONFLICT "
        "(thread_id, ns, id) DO UPDATE SET body = EXCLUDED.body",
        ["T", "", "c", b""],
    )


def test_a_large_commit_is_sent_as_written_not_reparsed_by_psycopg(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # psycopg converts %s placeholders with a regex over the whole text and caches that
    # only for statements of <= 4,096 bytes and <= 50 parameters: a step's joined insert
    # is larger, so it must carry Postgres's own $n placeholders and skip the conversion.
    rows = [(f"k{i}", b"v" * i) for i in range(60)]
    joined = one_statement([(BLOBS, rows), (PLAIN, [("p", b"")])])
    assert joined is not None
    sql, params = joined
    assert "%s" not in sql
    assert len(params) == 122
    assert [int(n) for n in re.findall(r"\$(\d+)", sql)] == list(range(1, 123))
    from psycopg import _queries  # the conversion it must not run (psycopg >= 3.2)

    converted: list[bytes] = []
    real = _queries._query2pg_nocache

    def counting(query: bytes, encoding: str) -> Any:
        converted.append(query)
        return real(query, encoding)

    monkeypatch.setattr(_queries, "_query2pg_nocache", counting)
    send(conn, joined)
    assert converted == []
    assert len(contents(conn)["bl"]) == 60


@pytest.mark.parametrize(
    ("why", "batch"),
    [
        ("a table twice", [(BLOBS, [("a", b"")]), (PLAIN, [("b", b"")]), (BLOBS, [("c", b"")])]),
        ("an update of one row twice", [(CKPT, [("T", "", "c", b"1"), ("T", "", "c", b"2")])]),
        ("not an insert", [("DELETE FROM bl WHERE k = %s", [("a",)])]),
        ("an insert that returns rows", [(PLAIN.replace(")", ") RETURNING k", 2), [("a", b"")])]),
        (
            "an update with no named key",
            [(f"{PLAIN} ON CONFLICT DO UPDATE SET v = 1", [("a", b"")])],
        ),
        ("a row of another width", [(PLAIN, [("a", b"", 3)])]),
        ("more parameters than it sends at once", [(PLAIN, [("k", b"")] * (MAX_PARAMS // 2 + 1))]),
        ("nothing to write", [(PLAIN, [])]),
    ],
)
def test_what_could_differ_is_sent_as_the_statements_instead(why: str, batch: Any) -> None:
    assert one_statement(batch) is None, why


def chain(n: int) -> Plan:
    steps = [PlanStep(id=f"s{i}", tool="noop", args={"value": i}) for i in range(n)]
    for prev, step in itertools.pairwise(steps):
        step.depends_on.append(prev.id)
    return Plan(steps=steps)


def stored(url: str, thread_id: str) -> dict[str, Any]:
    with psycopg.connect(url) as c:
        return {
            "checkpoints": c.execute(
                "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)
            ).fetchone(),
            "writes": c.execute(
                "SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s", (thread_id,)
            ).fetchone(),
            "events": c.execute(
                "SELECT kind, detail FROM onward_events WHERE thread_id = %s ORDER BY id",
                (thread_id,),
            ).fetchall(),
        }


def test_a_run_commits_each_step_as_one_statement_and_stores_what_the_pipeline_did(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[bool] = []

    def recording(statements: Any, fence: Any = None) -> Any:
        joined = one_statement(statements, fence)
        sent.append(joined is not None)
        return joined

    with postgres_schema() as url:
        monkeypatch.setattr(onestatement, "one_statement", recording)
        with Onward(url) as ow:
            assert ow.run(plan=chain(6), thread_id="one").status.value == "done"
        assert sent
        assert all(sent)
        monkeypatch.setattr(onestatement, "one_statement", lambda *_: None)
        with Onward(url) as ow:
            assert ow.run(plan=chain(6), thread_id="pipe").status.value == "done"
        one, pipe = stored(url, "one"), stored(url, "pipe")
    assert one["checkpoints"] == pipe["checkpoints"]
    assert one["writes"] == pipe["writes"]
    kinds = [kind for kind, _ in one["events"]]
    assert kinds == [kind for kind, _ in pipe["events"]]
    assert kinds.count("step_done") == 6
