"""LangGraph's checkpoint savers, committing a task's event-log rows with its writes.

A node's progress events and artifact references used to cost a transaction of their
own, before the node's checkpoint writes. The savers here take them from
:class:`HeldRows` and insert them in the transaction that saves the task's writes: one
commit per step instead of two, and a step's events are in the log exactly when its
result is in the checkpoint (a crash in between can no longer leave one without the
other).

On Postgres, LangGraph's saver runs on an autocommit connection, so each statement of a
``put`` or ``put_writes`` batch commits (and flushes the WAL) alone; here each batch is
one commit: one statement where the rows in order could leave nothing else
(:func:`~onward.store.sql.batch_in_one`), else one transaction. The saver borrows its
connections from the process's pool (:class:`~onward.store.connection.PgPool`), and a
batch whose connection was lost, or could not be had, is sent again once the server
answers (its inserts ignore or update a duplicate key, so a batch sent twice saves what
it saved once).

On SQLite, loading a thread finds each delta channel's last snapshot without decoding
every checkpoint on the way (see :meth:`OnwardSqliteSaver.full_history`). On both, a
delta channel's value at a checkpoint is rebuilt from the nearest ancestor whose value the
process kept (:mod:`onward.checkpointing.values`): a thread's state, a page of its
history, a drive's load cost the writes since, not the channel's whole history.

**One durable commit per plan step.** Only a task's writes need to be durable at once
(LangGraph resumes from a checkpoint plus the pending writes of the tasks that finished
after it, and does not run those again). So the savers commit on a task's writes, and
*defer* the rest to the next commit: the checkpoints the loop saves after each superstep,
and the writes of reproducible tasks (verify, the gate join; see :class:`HeldRows`). A
crash loses only deferred rows, in order (never a later row without an earlier one): the
run resumes from the last committed checkpoint plus its committed writes, and runs the
reproducible tasks again — never a tool. Deferred rows are committed before any read, on
:meth:`HeldRows.make_durable` (execute calls it before a side effect, so no effect ever
happens before the verdicts it follows are durable), and on close. A step of a plan:
execute's writes (one commit, carrying the previous step's verify), then its checkpoint,
verify's writes and checkpoint (deferred).

**Fenced commits.** A commit of a thread this process drives (its lease's epoch is in
:class:`~onward.store.leases.Fences`) checks, in the same transaction, that the lease is
still that epoch: SQLite begins the commit ``BEGIN IMMEDIATE`` and reads the lease row;
Postgres sends the check inside the commit's one statement (``onward_fence``, which locks
the lease row ``FOR SHARE`` and raises if it is not the drive's any more). A refused commit
writes nothing, drops that thread's deferred rows and raises
:class:`~onward.errors.LeaseLostError`: a driver that lost its lease cannot overwrite its
successor's checkpoint. Still one commit per step. Threads without a fence here (LangGraph
used directly, a person's edit from another process) are committed as before.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver

from onward._compat.langgraph_checkpoint import SQLITE_DELTA, DeltaSnapshot
from onward.checkpointing.chain import CHAIN_SQL, METADATA_SQL, POSTGRES_JOIN, SQLITE_JOIN
from onward.checkpointing.serde import fresh
from onward.checkpointing.values import CheckpointValues, WriteRow, rolled, shared
from onward.errors import FencedOut, LeaseLostError
from onward.observe.events import LogRow
from onward.store.leases import FENCE_SQL, FENCE_SQLSTATE, Fence, Fences
from onward.store.sql import Statement, batch_in_one, table_written
from onward.store.writelock import writing

if TYPE_CHECKING:
    import psycopg

    from onward.store.connection import PgPool

Statements = list[tuple[str, list[tuple[Any, ...]]]]
"""(SQL with ``?`` placeholders, rows) pairs."""
Also = Sequence[tuple[str, list[tuple[Any, ...]]]]
"""Statements a caller adds to a commit (:meth:`HeldRows.make_durable_with`)."""
RowsToSql = Callable[[str, Sequence[LogRow], Sequence[tuple[str, str]]], Statements]
"""(thread id, event rows, artifact references) → the inserts that record them."""


_META_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""Checkpoint metadata as compact JSON (a fifth of a checkpoint row was the metadata's
spaces and counters); one encoder, which keeps no state between calls."""


