"""A saver's commit on Postgres as one statement (``store.sql.batch_in_one``).

A commit of a plan step is a dozen rows of four tables; sent as a transaction in a
pipeline that was BEGIN, the fence check, one driver call per row and COMMIT. As one
statement each table's rows are one multi-row INSERT among data-modifying CTEs. These
tests hold that what lands in the tables is what the rows sent one by one would have
left, on a real server, and that what cannot be one statement is not made one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from onward.store.sql import MOST_PARAMS, batch_in_one
from tests.support.common import postgres_schema

KEYED = "INSERT INTO kv (k, v, n) VALUES (%s, %s, %s) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
FIRST_KEPT = "INSERT INTO kv (k, v, n) VALUES (%s, %s, %s) ON CONFLICT (k) DO NOTHING"
SERIAL = "INSERT INTO log (what) VALUES (%s)"
BUMP = "UPDATE counter SET n = n + %s WHERE id = 1;"


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    with postgres_schema() as url, psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE kv (k text PRIMARY KEY, v text, n int)")
        c.execute("CREATE TABLE log (id bigserial PRIMARY KEY, what text, note text)")
        c.execute("CREATE TABLE counter (id int PRIMARY KEY, n int)")
        c.execute("INSERT INTO counter VALUES (1, 0)")
        yield c


def tables(c: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "kv": c.execute("SELECT k, v, n FROM kv ORDER BY k").fetchall(),
        "log": c.execute("SELECT id, what FROM log ORDER BY id").fetchall(),
        "counter": c.execute("SELECT n FROM counter").fetchall(),
    }


def one_by_one(c: psycopg.Connection[Any], batch: list[tuple[str, list[tuple[Any, ...]]]]) -> None:
    with c.transaction():
        for sql, rows in batch:
            for row in rows:
                c.execute(sql, row)


def reset(c: psycopg.Connection[Any]) -> None:
    c.execute("TRUNCATE kv; TRUNCATE log RESTART IDENTITY; UPDATE counter SET n = 0")


def test_a_batch_of_three_tables_is_one_statement_that_leaves_what_its_rows_did(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("INSERT INTO kv VALUES ('a', 'old', 1)")
    batch = [
        (KEYED, [("a", "new", 9), ("b", "b1", 2), ("c", "c1", 3)]),
        (SERIAL, [("first",), ("second",), ("third",)]),
        (BUMP, [(5,)]),
    ]
    one = batch_in_one(batch)
    assert one is not None
    sql, params = one
    assert sql.count("INSERT INTO kv") == 1
    assert sql.count("INSERT INTO log") == 1
    assert len(params) == 3 * 3 + 3 + 1
    conn.execute(sql, params)
    got = tables(conn)
    reset(conn)
    conn.execute("INSERT INTO kv VALUES ('a', 'old', 1)")
    one_by_one(conn, batch)
    assert got == tables(conn)
    # the upsert kept the column it does not set; the serial ids follow the rows' order
    assert got["kv"][0] == ("a", "new", 1)
    assert [what for _, what in got["log"]] == ["first", "second", "third"]


def test_a_key_met_twice_keeps_the_first_row_where_nothing_is_updated(
    conn: psycopg.Connection[Any],
) -> None:
    batch = [(FIRST_KEPT, [("a", "first", 1), ("b", "b", 2), ("a", "second", 3)])]
    one = batch_in_one(batch)
    assert one is not None
    conn.execute(*one)
    assert tables(conn)["kv"] == [("a", "first", 1), ("b", "b", 2)]


def test_an_upsert_that_meets_its_key_twice_is_not_one_statement(
    conn: psycopg.Connection[Any],
) -> None:
    # One statement may not update a row twice (Postgres refuses it); in order, the
    # second row updates the first's.
    batch = [(KEYED, [("a", "first", 1), ("a", "second", 2)])]
    assert batch_in_one(batch) is None
    one_by_one(conn, batch)
    assert tables(conn)["kv"] == [("a", "second", 1)]


def test_two_statements_on_one_table_are_not_one_statement() -> None:
    # Their CTEs would run in no set order, each without seeing the other's rows.
    batch = [
        (SERIAL, [("x",)]),
        (FIRST_KEPT, [("a", "v", 1)]),
        (SERIAL.replace("what", "note"), [("y",)]),
    ]
    assert batch_in_one(batch) is None


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT pg_advisory_xact_lock(%s)",  # writes no table
        "WITH x AS (SELECT 1) INSERT INTO log (what) SELECT %s FROM x",  # a CTE of its own
        "INSERT INTO log (what) SELECT %s",  # no VALUES list to repeat
        "INSERT INTO log (what) VALUES (%s), (%s)",  # already several rows a call
    ],
)
def test_a_statement_it_cannot_repeat_row_by_row_leaves_the_batch_a_transaction(sql: str) -> None:
    rows = [(1,), (2,)] if sql.count("%s") == 1 else [(1, 2), (3, 4)]
    assert batch_in_one([(sql, rows), (BUMP, [(1,)])]) is None


def test_an_upsert_whose_keys_are_not_all_placeholders_is_not_made_one() -> None:
    sql = "INSERT INTO kv (k, v, n) VALUES (%s, 'v', %s) ON CONFLICT (k) DO UPDATE SET n = 1"
    assert batch_in_one([(sql, [("a", 1), ("b", 2)])]) is None


def test_a_batch_past_the_parameter_limit_is_left_a_transaction() -> None:
    rows = [(f"k{i}", "v", i) for i in range(MOST_PARAMS // 3 + 1)]
    assert batch_in_one([(FIRST_KEPT, rows)]) is None
    assert batch_in_one([(FIRST_KEPT, rows[:-1])]) is not None


def test_the_last_statement_is_the_one_whose_result_comes_back(
    conn: psycopg.Connection[Any],
) -> None:
    # The fence check is the statement's own SELECT: if it raises, nothing is written.
    fail = ("SELECT 1 / (%s - 1)", (1,))
    one = batch_in_one([(SERIAL, [("x",), ("y",)]), (BUMP, [(1,)])], fail)
    assert one is not None
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute(*one)
    assert tables(conn) == {"kv": [], "log": [], "counter": [(0,)]}
    one = batch_in_one([(SERIAL, [("x",), ("y",)]), (BUMP, [(1,)])], ("SELECT %s", (7,)))
    assert one is not None
    assert conn.execute(*one).fetchone() == (7,)
    assert tables(conn)["counter"] == [(1,)]
