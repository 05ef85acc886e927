"""A Postgres commit's inserts as one statement: one message, one round trip, no BEGIN.

A plan step's commit on Postgres inserts a dozen rows into four tables (two checkpoints,
their blobs, two tasks' writes, their events). Sent as a pipeline (BEGIN, one execute per
row, COMMIT) it cost ~16 socket writes, ~30 polls and as many statements for the server
to parse and run; psycopg flushes each row of an ``executemany`` as it goes. Sent as one
statement — each table's rows in one multi-row ``INSERT``, the tables joined by
data-modifying ``WITH`` clauses — it is one message, and in autocommit mode one
statement is one transaction: all of it or none, as before.

One statement is not a sequence, so this is used only where the result cannot differ
(else :func:`one_statement` returns None and the saver sends the pipeline):

* every statement is ``INSERT INTO t (cols) VALUES (%s, ...)`` with an optional
  ``ON CONFLICT`` clause (what the savers send); anything else is not rewritten;
* each table appears once: clauses of one ``WITH`` cannot see each other's rows, and
  two touching one row would apply in no defined order;
* ``ON CONFLICT ... DO UPDATE`` rows have distinct conflict keys (Postgres refuses a
  command that updates a row twice; in sequence the last would have won).
  ``DO NOTHING`` keeps the first of equal keys, as the sequence did;
* at most :data:`MAX_PARAMS` parameters (the protocol allows 65,535).

A commit fenced by a drive's lease (store/leases.py) makes every insert a ``WITH`` clause
and ends in ``SELECT onward_fence(...)``: the check runs in the same statement, and its
error undoes the inserts.

Rows keep their order within each table (a multi-row ``VALUES`` inserts in order, so
serial ids, which the event log orders by, come out as before).

The text uses Postgres's own ``$1 .. $N`` placeholders and is sent by :func:`send` through
psycopg's raw cursor. psycopg caches its ``%s`` → ``$n`` conversion only for statements of
at most 4,096 bytes and 50 parameters; a step's joined insert has more, so with ``%s`` it
re-parsed the whole text with a regex on every commit (~0.7 ms a step, profiled: the
largest client-side cost of a Postgres step).
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from onward.checkpointing.savers import Statements

MAX_PARAMS = 20_000
"""Above this (a large parallel wave's deferred rows) the pipeline is sent instead."""

_INSERT = re.compile(
    r"""^\s*INSERT\s+INTO\s+(?P<table>\w+)\s*\((?P<cols>[^()]*)\)\s*
        VALUES\s*(?P<values>\(\s*%s(?:\s*,\s*%s)*\s*\))\s*
        (?P<tail>ON\s+CONFLICT\b[^;]*)?;?\s*$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)
_TARGET = re.compile(r"ON\s+CONFLICT\s*\((?P<keys>[^()]*)\)", re.IGNORECASE)
_UPDATE = re.compile(r"\bDO\s+UPDATE\b", re.IGNORECASE)


class _Insert:
    """What one statement of the savers is: its table, width and (for ``DO UPDATE``)
    the positions of its conflict key in a row."""

    __slots__ = ("head", "keys", "table", "tail", "width")

    def __init__(self, table: str, head: str, width: int, tail: str, keys: tuple[int, ...]):
        self.table, self.head, self.width, self.tail, self.keys = table, head, width, tail, keys


@lru_cache(maxsize=64)
def _parse(sql: str) -> _Insert | None:
    """The statement as an :class:`_Insert`, or None where it is not one this can join
    (the savers send a handful of distinct statements: each is parsed once)."""
    match = _INSERT.match(sql)
    if match is None:
        return None
    cols = [c.strip().lower() for c in match["cols"].split(",")]
    width = match["values"].count("%s")
    if width != len(cols):
        return None
    tail = " ".join((match["tail"] or "").split())
    keys: tuple[int, ...] = ()
    if _UPDATE.search(tail):
        target = _TARGET.search(tail)
        if target is None:
            return None  # an update without a named key: cannot check for repeats
        names = [k.strip().lower() for k in target["keys"].split(",")]
        if not set(names) <= set(cols):
            return None
        keys = tuple(cols.index(k) for k in names)
    head = f"INSERT INTO {match['table']} ({', '.join(cols)}) VALUES "
    return _Insert(match["table"].lower(), head, width, tail, keys)


@lru_cache(maxsize=128)
def _text(shape: tuple[tuple[str, int], ...], fenced: bool = False) -> str:
    """The statement for these (SQL, row count) pairs, numbered placeholders; a step's
    batches repeat a few shapes, so the text is built once each. ``fenced``: every insert
    is a ``WITH`` clause and the statement is ``SELECT onward_fence(...)`` of the three
    last parameters (store/leases.py: it raises, and so undoes the inserts, when a lease
    is not its drive's any more)."""
    parts = []
    number = itertools.count(1)
    for sql, count in shape:
        insert = _parse(sql)
        assert insert is not None
        rows = (
            "(" + ", ".join(f"${next(number)}" for _ in range(insert.width)) + ")"
            for _ in range(count)
        )
        parts.append(f"{insert.head}{', '.join(rows)} {insert.tail}".rstrip())
    if fenced:
        n = next(number)
        clauses = ", ".join(f"w{i} AS ({part})" for i, part in enumerate(parts))
        fence = f"onward_fence(${n}::text[], ${n + 1}::text[], ${n + 2}::bigint[])"
        return f"WITH {clauses} SELECT {fence}"
    if len(parts) == 1:
        return parts[0]
    clauses = ", ".join(f"w{i} AS ({part})" for i, part in enumerate(parts[:-1]))
    return f"WITH {clauses} {parts[-1]}"


def one_statement(
    statements: Statements, fence: tuple[list[str], list[str], list[int]] | None = None
) -> tuple[str, list[Any]] | None:
    """``statements`` (each SQL with its rows, as :func:`~onward.checkpointing.savers.grouped`
    makes them) as one statement and its parameters, or None where one statement could
    give another result than running them in order (see the module docstring). ``fence``:
    ``onward_fence``'s arrays (thread ids, owners, epochs), checked in the same statement."""
    shape: list[tuple[str, int]] = []
    params: list[Any] = []
    tables: set[str] = set()
    for sql, rows in statements:
        if not rows:
            continue
        insert = _parse(sql)
        if insert is None or insert.table in tables:
            return None
        tables.add(insert.table)
        for row in rows:
            if len(row) != insert.width:
                return None
            params.extend(row)
        if insert.keys:
            try:
                seen = {tuple(row[i] for i in insert.keys) for row in rows}
            except TypeError:  # a key of a type without equality by value
                return None
            if len(seen) != len(rows):
                return None
        if len(params) > MAX_PARAMS:
            return None
        shape.append((sql, len(rows)))
    if not shape:
        return None
    if fence is not None:
        return _text(tuple(shape), True), [*params, *fence]
    return _text(tuple(shape)), params


def send(conn: psycopg.Connection[Any], joined: tuple[str, list[Any]]) -> None:
    """Run what :func:`one_statement` made (its ``$n`` text as it is: no conversion)."""
    with psycopg.RawCursor(conn) as cur:
        cur.execute(*joined, binary=True)