class HeldRows:
    """Event rows and artifact references of tasks that finished and whose writes the
    saver has not saved yet, by (thread id, task id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], tuple[list[LogRow], list[tuple[str, str]]]] = {}
        self._reproducible: set[tuple[str, str]] = set()
        self._driving: set[str] = set()
        self._input_reproducible: set[str] = set()
        self.flush: Callable[[], None] = lambda: None
        """Commits what the saver deferred (set by the saver that takes from these rows)."""
        self.flush_with: Callable[[str, Sequence[LogRow], Also], None] | None = None
        """Commits what the saver deferred, a thread's event rows and other statements of
        it, in one transaction (set by the saver; None: no saver takes rows yet)."""
        self.discard: Callable[[str], None] = lambda thread_id: None
        """Forgets what the saver deferred for a thread."""

    def driving(self, thread_id: str) -> None:
        """A drive of the thread began: the saver may defer its loop's checkpoints (the
        drive commits them at its end). Outside a drive — LangGraph used directly with
        these savers — every save commits at once, as LangGraph's own savers do."""
        with self._lock:
            self._driving.add(thread_id)

    def input_reproducible(self, thread_id: str) -> None:
        """The drive's input is the run's stored request (its first checkpoint never
        committed): the checkpoint LangGraph saves of it may wait for the first task's
        commit, as the loop's do. Lost in a crash, the next drive starts from the request
        again, as it does when killed before the first checkpoint."""
        with self._lock:
            self._input_reproducible.add(thread_id)

    def take_input_reproducible(self, thread_id: str) -> bool:
        with self._lock:
            try:
                self._input_reproducible.remove(thread_id)
            except KeyError:
                return False
            return True

    def defers(self, thread_id: str) -> bool:
        with self._lock:
            return thread_id in self._driving

    def mark_reproducible(self, thread_id: str, task_id: str) -> None:
        """The task's writes may wait for the next commit: running it again gives the same."""
        with self._lock:
            self._reproducible.add((thread_id, task_id))

    def take_reproducible(self, thread_id: str, task_id: str) -> bool:
        with self._lock:
            try:
                self._reproducible.remove((thread_id, task_id))
            except KeyError:
                return False
            return True

    def make_durable(self) -> None:
        """Commit everything saved so far (before an effect the saved state must precede)."""
        self.flush()

    def make_durable_with(self, thread_id: str, rows: Sequence[LogRow], also: Also = ()) -> bool:
        """Commit everything saved so far, ``rows`` (events of ``thread_id``) and ``also``
        (statements writing ``thread_id``'s rows, ``?`` placeholders) in one transaction,
        fenced by its lease: a step shown running costs one commit, not one for the
        deferred rows and one for its event (a drive's end: its last checkpoint and the
        run's status). False when no saver takes rows (the caller writes them itself)."""
        if self.flush_with is None:
            return False
        self.flush_with(thread_id, rows, also)
        return True

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
        log again; and what the saver deferred for the thread (a drive's end commits what
        it keeps first). Returns how many event rows were dropped."""
        with self._lock:
            keys = [k for k in self._held if k[0] == thread_id]
            self._reproducible = {k for k in self._reproducible if k[0] != thread_id}
            self._driving.discard(thread_id)
            self._input_reproducible.discard(thread_id)
            dropped = sum(len(self._held.pop(k)[0]) for k in keys)
        self.discard(thread_id)
        return dropped


def _deferrable_writes(held: HeldRows, thread_id: str, task_id: str, writes: Sequence[Any]) -> bool:
    """A reproducible task's ordinary writes wait; errors, interrupts and resumes never do."""
    reproducible = held.take_reproducible(thread_id, task_id)
    special = any(w[0] in WRITES_IDX_MAP for w in writes)
    return reproducible and not special and held.defers(thread_id)


def _deferrable_checkpoint(held: HeldRows, thread_id: str, metadata: Mapping[str, Any]) -> bool:
    """The loop's checkpoints wait during a drive, and so does the input checkpoint of a
    drive that starts a run from its stored request (:meth:`HeldRows.input_reproducible`);
    a person's edit ("update"), a fork and any other input are committed at once."""
    if not held.defers(thread_id):
        return False
    source = metadata.get("source")
    return source == "loop" or (source == "input" and held.take_input_reproducible(thread_id))


