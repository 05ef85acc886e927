"""A saver's commit on Postgres, sent as one query of several statements (its parameters
bound by psycopg on the client) or, with large blobs, as a pipeline of bound statements:
either way the rows hold exactly the values given, the transaction is all or nothing, and
a failed fence writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from onward import Onward
from onward.checkpointing import savers
from onward.checkpointing.savers import ONE_QUERY_BYTES, Statements, _send
from onward.errors import FencedOut
from onward.store.leases import Fence
from tests.support.common import postgres_schema

AWKWARD_TEXTS = [
    "plain",
    'it\'s "quoted" and back\\slashed',
    "a line\n;\nCOMMIT\n;\nDROP TABLE kept\n;\n-- and a comment",
    "%s %(name)s %% $1 ?",
    "ünïcödé ✓ 𝄞",
    "",
    "/* not closed",
]
AWKWARD_BLOBS = [b"", b"\x00\x01\x02'\\\n;\n", bytes(range(256)), b"x" * 1000]


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection (as the pool's) to a fresh schema with onward's tables."""
    with postgres_schema() as url:
        with Onward(url, model=None) as ow:
            ow.store  # noqa: B018  # migrates: onward_leases and onward_fence
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE TABLE kept (n INT, t TEXT, b BYTEA, j JSONB, nothing TEXT)")
            yield c


INSERT = "INSERT INTO kept (n, t, b, j, nothing) VALUES (%s, %s, %s, %s, %s)"


def awkward_rows(base: int) -> list[tuple[Any, ...]]:
    return [
        (base + i, text, blob, Jsonb({"text": text, "list": [i, None, 1.5]}), None)
        for i, (text, blob) in enumerate(zip(AWKWARD_TEXTS, AWKWARD_BLOBS * 2, strict=False))
    ]


def kept(conn: psycopg.Connection[Any], at_least: int, below: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT n, t, b, j, nothing FROM kept WHERE n >= %s AND n < %s ORDER BY n",
        (at_least, below),
    ).fetchall()


def as_stored(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [(n, t, b, j.obj, x) for n, t, b, j, x in rows]


def test_a_commit_as_one_query_stores_every_value_as_given(
    conn: psycopg.Connection[Any],
) -> None:
    rows = awkward_rows(0)
    _send(conn, [(INSERT, rows)], pipelined=True)
    assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
    assert kept(conn, 0, 100) == as_stored(rows)


def test_the_same_commit_as_a_pipeline_stores_the_same(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _send(conn, [(INSERT, awkward_rows(0))], pipelined=True)
    monkeypatch.setattr(savers, "ONE_QUERY_BYTES", -1)
    _send(conn, [(INSERT, awkward_rows(100))], pipelined=True)
    _send(conn, [(INSERT, awkward_rows(200))], pipelined=False)
    one_query = kept(conn, 0, 100)
    assert [r[1:] for r in kept(conn, 100, 200)] == [r[1:] for r in one_query]
    assert [r[1:] for r in kept(conn, 200, 300)] == [r[1:] for r in one_query]


def test_large_blobs_are_sent_bound_and_stored_whole(conn: psycopg.Connection[Any]) -> None:
    big = bytes(range(256)) * (ONE_QUERY_BYTES // 256 + 1)
    _send(conn, [(INSERT, [(1, "big", big, Jsonb({}), None)])], pipelined=True)
    assert kept(conn, 1, 2) == [(1, "big", big, {}, None)]


def test_a_failing_statement_leaves_none_of_the_commit(conn: psycopg.Connection[Any]) -> None:
    statements: Statements = [
        (INSERT, awkward_rows(0)),
        ("INSERT INTO kept (n) VALUES (%s)", [(1,), ("not a number",)]),
    ]
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        _send(conn, statements, pipelined=True)
    assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
    assert kept(conn, 0, 1000) == []


def test_a_commit_whose_fence_fails_writes_nothing(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO onward_leases (thread_id, owner, acquired_at, heartbeat_at, expires_at, "
        "epoch) VALUES ('mine', 'me', '', '', '', 7), ('taken', 'other', '', '', '', 9)"
    )
    _send(conn, [(INSERT, awkward_rows(0))], pipelined=True, checks=[("mine", Fence("me", 7))])
    assert len(kept(conn, 0, 100)) == len(AWKWARD_TEXTS)

    for checks in (
        [("taken", Fence("me", 8))],
        [("mine", Fence("me", 7)), ("taken", Fence("me", 8))],
    ):
        with pytest.raises(FencedOut) as lost:
            _send(conn, [(INSERT, awkward_rows(100))], pipelined=True, checks=checks)
        assert lost.value.thread_id == "taken"
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
        assert kept(conn, 100, 200) == []
