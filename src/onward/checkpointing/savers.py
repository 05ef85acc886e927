"""LangGraph's checkpoint savers, committing a task's event-log rows with its writes.

A node's progress events and artifact references used to cost a transaction of their
own, before the node's checkpoint writes. The savers here take them from
:class:`HeldRows` and insert them in the transaction that saves the task's writes: one
commit per step instead of two, and a step's events are in the log exactly when its
result is in the checkpoint (a crash in between can no longer leave one without the
other).

On Postgres, LangGraph's saver runs on an autocommit connection, so each statement of a
``put`` or ``put_writes`` batch commits (and flushes the WAL) alone; here each batch is
one transaction.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver

from onward.checkpointing.events import LogRow

if TYPE_CHECKING:
    import psycopg

Statements = list[tuple[str, list[tuple[Any, ...]]]]
"""(SQL with ``?`` placeholders, rows) pairs."""
RowsToSql = Callable[[str, Sequence[LogRow], Sequence[tuple[str, str]]], Statements]
"""(thread id, event rows, artifact references) → the inserts that record them."""


class HeldRows:
    """Event rows and artifact references of tasks that finished and whose writes the
    saver has not saved yet, by (thread id, task id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], tuple[list[LogRow], list[tuple[str, str]]]] = {}

    def hold(
        self,
        thread_id: str,
        task_id: str,
        rows: Sequence[LogRow],
        refs: Sequence[tuple[str, str]],
    ) -> None:
        with self._lock:
            held_rows, held_refs = self._held.setdefault((thread_id, task_id), ([], []))
            held_rows.extend(rows)
            held_refs.extend(refs)

    def take(self, thread_id: str, task_id: str) -> tuple[list[LogRow], list[tuple[str, str]]]:
        with self._lock:
            return self._held.pop((thread_id, task_id), ([], []))

    def drop_thread(self, thread_id: str) -> int:
        """Forget what no saved write took: those tasks' writes were not saved either (an
        exception LangGraph does not record, such as Ctrl-C), so they will run again and
        log again. Returns how many rows were dropped."""
        with self._lock:
            keys = [k for k in self._held if k[0] == thread_id]
            return sum(len(self._held.pop(k)[0]) for k in keys)


class OnwardSqliteSaver(SqliteSaver):
    """:class:`SqliteSaver` whose ``put_writes`` also inserts the task's held rows."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        serde: SerializerProtocol,
        held: HeldRows,
        to_sql: RowsToSql,
    ) -> None:
        super().__init__(conn, serde=serde)
        self.held, self.to_sql = held, to_sql

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        key = (thread_id, str(conf["checkpoint_ns"]), str(conf["checkpoint_id"]), task_id)
        # As SqliteSaver.put_writes: special channels replace, others are written once.
        verb = "REPLACE" if all(w[0] in WRITES_IDX_MAP for w in writes) else "IGNORE"
        events, refs = self.held.take(thread_id, task_id)
        rows = [
            (*key, task_path, WRITES_IDX_MAP.get(channel, idx), channel, *dumped)
            for idx, (channel, value) in enumerate(writes)
            for dumped in [self.serde.dumps_typed(value)]
        ]
        statements = self.to_sql(thread_id, events, refs)
        # One transaction, all or nothing: SqliteSaver.cursor() commits even after an
        # error, which could save the writes without their events (the task would not
        # run again to log them).
        with self.lock:
            cur = self.conn.cursor()
            try:
                cur.executemany(
                    f"INSERT OR {verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, "
                    "task_id, task_path, idx, channel, type, value) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                for sql, params in statements:
                    cur.executemany(sql, params)
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise
            finally:
                cur.close()


def postgres_saver(
    conn: psycopg.Connection[Any], *, serde: SerializerProtocol, held: HeldRows, to_sql: RowsToSql
) -> Any:
    """A :class:`PostgresSaver` (imported only with the postgres extra) whose batches are
    transactions and whose ``put_writes`` also inserts the task's held rows."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.pq import TransactionStatus
    from psycopg.rows import dict_row

    class OnwardPostgresSaver(PostgresSaver):
        @contextmanager
        def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
            if not pipeline or self.pipe is not None:
                with super()._cursor(pipeline=pipeline) as cur:
                    yield cur
                return
            # A batch is one transaction: one commit (and WAL flush) instead of one per
            # statement, and all of it or none after a crash.
            if not self.supports_pipeline:  # a libpq older than 14
                with (
                    self.lock,
                    conn.transaction(),
                    conn.cursor(binary=True, row_factory=dict_row) as cur,
                ):
                    yield cur
                return
            # BEGIN and COMMIT are sent in the pipeline with the batch (psycopg's
            # transaction() would add two round trips to each batch).
            with self.lock:
                try:
                    with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                        cur.execute("BEGIN")
                        yield cur
                        cur.execute("COMMIT")
                except BaseException:
                    if conn.info.transaction_status is not TransactionStatus.IDLE:
                        with suppress(Exception):  # a dead connection: keep the first error
                            conn.execute("ROLLBACK")
                    raise

        def put_writes(
            self,
            config: RunnableConfig,
            writes: Sequence[tuple[str, Any]],
            task_id: str,
            task_path: str = "",
        ) -> None:
            conf = config["configurable"]
            thread_id = str(conf["thread_id"])
            query = (
                self.UPSERT_CHECKPOINT_WRITES_SQL
                if all(w[0] in WRITES_IDX_MAP for w in writes)
                else self.INSERT_CHECKPOINT_WRITES_SQL
            )
            events, refs = held.take(thread_id, task_id)
            with self._cursor(pipeline=True) as cur:
                cur.executemany(
                    query,
                    self._dump_writes(
                        thread_id,
                        conf["checkpoint_ns"],
                        conf["checkpoint_id"],
                        task_id,
                        task_path,
                        writes,
                    ),
                )
                for sql, params in to_sql(thread_id, events, refs):
                    cur.executemany(sql.replace("?", "%s"), params)

    return OnwardPostgresSaver(conn, serde=serde)