class Deferred:
    """Statements kept for the next commit, by thread. Any commit takes all of them first,
    so a thread's deferred statements are always the tail of what it saved: dropping them
    (a drive that ended by an error, whose lease may have passed to another driver) is what
    a crash at that moment would have done."""

    def __init__(self) -> None:
        self._by_thread: dict[str, Statements] = {}

    def of(self, thread_id: str) -> Statements:
        return self._by_thread.setdefault(thread_id, [])

    def take(self) -> Statements:
        """Every thread's statements (kept until :meth:`clear`: a failed commit keeps them)."""
        return [st for statements in self._by_thread.values() for st in statements]

    def clear(self) -> None:
        self._by_thread.clear()

    def drop(self, thread_id: str) -> None:
        self._by_thread.pop(thread_id, None)

    def threads(self) -> list[str]:
        """The threads with statements kept."""
        return [t for t, statements in self._by_thread.items() if statements]

    def __bool__(self) -> bool:
        return any(self._by_thread.values())


def fences_of(
    fences: Fences | None, deferred: Deferred, thread_id: str | None
) -> list[tuple[str, Fence]]:
    """The fences a commit must check: of the batch's thread and of every thread with
    deferred statements, where this process drives it."""
    if not fences:
        return []
    threads = dict.fromkeys([*deferred.threads(), *([thread_id] if thread_id else [])])
    return [(t, f) for t in threads if (f := fences.of(t)) is not None]


def grouped(statements: Statements) -> Statements:
    """The same statements with each one's rows added to an earlier one of the same SQL
    when no statement in between writes that table: the order within each table is kept
    (the rows of one table are written in the order they were saved), only statements of
    different tables change places, which none of these depend on. A step's batch of eight
    statements (two checkpoints, their blobs, two tasks' writes and events) is sent as
    four, each a call of the driver fewer."""
    out: Statements = []
    last: dict[str, int] = {}
    """The index in ``out`` of the last statement of each SQL text."""
    table_at: dict[str | None, int] = {}
    """The index of the last statement that wrote each table (None: one of unknown reach,
    which nothing is moved past)."""
    for sql, rows in statements:
        table = table_written(sql)
        at = last.get(sql)
        barrier = max(table_at.get(table, -1), table_at.get(None, -1))
        if table is not None and at is not None and at >= barrier:
            out[at][1].extend(rows)
            continue
        out.append((sql, list(rows)))
        last[sql] = table_at[table] = len(out) - 1
    return out


class _Recorder:
    """A cursor stand-in that keeps statements for a later transaction."""

    def __init__(self, into: Statements) -> None:
        self.into = into

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.into.append((sql, [tuple(params)]))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.into.append((sql, [tuple(r) for r in rows]))


class FlushedReads(BaseCheckpointSaver[Any]):
    """Reads that first commit what the saver deferred: a read sees every saved row. A
    delta channel's value is rolled forward from one the process kept (:func:`rolled`)."""

    lock: threading.Lock
    _deferred: Deferred
    values: CheckpointValues
    """Delta channels' values by checkpoint, shared by the savers of one store."""

    def flush(self) -> None:
        raise NotImplementedError

    def learn_channels(self, channels: Mapping[str, Any]) -> None:
        """A graph that uses this saver: its delta channels' reducers rebuild values here."""
        self.values.learn(channels)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        self.flush()
        return rolled(self.values, self, config, list(channels))

    def full_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The channels' histories at a checkpoint, LangGraph's way (no kept values)."""
        return super().get_delta_channel_history(config=config, channels=channels)

    def chain(self, thread_id: str, ns: str, checkpoint_id: str, depth: int) -> list[str]:
        raise NotImplementedError

    def counters(self, thread_id: str, ns: str, checkpoint_id: str) -> Mapping[str, Any]:
        raise NotImplementedError

    def writes_at(
        self, thread_id: str, ns: str, checkpoint_ids: Sequence[str], channels: Sequence[str]
    ) -> list[WriteRow]:
        raise NotImplementedError

    def _wrote(self, config: RunnableConfig) -> None:
        """Rows saved at ``config``'s checkpoint: later kept values of its thread go."""
        conf = config["configurable"]
        self.values.wrote(str(conf["thread_id"]), conf.get("checkpoint_id"))

    def _drop(self, thread_id: str) -> None:
        """Forget what was deferred for a thread (its drive lost the lease)."""
        with self.lock:
            self._deferred.drop(thread_id)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.flush()
        return super().get_tuple(config)

    def delete_thread(self, thread_id: str) -> None:
        self.flush()
        super().delete_thread(thread_id)
        self.values.forget(thread_id)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self.flush()
        return super().list(config, filter=filter, before=before, limit=limit)


