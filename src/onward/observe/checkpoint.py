"""Reading checkpoint rows without LangGraph and without pydantic: the bytes, onward's
msgpack (a hook given the types it may make), the latest checkpoint and its questions.
What is stored where (channels, reducers, extension codes) comes from onward.observe.shape,
generated from ``RunState``'s own metadata.

The base of onward.observe.latest (a run's state, with onward's models) and of
``onward inbox`` (its questions, with none): see that module for what is read and when a
read gives up (:class:`FullRead`) for the full read through LangGraph.
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ormsgpack

from onward.checkpointing.chain import CHAIN_SQL, METADATA_SQL, POSTGRES_JOIN, SQLITE_JOIN
from onward.checkpointing.format import EXT_LAZY, ZDICTS, inflate
from onward.errors import FullRead as FullRead
from onward.errors import StoreCorruptError
from onward.observe.shape import DELTA_CHANNELS as DELTA_CHANNELS
from onward.observe.shape import EXT_CONSTRUCTOR_KW_ARGS as EXT_CONSTRUCTOR_KW_ARGS
from onward.observe.shape import EXT_CONSTRUCTOR_POS_ARGS as EXT_CONSTRUCTOR_POS_ARGS
from onward.observe.shape import EXT_CONSTRUCTOR_SINGLE_ARG as EXT_CONSTRUCTOR_SINGLE_ARG
from onward.observe.shape import EXT_DELTA_SNAPSHOT as EXT_DELTA_SNAPSHOT
from onward.observe.shape import EXT_METHOD_SINGLE_ARG as EXT_METHOD_SINGLE_ARG
from onward.observe.shape import EXT_PYDANTIC_V2 as EXT_PYDANTIC_V2
from onward.observe.shape import REDUCED as REDUCED
from onward.store.encryption import Cipher
from onward.store.sql import Backend, Db

INTERRUPT = "__interrupt__"


def stopped(status: str, resume_at: object, asked: bool) -> bool:
    """Whether a run was stopped by a cancel (client.driving.park_cancelled saves it
    *suspended*, with no time to resume at and no question, and says why in its last
    message, as a finished run's report does). Every reader of a run asks this here."""
    return status == "suspended" and resume_at is None and not asked


@dataclass(frozen=True, slots=True)
class Message:
    """A chat message as far as a view reads it (LangChain's classes are not imported)."""

    kind: str
    content: Any
    id: str | None

    @property
    def text(self) -> str:
        """``BaseMessage.text``: the content, or its text blocks joined."""
        if isinstance(self.content, str):
            return self.content
        if not isinstance(self.content, list):
            raise FullRead("a message whose content is neither text nor blocks")
        return "".join(
            b if isinstance(b, str) else b["text"]
            for b in self.content
            if isinstance(b, str)
            or (isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
        )


@dataclass(frozen=True, slots=True)
class Interrupt:
    """``langgraph.types.Interrupt``: what a question asks, and its id."""

    value: Any
    id: str


STDLIB: Mapping[tuple[str, str], Callable[..., Any]] = {
    ("datetime", "datetime"): _dt.datetime,
    ("datetime", "date"): _dt.date,
    ("datetime", "time"): _dt.time,
    ("datetime", "timedelta"): _dt.timedelta,
    ("datetime", "timezone"): _dt.timezone,
    ("uuid", "UUID"): uuid.UUID,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
}
"""The standard types onward's checkpoints hold (LangGraph's safe list has more: a value
of another one is read through LangGraph)."""
_METHODS = frozenset(
    {("datetime", "datetime", "fromisoformat"), ("datetime", "date", "fromisoformat")}
)


class _Failed(threading.local):
    """Why the hook failed (ormsgpack replaces a hook's exception with its own)."""

    error: Exception | None = None


class Decoder:
    """onward's checkpoint msgpack (serde.OnwardSerializer's output) without LangGraph."""

    def __init__(
        self,
        cipher: Cipher | None,
        types: Mapping[tuple[str, str], Callable[..., Any]],
        lazy: Callable[[str, Any, Callable[[bytes], Any]], Any] | None = None,
    ) -> None:
        """``types``: the classes by (module, name) it may make (any other is a
        :class:`FullRead`); ``lazy``: makes onward's lazy collections (kind, packed, item
        decoder), None to read none."""
        self.cipher = cipher
        self.types = types
        self.lazy = lazy
        self.failed = _Failed()

    def loads(self, type_: str, blob: bytes) -> Any:
        """A stored (type, bytes) pair, as the store's serializer loads it."""
        if "+" in type_:  # EncryptedSerializer: "<type>+<cipher>"
            type_, cipher_name = type_.split("+", 1)
            if self.cipher is None:
                raise FullRead("an encrypted value and no key")  # the full read says so
            blob = self.cipher.decrypt(cipher_name, bytes(blob))
        if type_ == "null":
            return None
        if type_ in ZDICTS:
            blob = inflate(bytes(blob), type_)
        elif type_ != "msgpack":
            raise FullRead(f"a value of type {type_!r}")
        return self.unpack(bytes(blob))

    def unpack(self, blob: bytes) -> Any:
        self.failed.error = None
        try:
            return ormsgpack.unpackb(blob, ext_hook=self.hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except (ValueError, TypeError) as exc:  # MsgpackDecodeError is a ValueError
            error = self.failed.error
            if isinstance(error, FullRead):
                raise error from None
            raise corrupt(str(error or exc) or type(exc).__name__) from exc

    def hook(self, code: int, data: bytes) -> Any:
        try:
            return self._ext(code, data)
        except Exception as exc:
            if self.failed.error is None:
                self.failed.error = exc
            raise

    def _inner(self, data: bytes) -> Any:
        return ormsgpack.unpackb(data, ext_hook=self.hook, option=ormsgpack.OPT_NON_STR_KEYS)

    def _ext(self, code: int, data: bytes) -> Any:
        if code == EXT_LAZY:
            kind, packed = ormsgpack.unpackb(data)
            if self.lazy is None:
                raise FullRead("an onward collection")
            return self.lazy(kind, packed, self._item)
        if code == EXT_DELTA_SNAPSHOT:
            return Seed(self._inner(data))
        tup = self._inner(data)
        if code == EXT_METHOD_SINGLE_ARG:
            module, name, arg, method = tup
            if (module, name, method) not in _METHODS:
                raise FullRead(f"a value made by {module}.{name}.{method}")
            return getattr(STDLIB[(module, name)], method)(arg)
        module, name = tup[0], tup[1]
        if module.startswith("langchain_core.messages.") and code == EXT_PYDANTIC_V2:
            fields = tup[2]
            return Message(name, fields.get("content", ""), fields.get("id"))
        if (module, name) == ("langgraph.types", "Interrupt") and code == EXT_CONSTRUCTOR_KW_ARGS:
            return Interrupt(tup[2]["value"], tup[2]["id"])  # what onward reads of one
        if (module, name) == ("langgraph.types", "Send") and code == EXT_CONSTRUCTOR_POS_ARGS:
            return Unread(tuple(tup[2]))  # a task LangGraph would start (never read here)
        if (module, name) == ("onward.model.state", "RunState"):
            return Unread((tup[2],))  # a run's input (``__start__``; never read here)
        make = self.types.get((module, name))
        if make is None:
            raise FullRead(f"a value of {module}.{name}")
        if code == EXT_CONSTRUCTOR_SINGLE_ARG:
            return make(tup[2])
        if code == EXT_CONSTRUCTOR_POS_ARGS:
            return make(*tup[2])
        if code in (EXT_CONSTRUCTOR_KW_ARGS, EXT_PYDANTIC_V2):
            return make(**tup[2])  # LangGraph falls back to model_construct: so does its read
        raise FullRead(f"a msgpack extension of code {code}")

    def _item(self, blob: bytes) -> Any:
        """One item of a lazy collection, decoded when it is read (:class:`Decode`)."""
        return self.unpack(blob)


@dataclass(frozen=True, slots=True)
class Unread:
    """A value no view reads, kept undecoded: a ``langgraph.types.Send`` (the pending
    tasks channel) or a whole ``RunState`` (a run's input)."""

    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Seed:
    """``_DeltaSnapshot``: a delta channel's whole value, stored every so many updates."""

    value: Any


def corrupt(reason: str) -> StoreCorruptError:
    return StoreCorruptError(
        f"a checkpoint cannot be read: {reason}. Nothing was changed; restore the store "
        "from a backup or upgrade onward if a newer one wrote it"
    )


def check_reduced(values: dict[str, Any], versions: dict[str, Any]) -> None:
    """:data:`REDUCED` channels (RunState's reducer channels that are not deltas) are
    stored at every version; one with a version and no stored value was a delta channel
    once, and LangGraph rebuilds it from its writes: that is left to it (:class:`FullRead`)."""
    if any(ch in versions and ch not in values for ch in REDUCED):
        raise FullRead("a reducer channel with nothing stored (written as a delta once)")


@dataclass(frozen=True, slots=True)
class Stored:
    """A checkpoint as the light read needs it: its values decoded (each channel stored
    in it), its channels' versions, its parent."""

    id: str
    parent_id: str | None
    values: dict[str, Any]
    versions: dict[str, Any]
    v: int


NO_CHECKPOINT = "no checkpoint yet (the run's request is its state)"


def latest_id(db: Db, thread_id: str) -> str:
    """The id of the thread's latest checkpoint."""
    row = db.execute(
        "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
        "ORDER BY checkpoint_id DESC LIMIT 1",
        (thread_id,),
    ).fetchone()
    if row is None:
        raise FullRead(NO_CHECKPOINT)
    return str(row[0])


def latest_checkpoint(decoder: Decoder, db: Db, thread_id: str) -> Stored:
    """The thread's latest checkpoint, as the store's saver loads it."""
    found = _checkpoint(decoder, db, thread_id, None)
    if found is None:
        raise FullRead(NO_CHECKPOINT)
    return found


def ancestor(
    decoder: Decoder, db: Db, thread_id: str, checkpoint_id: str
) -> tuple[str | None, dict[str, Any]] | None:
    """(parent id, channel values) of a checkpoint up a thread's chain; None if it is gone."""
    found = _checkpoint(decoder, db, thread_id, checkpoint_id)
    return None if found is None else (found.parent_id, found.values)


def _checkpoint(
    decoder: Decoder, db: Db, thread_id: str, checkpoint_id: str | None
) -> Stored | None:
    """One checkpoint (the latest when ``checkpoint_id`` is None), or None."""
    where = "thread_id = ? AND checkpoint_ns = ''"
    params: tuple[str, ...] = (thread_id,)
    if checkpoint_id is not None:
        where, params = f"{where} AND checkpoint_id = ?", (thread_id, checkpoint_id)
    read = _sqlite_row if db.backend is Backend.SQLITE else _postgres_row
    found = read(decoder, db, where, params)
    if found is None:
        return None
    row_id, parent_id, checkpoint = found
    versions = checkpoint.get("channel_versions") or {}
    if not isinstance(versions, dict):
        raise corrupt("its channel versions are not a mapping")
    version = checkpoint.get("v", 1)
    return Stored(
        str(row_id),
        parent_id,
        checkpoint["channel_values"],
        versions,
        version if isinstance(version, int) else 1,
    )


Row = tuple[str, str | None, dict[str, Any]]
"""(id, parent id, checkpoint with its ``channel_values`` decoded)."""


def _sqlite_row(decoder: Decoder, db: Db, where: str, params: tuple[str, ...]) -> Row | None:
    """SqliteSaver's layout: the whole checkpoint, values and all, is one serialized blob."""
    row = db.execute(
        "SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint FROM checkpoints "
        f"WHERE {where} ORDER BY checkpoint_id DESC LIMIT 1",
        params,
    ).fetchone()
    if row is None:
        return None
    checkpoint = decoder.loads(row[2], row[3])
    _check_values(checkpoint)
    checkpoint["channel_values"] = dict(checkpoint["channel_values"])
    return row[0], row[1], checkpoint


def _postgres_row(decoder: Decoder, db: Db, where: str, params: tuple[str, ...]) -> Row | None:
    """PostgresSaver's layout: JSON with the primitive values inline; every other value is
    a checkpoint_blobs row at the channel's version (its SELECT_SQL, as one query), and a
    delta channel's snapshot leaves ``true`` inline in its place."""
    row = db.execute(
        "SELECT checkpoint_id, parent_checkpoint_id, checkpoint, ("
        "SELECT array_agg(array[bl.channel::bytea, bl.type::bytea, bl.blob]) "
        "FROM jsonb_each_text(checkpoint -> 'channel_versions') AS v "
        "JOIN checkpoint_blobs bl ON bl.thread_id = checkpoints.thread_id "
        "AND bl.checkpoint_ns = checkpoints.checkpoint_ns "
        "AND bl.channel = v.key AND bl.version = v.value"
        f") FROM checkpoints WHERE {where} ORDER BY checkpoint_id DESC LIMIT 1",
        params,
    ).fetchone()
    if row is None:
        return None
    checkpoint = row[2]
    _check_values(checkpoint)
    values: dict[str, Any] = dict(checkpoint["channel_values"])
    for channel, type_, blob in row[3] or []:
        kind = bytes(type_).decode()
        if kind != "empty":  # PostgresSaver._load_blobs
            values[bytes(channel).decode()] = decoder.loads(kind, blob)
    if any(values[ch] is True for ch in DELTA_CHANNELS if ch in values):
        raise FullRead("a delta snapshot's placeholder without its blob")
    checkpoint["channel_values"] = values
    return row[0], row[1], checkpoint


def _check_values(checkpoint: Any) -> None:
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("channel_values"), dict):
        raise corrupt("it holds no channel values")


WRITES_TABLE = {
    Backend.SQLITE: ("writes", "value"),
    Backend.POSTGRES: ("checkpoint_writes", "blob"),
}
"""The pending writes' table and value column of each saver."""


def _writes(db: Db, thread_id: str, checkpoint_id: str) -> list[Any]:
    """(task path, task id, idx, channel, type, bytes) of a checkpoint's writes, in
    LangGraph's replay order (task path, task, index)."""
    table, value = WRITES_TABLE[db.backend]
    sql = (
        f"SELECT task_path, task_id, idx, channel, type, {value} FROM {table} "
        "WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?"
    )
    rows = db.execute(sql, (thread_id, checkpoint_id)).fetchall()
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


JOINS = {Backend.SQLITE: SQLITE_JOIN, Backend.POSTGRES: POSTGRES_JOIN}


def chain(db: Db, thread_id: str, checkpoint_id: str, depth: int) -> list[tuple[str, str | None]]:
    """(id, parent id) of the checkpoint and its ancestors up to ``depth``, nearest first."""
    sql = CHAIN_SQL.format(join=JOINS[db.backend])
    rows = db.execute(sql, (thread_id, "", checkpoint_id, thread_id, "", depth)).fetchall()
    return [(str(r[0]), None if r[1] is None else str(r[1])) for r in rows]


def distances(db: Db, thread_id: str, checkpoint_id: str) -> dict[str, int]:
    """How many parents up each delta channel's last snapshot is, as LangGraph counts in
    the checkpoint's metadata (``counters_since_delta_snapshot``); {} where it does not."""
    row = db.execute(METADATA_SQL, (thread_id, "", checkpoint_id)).fetchone()
    try:
        metadata: Any = row[0] if row is not None else None
        if isinstance(metadata, bytes | str):
            metadata = json.loads(metadata)
        counters = metadata.get("counters_since_delta_snapshot") or {}
        return {str(ch): int(c[1]) for ch, c in counters.items()}
    except (AttributeError, TypeError, ValueError, IndexError):
        return {}  # then the walk up the chain finds the snapshots


def writes_in(
    decoder: Decoder, db: Db, thread_id: str, chains: Mapping[str, Sequence[str]]
) -> dict[str, list[Any]]:
    """Each delta channel's writes in the checkpoints of its chain (newest first), oldest
    first, ordered within a checkpoint as LangGraph replays them: one query per
    :data:`_IDS` checkpoints, not one per checkpoint and channel."""
    ids = sorted({cid for ids in chains.values() for cid in ids})
    table, value = WRITES_TABLE[db.backend]
    rows: list[Any] = []
    for at in range(0, len(ids), _IDS):
        some = ids[at : at + _IDS]
        rows += db.execute(
            f"SELECT checkpoint_id, task_path, task_id, idx, channel, type, {value} FROM {table} "
            "WHERE thread_id = ? AND checkpoint_ns = '' "
            f"AND checkpoint_id IN ({','.join('?' * len(some))}) "
            f"AND channel IN ({','.join('?' * len(chains))})",
            (thread_id, *some, *chains),
        ).fetchall()
    by_place: dict[tuple[str, str], list[Any]] = {}
    for r in sorted(rows, key=lambda r: (r[1], r[2], r[3])):
        by_place.setdefault((str(r[0]), str(r[4])), []).append(r)
    found: dict[str, list[Any]] = {}
    for ch, ids_of in chains.items():
        found[ch] = []
        for cid in reversed(ids_of):
            for r in by_place.get((cid, ch), []):
                written = decoder.loads(r[5], r[6])
                if isinstance(written, dict) and "__overwrite__" in written:
                    raise FullRead("an Overwrite write")
                found[ch].append(written)
    return found


_IDS = 500
"""Checkpoint ids per query of :func:`writes_in` (well under either backend's limit)."""


def delta_history(
    decoder: Decoder,
    db: Db,
    thread_id: str,
    at: Stored,
    channels: Sequence[str],
) -> dict[str, tuple[Any, list[Any]]]:
    """Delta channels not stored in the checkpoint ``at``, as LangGraph rebuilds them:
    each channel's value stored at its nearest snapshot up the parent chain (None when
    there is none up to the root: empty), and every write since, oldest first.

    A channel written rarely (the plan, decisions) is snapshotted only every 5,000
    supersteps, and walking up to it decoded every checkpoint on the way. The
    checkpoint's metadata counts how many parents up each snapshot is, so only the
    chain's ids are read and only the checkpoints holding the snapshots decoded (the
    store's saver does the same: OnwardSqliteSaver.full_history); where that finds no
    snapshot, the walk does."""
    seeds: dict[str, Any] = {}
    chains: dict[str, list[str]] = {}
    by_distance = distances(db, thread_id, at.id)
    counted = {ch: by_distance[ch] for ch in channels if by_distance.get(ch, 0) >= 1}
    if counted:
        ids = chain(db, thread_id, at.id, max(counted.values()))
        decoded: dict[str, dict[str, Any]] = {}
        for ch, distance in counted.items():
            if distance >= len(ids):
                if ids and ids[-1][1] is None:  # never snapshotted: from the thread's start
                    seeds[ch], chains[ch] = None, [i for i, _ in ids[1:]]
                continue
            cid = ids[distance][0]
            if cid not in decoded:
                found = ancestor(decoder, db, thread_id, cid)
                decoded[cid] = found[1] if found is not None else {}
            if isinstance(decoded[cid].get(ch), Seed):
                seeds[ch], chains[ch] = decoded[cid][ch], [i for i, _ in ids[1 : distance + 1]]
    _walk(
        decoder,
        db,
        thread_id,
        at.parent_id,
        [ch for ch in channels if ch not in chains],
        seeds,
        chains,
    )
    writes = writes_in(decoder, db, thread_id, chains)
    return {ch: (seeds.get(ch), writes[ch]) for ch in channels}


def _walk(
    decoder: Decoder,
    db: Db,
    thread_id: str,
    parent_id: str | None,
    channels: list[str],
    seeds: dict[str, Any],
    chains: dict[str, list[str]],
) -> None:
    """The channels' snapshots found by decoding each ancestor in turn, from
    ``parent_id`` up (into ``seeds`` and ``chains``)."""
    remaining = set(channels)
    for ch in channels:
        chains[ch] = []
    seen: set[str] = set()
    cursor = parent_id
    while cursor is not None and remaining and cursor not in seen:
        seen.add(cursor)
        found = ancestor(decoder, db, thread_id, cursor)
        if found is None:
            break
        for ch in remaining:
            chains[ch].append(cursor)
        for ch in [c for c in remaining if c in found[1]]:
            seeds[ch] = found[1][ch]
            remaining.discard(ch)
        cursor = found[0]


def interrupts(decoder: Decoder, db: Db, thread_id: str, checkpoint_id: str) -> list[Interrupt]:
    """The questions of the checkpoint's pending writes; any other pending write (a task
    that finished, an answer, an error) needs LangGraph's bookkeeping."""
    rows = _writes(db, thread_id, checkpoint_id)
    if any(r[3] != INTERRUPT for r in rows):
        raise FullRead("pending writes other than questions")
    if len({r[1] for r in rows}) > 1:
        raise FullRead("questions of several tasks (LangGraph orders them by task)")
    found: list[Interrupt] = []
    for r in rows:
        value = decoder.loads(r[4], r[5])
        items = value if isinstance(value, list | tuple) else [value]
        if not all(isinstance(i, Interrupt) for i in items):
            raise FullRead("an interrupt write of another shape")
        found.extend(items)
    return found