class OnwardSqliteSaver(FlushedReads, SqliteSaver):
    """:class:`SqliteSaver` whose ``put_writes`` also inserts the task's held rows."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        serde: SerializerProtocol,
        held: HeldRows,
        to_sql: RowsToSql,
        fences: Fences | None = None,
    ) -> None:
        super().__init__(conn, serde=serde)
        self.held, self.to_sql, self.fences = held, to_sql, fences
        self._deferred = Deferred()
        held.flush, held.discard, held.flush_with = self.flush, self._drop, self.flush_with
        self._seeds: OrderedDict[tuple[str, str, str], dict[str, Any]] = OrderedDict()
        """Decoded delta-channel snapshots by checkpoint (a checkpoint never changes once
        written, and a resume loads the same thread three times)."""
        file = _sqlite_file(conn)
        self.values = shared(f"sqlite {file}" if file else None)
        self._file = file
        """The file whose write lock this saver's commits take (onward.store.writelock)."""

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The channel's next version: SqliteSaver's zero-padded counter without its random
        suffix. SQLite keeps every value inside its checkpoint, so a version only has to
        order one checkpoint's channels (the suffix keeps Postgres's per-version blobs of
        two forks apart); its ~20 incompressible digits were a tenth of every checkpoint
        blob. Versions compare as strings and the counter is padded as before, so a run
        resumed from a store written with suffixes still orders its versions (``…104`` >
        ``…103.0.23``)."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}"

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
        statements: Statements = [
            (
                f"INSERT OR {verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, "
                "task_id, task_path, idx, channel, type, value) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            ),
            *self.to_sql(thread_id, events, refs),
        ]
        defer = _deferrable_writes(self.held, thread_id, task_id, writes)
        self._wrote(config)
        self._save(thread_id, statements, defer=defer)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        type_, blob = self.serde.dumps_typed(checkpoint)
        # Compact JSON (a fifth of a checkpoint row was the metadata's spaces and counters).
        meta = _META_JSON.encode(get_checkpoint_metadata(config, metadata))
        row = (
            str(conf["thread_id"]),
            conf["checkpoint_ns"],
            checkpoint["id"],
            conf.get("checkpoint_id"),
            type_,
            blob,
            meta.encode("utf-8", "ignore"),
        )
        sql = (
            "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        defer = _deferrable_checkpoint(self.held, row[0], metadata)
        self.values.wrote(row[0], checkpoint["id"], itself=True)
        self._save(row[0], [(sql, [row])], defer=defer)
        return {
            "configurable": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": conf["checkpoint_ns"],
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _save(self, thread_id: str, statements: Statements, *, defer: bool) -> None:
        with self.lock:
            if defer:
                self._deferred.of(thread_id).extend(statements)
                return
            self._commit(statements, thread_id)

    def flush(self) -> None:
        with self.lock:
            if self._deferred:
                self._commit([], None)

    def flush_with(self, thread_id: str, rows: Sequence[LogRow], also: Also = ()) -> None:
        """The deferred statements, ``rows`` and ``also``: one commit
        (HeldRows.make_durable_with)."""
        self._save(thread_id, [*self.to_sql(thread_id, rows, []), *also], defer=False)

    def _commit(self, statements: Statements, thread_id: str | None) -> None:
        """The deferred statements, then these (of ``thread_id``), in one transaction: all
        or nothing. (Not SqliteSaver.cursor(), which commits even after an error and could
        save writes without their events.) On failure the deferred rows stay for the next
        commit. Fenced threads are checked first (:meth:`_fence`)."""
        with writing(self._file):
            self._commit_now(statements, thread_id)

    def _commit_now(self, statements: Statements, thread_id: str | None) -> None:
        cur = self.conn.cursor()
        try:
            refused = self._fence(cur, thread_id)
            batch = [] if refused else statements  # a lost lease: only the others' rows
            for sql, params in grouped([*self._deferred.take(), *batch]):
                cur.executemany(sql, params)
            self.conn.commit()
            self._deferred.clear()
        except BaseException:
            self.conn.rollback()
            raise
        finally:
            cur.close()
        if refused and thread_id is not None:
            raise LeaseLostError(thread_id)

    def _fence(self, cur: sqlite3.Cursor, thread_id: str | None) -> bool:
        """Begin the commit ``IMMEDIATE`` (the write lock, so the lease read is the one the
        commit writes against) when a thread in it is fenced, and check each fence: a thread
        whose lease is not its drive's any more has its deferred rows dropped and is marked
        lost. True when that is ``thread_id``'s (its batch must not be written)."""
        checks = fences_of(self.fences, self._deferred, thread_id)
        if not checks:
            return False
        if not self.conn.in_transaction:
            cur.execute("BEGIN IMMEDIATE")
        lost = False
        for thread, fence in checks:
            if cur.execute(FENCE_SQL, (thread, fence.owner, fence.epoch)).fetchone() is None:
                self._deferred.drop(thread)
                assert self.fences is not None
                self.fences.lose(thread)
                lost = lost or thread == thread_id
        return lost

    def full_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The delta channels' last snapshots and the writes since, found by distance.

        LangGraph's walk decodes every ancestor checkpoint until it has met a snapshot of
        each channel. A channel written rarely (the plan, decisions, approvals) is
        snapshotted only every 5,000 supersteps, so every load of a long run decoded up to
        5,000 checkpoints (0.8 s at 4,000 steps), and ``history`` did that per entry. But
        the target's metadata counts, per channel, the supersteps since its snapshot: the
        snapshot is the ancestor that many parents up. So read only the chain's ids, and
        decode only the checkpoints that hold the snapshots. Anything unexpected (no
        counters, a shorter chain, no snapshot where the counters point) falls back to
        LangGraph's walk, so the result is always the same.
        """
        found = self._history_by_distance(config, list(channels))
        if found is None:
            return super().full_history(config, channels)
        return found

    def counters(self, thread_id: str, ns: str, checkpoint_id: str) -> Mapping[str, Any]:
        with self.cursor(transaction=False) as cur:
            row = cur.execute(METADATA_SQL, (thread_id, ns, checkpoint_id)).fetchone()
        found = json.loads(row[0]) if row and row[0] else {}
        return cast("Mapping[str, Any]", found.get("counters_since_delta_snapshot") or {})

    def chain(self, thread_id: str, ns: str, checkpoint_id: str, depth: int) -> list[str]:
        with self.cursor(transaction=False) as cur:
            params = (thread_id, ns, checkpoint_id, thread_id, ns, depth)
            return [r[0] for r in cur.execute(_CHAIN_SQL, params).fetchall()]

    def writes_at(
        self, thread_id: str, ns: str, checkpoint_ids: Sequence[str], channels: Sequence[str]
    ) -> list[WriteRow]:
        path = "task_path" if self._has_task_path else "''"
        sql = (
            f"SELECT checkpoint_id, channel, task_id, idx, type, value, {path} FROM writes "
            "WHERE thread_id = ? AND checkpoint_ns = ? "
            f"AND checkpoint_id IN ({','.join('?' * len(checkpoint_ids))}) "
            f"AND channel IN ({','.join('?' * len(channels))})"
        )
        with self.cursor(transaction=False) as cur:
            rows = cur.execute(sql, (thread_id, ns, *checkpoint_ids, *channels)).fetchall()
        return cast("list[WriteRow]", rows)

    def _history_by_distance(
        self, config: RunnableConfig, channels: list[str]
    ) -> dict[str, DeltaChannelHistory] | None:
        checkpoint_id = get_checkpoint_id(config)
        if not channels or not checkpoint_id or SQLITE_DELTA is None:
            return None
        stage2_sql, writes_history = SQLITE_DELTA
        thread_id = str(config["configurable"]["thread_id"])
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        with self.cursor(transaction=False) as cur:
            row = cur.execute(
                "SELECT metadata FROM checkpoints "
                "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                (thread_id, ns, checkpoint_id),
            ).fetchone()
            counters = (json.loads(row[0]) if row and row[0] else {}).get(
                "counters_since_delta_snapshot"
            ) or {}
            distance = {ch: int(counters.get(ch, (0, 0))[1]) for ch in channels}
            if min(distance.values()) < 1:
                return None
            deepest = max(distance.values())
            # The chain's ids, target first (a bounded depth also ends a looped chain).
            params = (thread_id, ns, checkpoint_id, thread_id, ns, deepest)
            found = cur.execute(_CHAIN_SQL, params).fetchall()
            if not found:
                return None
            chain, parents = zip(*found, strict=True)
            # A channel never snapshotted counts from the thread's start: past the root.
            at_root = parents[-1] is None
            seed_at = {ch: chain[d] for ch, d in distance.items() if d < len(chain)}
            if len(seed_at) < len(channels) and not at_root:
                return None
            snapshots = self._snapshots(cur, thread_id, ns, sorted(set(seed_at.values())))
            if snapshots is None:
                return None
            seeds: dict[str, Any] = {}
            for ch, cid in seed_at.items():
                value = snapshots[cid].get(ch)
                if not isinstance(value, DeltaSnapshot):
                    return None
                seeds[ch] = fresh(value)
            chain_by_ch = {ch: list(chain[1 : distance[ch] + 1]) for ch in channels}
            stage2 = stage2_sql(
                has_task_path=self._has_task_path,
                chain_lens=[len(chain_by_ch[ch]) for ch in channels],
            )
            args: list[Any] = []
            for ch in channels:
                args.extend([thread_id, ns, ch, *chain_by_ch[ch]])
            rows = cast(
                "list[tuple[str, str, str, int, str, bytes, str]]",
                cur.execute(stage2, args).fetchall(),
            )
        return writes_history(  # type: ignore[no-any-return]
            channels=channels,
            chain_by_ch=chain_by_ch,
            seed_val_by_ch=seeds,
            seeded=set(seeds),
            stage2_rows=rows,
            serde=self.serde,
        )

    def _snapshots(
        self, cur: sqlite3.Cursor, thread_id: str, ns: str, ids: list[str]
    ) -> dict[str, dict[str, Any]] | None:
        """The delta-channel snapshots each checkpoint holds (None if one is missing)."""
        out = {cid: hit for cid in ids if (hit := self._seeds.get((thread_id, ns, cid)))}
        todo = [cid for cid in ids if cid not in out]
        if todo:
            rows = cur.execute(
                "SELECT checkpoint_id, type, checkpoint FROM checkpoints "
                "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id IN "
                f"({','.join('?' * len(todo))})",
                (thread_id, ns, *todo),
            ).fetchall()
            if len(rows) < len(todo):
                return None
            for cid, type_tag, blob in rows:
                values = self.serde.loads_typed((type_tag, blob)).get("channel_values") or {}
                out[cid] = {k: v for k, v in values.items() if isinstance(v, DeltaSnapshot)}
                self._seeds[(thread_id, ns, cid)] = out[cid]  # under self.lock (cursor)
                while len(self._seeds) > SEEDS_KEPT:
                    self._seeds.popitem(last=False)
        return out


SEEDS_KEPT = 8
"""Checkpoints whose decoded snapshots a SQLite saver keeps (a few threads' latest)."""

_CHAIN_SQL = CHAIN_SQL.format(join=SQLITE_JOIN)
_PG_CHAIN_SQL = CHAIN_SQL.format(join=POSTGRES_JOIN).replace("?", "%s")


def _sqlite_file(conn: sqlite3.Connection) -> str | None:
    """The main database's file (None in memory): the store the saver's values are of."""
    for _seq, name, file in conn.execute("PRAGMA database_list").fetchall():
        if name == "main" and file:
            return str(file)
    return None


def postgres_saver(
    pool: PgPool,
    *,
    serde: SerializerProtocol,
    held: HeldRows,
    to_sql: RowsToSql,
    fences: Fences | None = None,
) -> Any:
    """A :class:`PostgresSaver` (imported only with the postgres extra) on ``pool``, whose
    batches are transactions fenced by ``fences``, and whose ``put_writes`` also inserts
    the task's held rows."""
    from langgraph.checkpoint.postgres import PostgresSaver

    class OnwardPostgresSaver(FlushedReads, PostgresSaver):
        _deferred: Deferred
        _local: threading.local
        """``into``: where this thread records a deferred batch (None: send it);
        ``thread``: the thread id of the batch being saved (None: a flush)."""

        @contextmanager
        def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
            into = getattr(self._local, "into", None)
            if into is not None:  # a deferred batch: keep it for later
                yield _Recorder(into)
                return
            if not pipeline or self.pipe is not None:
                with super()._cursor(pipeline=pipeline) as cur:
                    yield cur
                return
            # A batch is one transaction, with the deferred statements before it: one
            # commit (and WAL flush) instead of one per statement, and all of it or none
            # after a crash. It is recorded, then sent after the deferred statements on a
            # connection of the pool (_send), again if the server could not be reached.
            batch: Statements = []
            yield _Recorder(batch)
            with self.lock:
                self._commit(batch, getattr(self._local, "thread", None))

        def _commit(self, batch: Statements, thread_id: str | None) -> None:
            """Send the deferred statements and ``batch`` with their fences. A thread found
            fenced out loses its deferred rows and the rest is sent again; if it is the
            batch's, :class:`LeaseLostError` (the batch is not written)."""
            while True:
                send = functools.partial(
                    _send,
                    statements=self._pending(batch),
                    pipelined=self.supports_pipeline,
                    checks=fences_of(fences, self._deferred, thread_id),
                )
                try:
                    pool.retry(functools.partial(pool.borrowed, send))
                except FencedOut as out:
                    self._deferred.drop(out.thread_id)
                    assert fences is not None
                    fences.lose(out.thread_id)
                    if out.thread_id == thread_id:
                        raise LeaseLostError(out.thread_id) from None
                    continue
                self._deferred.clear()
                return

        def _pending(self, batch: Statements) -> Statements:
            """The deferred statements, then ``batch``, grouped: what the next commit sends."""
            return grouped([*self._deferred.take(), *batch])

        @contextmanager
        def _saving(self, thread_id: str) -> Iterator[None]:
            """The batches sent in the block are ``thread_id``'s (see :meth:`_commit`)."""
            self._local.thread = thread_id
            try:
                yield
            finally:
                self._local.thread = None

        @contextmanager
        def _deferring(self, thread_id: str, defer: bool) -> Iterator[None]:
            if not defer:
                yield
                return
            with self.lock:  # the recorder appends to the shared buffer
                self._local.into = self._deferred.of(thread_id)
                try:
                    yield
                finally:
                    self._local.into = None

        def flush(self) -> None:
            if self._deferred:
                with self._cursor(pipeline=True):
                    pass

        def flush_with(self, thread_id: str, rows: Sequence[LogRow], also: Also = ()) -> None:
            """The deferred statements, ``rows`` and ``also`` in one commit."""
            batch = [
                (sql.replace("?", "%s"), list(params))
                for sql, params in [*to_sql(thread_id, rows, []), *also]
            ]
            with self.lock:
                self._commit(batch, thread_id)

        def get_delta_channel_history(
            self, *, config: RunnableConfig, channels: Sequence[str]
        ) -> Mapping[str, DeltaChannelHistory]:
            """A read like the store's others: an outage is waited out (the reads run
            again whole), driver errors come out as StoreErrors. (Not a method the store
            maps: a lost connection here ended a worker with a traceback.)"""
            parent = super().get_delta_channel_history
            return pool.retry(lambda: parent(config=config, channels=channels))

        def put(
            self,
            config: RunnableConfig,
            checkpoint: Checkpoint,
            metadata: CheckpointMetadata,
            new_versions: ChannelVersions,
        ) -> RunnableConfig:
            thread_id = str(config["configurable"]["thread_id"])
            defer = _deferrable_checkpoint(held, thread_id, metadata)
            self.values.wrote(thread_id, checkpoint["id"], itself=True)
            with self._saving(thread_id), self._deferring(thread_id, defer):
                return super().put(config, checkpoint, metadata, new_versions)

        def chain(self, thread_id: str, ns: str, checkpoint_id: str, depth: int) -> list[str]:
            with self._cursor() as cur:
                cur.execute(_PG_CHAIN_SQL, (thread_id, ns, checkpoint_id, thread_id, ns, depth))
                return [r["checkpoint_id"] for r in cur.fetchall()]

        def counters(self, thread_id: str, ns: str, checkpoint_id: str) -> Mapping[str, Any]:
            with self._cursor() as cur:
                cur.execute(METADATA_SQL.replace("?", "%s"), (thread_id, ns, checkpoint_id))
                row = cur.fetchone()
            found = (row or {}).get("metadata") or {}
            return cast("Mapping[str, Any]", found.get("counters_since_delta_snapshot") or {})

        def writes_at(
            self, thread_id: str, ns: str, checkpoint_ids: Sequence[str], channels: Sequence[str]
        ) -> list[WriteRow]:
            with self._cursor() as cur:
                cur.execute(
                    "SELECT checkpoint_id, channel, task_id, idx, type, blob, task_path "
                    "FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s "
                    "AND checkpoint_id = ANY(%s) AND channel = ANY(%s)",
                    (thread_id, ns, list(checkpoint_ids), list(channels)),
                )
                return [
                    (
                        r["checkpoint_id"],
                        r["channel"],
                        r["task_id"],
                        r["idx"],
                        r["type"],
                        r["blob"],
                        r["task_path"],
                    )
                    for r in cur.fetchall()
                ]

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
            defer = _deferrable_writes(held, thread_id, task_id, writes)
            self._wrote(config)
            with (
                self._saving(thread_id),
                self._deferring(thread_id, defer),
                self._cursor(pipeline=True) as cur,
            ):
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

    saver = OnwardPostgresSaver(pool.pool, serde=serde)
    saver._deferred, saver._local = Deferred(), threading.local()
    saver.values = shared(f"postgres {pool.url}")
    held.flush, held.discard, held.flush_with = saver.flush, saver._drop, saver.flush_with
    return saver


def _send(
    conn: psycopg.Connection[Any],
    statements: Statements,
    pipelined: bool,
    checks: Sequence[tuple[str, Fence]] = (),
) -> None:
    """A batch, grouped (:func:`grouped`), all or nothing: as one statement where it can be
    (:func:`~onward.store.sql.batch_in_one`: each table's rows one multi-row INSERT, the
    fence check the statement's own SELECT), else in one transaction, with BEGIN and
    COMMIT in one pipeline (psycopg's transaction() would add two round trips to each
    batch), or, on a libpq older than 14, in a transaction. One commit either way.
    ``checks``: the fences it checks (``onward_fence``); a failed one is
    :class:`FencedOut`."""
    import psycopg
    from psycopg.pq import TransactionStatus
    from psycopg.rows import dict_row

    fence = _fence_statement(checks)
    one = batch_in_one(statements, fence)
    try:
        if one is not None:
            with conn.cursor(binary=True) as cur:
                cur.execute(*one)
        elif pipelined:
            with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                cur.execute("BEGIN")
                _check_fence(cur, fence)
                _replay(cur, statements)
                cur.execute("COMMIT")
        else:
            with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                _check_fence(cur, fence)
                _replay(cur, statements)
    except BaseException as exc:
        if conn.info.transaction_status is not TransactionStatus.IDLE:
            with suppress(Exception):  # a dead connection: keep the first error
                conn.execute("ROLLBACK")
        if isinstance(exc, psycopg.Error) and exc.sqlstate == FENCE_SQLSTATE:
            raise FencedOut(str(exc.diag.message_detail)) from None
        raise


def _fence_statement(checks: Sequence[tuple[str, Fence]]) -> Statement | None:
    """The ``onward_fence`` call that checks ``checks`` (None: nothing to check)."""
    if not checks:
        return None
    if len(checks) == 1:  # a commit's usual one: scalars (psycopg adapts lists per item)
        ((thread, fence),) = checks
        sql = "SELECT onward_fence(ARRAY[%s::text], ARRAY[%s::text], ARRAY[%s::bigint])"
        return sql, (thread, fence.owner, fence.epoch)
    threads = [t for t, _ in checks]
    owners, epochs = [f.owner for _, f in checks], [f.epoch for _, f in checks]
    return "SELECT onward_fence(%s::text[], %s::text[], %s::bigint[])", (threads, owners, epochs)


def _check_fence(cur: Any, fence: Statement | None) -> None:
    if fence is not None:
        cur.execute(*fence)


def _replay(cur: Any, statements: Statements) -> None:
    for sql, rows in statements:
        cur.executemany(sql, rows)
