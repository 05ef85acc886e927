"""Delta channels' values by checkpoint: a thread's state rebuilt once, then rolled forward.

LangGraph rebuilds a ``DeltaChannel``'s value at a checkpoint from the channel's last
snapshot plus every write since (up to ``SNAPSHOT_EVERY`` updates apart). Every
``get_state``, every entry of a history page and every drive's load did that again: on a
1,000-step thread ``get_history(limit=10)`` decoded and replayed about a thousand writes
ten times, and ``get_state`` fetched them all for one answer.

A checkpoint's value is its parent's value plus the writes stored at the parent (the rule
LangGraph's walk applies), and neither changes once the checkpoint exists. So the savers
keep the values they rebuilt (:class:`CheckpointValues`, per store and process, the
least recently read dropped first), and rebuild a checkpoint's value from its nearest kept
ancestor within :data:`WINDOW` parents: that value plus the writes stored in between, one
checkpoint at a time, never past a channel's last stored value (a fork stores its head's
values, which are not its parent's plus the writes; the checkpoint's
``counters_since_delta_snapshot`` say how far back that value is). ``DeltaChannel``
reducers are batching-invariant (LangGraph's contract), so the result equals one replay
of all the writes. With no kept ancestor in
the window, the value at the window's far end is rebuilt LangGraph's way and rolled
forward to the target, keeping each value on the way: the checkpoints a history page
lists next. LangGraph gets the value as the channel's seed, with no writes to replay.

Writes saved at a checkpoint that already has descendants (a run resumed from an older
checkpoint, a fork) drop the thread's values after it; a deleted thread drops them all.
A process does not see another process's writes at old checkpoints: its kept values are
the ones those checkpoints had when it read them.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.channels.base import BaseChannel
from langgraph.checkpoint.base import (
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    writes_sort_key,
)

from onward._compat.langgraph_checkpoint import DeltaSnapshot
from onward.checkpointing.serde import fresh

WINDOW = 16
"""Parents searched for a kept value, and values kept on the way from a rebuilt one (a
history page of ten fits)."""
KEPT = 64
"""Checkpoints whose values a store keeps per process."""
TEXT_BYTES = 32 * 1024 * 1024
"""Bytes of checkpoints' encoded answers (:meth:`CheckpointValues.keep_text`) a store
keeps per process (a few history pages of a long thread; the least recently read go
first)."""
STREAMED = 10
"""A thread's streamed supersteps whose encoded values a store keeps until a read uses
them: a history page as a chat UI reads it as a run ends (useStream's ``limit``: 10)."""

STREAMING = 64
"""Threads whose streamed supersteps a store keeps (the latest to stream): more than the
runs a server drives at once, so a run's supersteps stay kept until its client reads."""

Key = tuple[str, str, str]
"""(thread id, checkpoint namespace, checkpoint id)."""
WriteRow = tuple[str, str, str, int, str | None, bytes, str]
"""A stored write: (checkpoint id, channel, task id, idx, type, value, task path)."""


class Source(Protocol):
    """What a saver reads for :func:`rolled`."""

    serde: Any

    def full_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """The channels' histories at a checkpoint, LangGraph's way."""
        ...

    def chain(self, thread_id: str, ns: str, checkpoint_id: str, depth: int) -> list[str]:
        """The checkpoint's id and its ancestors' ids, nearest first, ``depth`` parents up."""
        ...

    def counters(self, thread_id: str, ns: str, checkpoint_id: str) -> Mapping[str, Any]:
        """The checkpoint's ``counters_since_delta_snapshot`` (empty when it has none)."""
        ...

    def writes_at(
        self, thread_id: str, ns: str, checkpoint_ids: Sequence[str], channels: Sequence[str]
    ) -> list[WriteRow]:
        """The writes stored at those checkpoints to those channels."""
        ...

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...


class CheckpointValues:
    """Delta channels' values by checkpoint, and the channels' specs that rebuild them."""

    def __init__(self, kept: int = KEPT) -> None:
        self._lock = threading.Lock()
        self._kept = kept
        self._values: OrderedDict[Key, dict[str, Any]] = OrderedDict()
        self._specs: dict[str, DeltaChannel[Any]] = {}
        self._unsure: set[str] = set()
        """Channels two graphs declared differently: never rolled here."""
        self.reads = 0
        """Values rebuilt LangGraph's way (what a cold read costs; tests count it)."""
        self._texts: OrderedDict[Key, bytes] = OrderedDict()
        self._text_bytes = 0
        self._threads: dict[str, set[Key]] = {}
        """The keys of each thread held in either: a write looks at its own thread's."""
        self._streamed: dict[str, deque[Key]] = {}
        """Each thread's texts kept by :meth:`keep_streamed` that no read has used yet,
        oldest first."""

    def learn(self, channels: Mapping[str, BaseChannel[Any, Any, Any]]) -> None:
        """The delta channels of a graph that uses the saver."""
        with self._lock:
            for name, spec in channels.items():
                if not isinstance(spec, DeltaChannel):
                    continue
                known = self._specs.setdefault(name, spec)
                if known is not spec and known != spec:
                    self._unsure.add(name)

    def specs(self, channels: Sequence[str]) -> dict[str, DeltaChannel[Any]] | None:
        with self._lock:
            if any(ch not in self._specs or ch in self._unsure for ch in channels):
                return None
            return {ch: self._specs[ch] for ch in channels}

    def get(self, key: Key, channels: Sequence[str]) -> dict[str, Any] | None:
        with self._lock:
            found = self._values.get(key)
            if found is None or any(ch not in found for ch in channels):
                return None
            self._values.move_to_end(key)
            return found

    def put(self, key: Key, values: dict[str, Any]) -> None:
        with self._lock:
            self._values[key] = {**self._values.get(key, {}), **values}
            self._values.move_to_end(key)
            self._threads.setdefault(key[0], set()).add(key)
            while len(self._values) > self._kept:
                self._drop_value(next(iter(self._values)))

    def text(self, key: Key, *, read: bool = True) -> bytes | None:
        """A checkpoint's encoded answer kept by :meth:`keep_text` or :meth:`keep_streamed`,
        if it still is (``read``: a reader's use, which a streamed text then is too)."""
        with self._lock:
            found = self._texts.get(key)
            if found is not None:
                self._texts.move_to_end(key)
                if read:
                    self._unstream(key)  # a reader's text now: kept as reads keep theirs
            return found

    def keep_text(self, key: Key, text: bytes) -> None:
        """Keep what a reader made of a checkpoint's values (the server's JSON of them): it
        changes when the values do, so it is dropped with them (:meth:`wrote`)."""
        with self._lock:
            self._keep(key, text)

    def keep_streamed(self, key: Key, text: bytes) -> None:
        """Keep a streamed superstep's text as one of its thread's :data:`STREAMED` latest,
        dropping the oldest of them no read has used: a chat UI reads the thread as its run
        ends (the state, or a history page: the supersteps it just streamed), and most
        other supersteps are never read again."""
        with self._lock:
            if not self._keep(key, text):
                return
            latest = self._streamed.pop(key[0], None) or deque()
            self._streamed[key[0]] = latest  # the thread streamed last now
            if key not in latest:
                latest.append(key)
            while len(latest) > STREAMED:
                self._drop_text(latest[0])
            while len(self._streamed) > STREAMING:  # threads whose runs ended long ago
                for old in self._streamed.pop(next(iter(self._streamed))):
                    self._drop_text(old)

    def _keep(self, key: Key, text: bytes) -> bool:
        """Under the lock; False when ``text`` is too large to keep."""
        if len(text) > TEXT_BYTES // 4:
            return False
        self._drop_text(key)
        self._text_bytes += len(text)
        self._texts[key] = text
        self._threads.setdefault(key[0], set()).add(key)
        while self._text_bytes > TEXT_BYTES:  # the oldest go: never this one (at most a quarter)
            self._drop_text(next(iter(self._texts)))
        return True

    def _drop_value(self, key: Key) -> None:
        """Under the lock."""
        if self._values.pop(key, None) is not None:
            self._unindex(key)

    def _drop_text(self, key: Key) -> None:
        """Under the lock."""
        old = self._texts.pop(key, None)
        if old is not None:
            self._text_bytes -= len(old)
            self._unstream(key)
            self._unindex(key)

    def _unstream(self, key: Key) -> None:
        """Under the lock: ``key`` is no longer a streamed text awaiting a read."""
        latest = self._streamed.get(key[0])
        if latest is not None and key in latest:
            latest.remove(key)
            if not latest:
                del self._streamed[key[0]]

    def _unindex(self, key: Key) -> None:
        if key in self._values or key in self._texts:
            return
        keys = self._threads.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._threads[key[0]]

    def seed(self, thread_id: str, checkpoint_id: str, state: Mapping[str, Any]) -> bool:
        """Keep the delta channels' values a graph's loop had when it saved a checkpoint
        (its ``values`` chunk for the superstep: the state the checkpoint holds, which a
        replay of its writes rebuilds the same, DeltaChannel's contract). A reader of the
        run's last checkpoints then rolls from them instead of walking the thread back to
        each channel's last snapshot. False (nothing kept) when the chunk lacks one."""
        with self._lock:
            channels = [ch for ch in self._specs if ch not in self._unsure]
        if not channels or any(ch not in state for ch in channels):
            return False
        self.put((thread_id, "", checkpoint_id), {ch: state[ch] for ch in channels})
        return True

    def wrote(self, thread_id: str, checkpoint_id: str | None, *, itself: bool = False) -> None:
        """Rows were saved at ``checkpoint_id`` (``itself``: the checkpoint was): values of
        later checkpoints of the thread may have changed (ids order checkpoints in time)."""

        def stale(k: Key) -> bool:
            return (
                checkpoint_id is None or k[2] > checkpoint_id or (itself and k[2] == checkpoint_id)
            )

        with self._lock:
            for k in [k for k in self._threads.get(thread_id, ()) if stale(k)]:
                self._drop_value(k)
                self._drop_text(k)

    def forget(self, thread_id: str) -> None:
        self.wrote(thread_id, None)

    def counted(self) -> None:
        with self._lock:
            self.reads += 1

    def __len__(self) -> int:
        return len(self._values)


_SHARED: weakref.WeakValueDictionary[str, CheckpointValues] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared(store: str | None) -> CheckpointValues:
    """The values kept for a store in this process (every saver on it shares them);
    ``store`` None: a saver's own."""
    if store is None:
        return CheckpointValues()
    with _SHARED_LOCK:
        found = _SHARED.get(store)
        if found is None:
            found = _SHARED[store] = CheckpointValues()
        return found


def rolled(
    values: CheckpointValues, src: Source, config: RunnableConfig, channels: Sequence[str]
) -> Mapping[str, DeltaChannelHistory]:
    """The channels' histories at ``config``'s checkpoint, each its value as the seed."""
    checkpoint_id = get_checkpoint_id(config)
    specs = values.specs(channels) if channels else None
    if not checkpoint_id or specs is None:
        return src.full_history(config, channels)
    conf = config["configurable"]
    thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
    found = values.get((thread_id, ns, checkpoint_id), channels) or _roll(
        values, src, (thread_id, ns, checkpoint_id), specs
    )
    if found is None:
        return src.full_history(config, channels)
    return {ch: {"seed": DeltaSnapshot(fresh(found[ch])), "writes": []} for ch in channels}


def _roll(
    values: CheckpointValues, src: Source, key: Key, specs: dict[str, DeltaChannel[Any]]
) -> dict[str, Any] | None:
    """The value at ``key`` from its nearest kept ancestor (or the window's far end,
    rebuilt), keeping each checkpoint's value on the way."""
    thread_id, ns, checkpoint_id = key
    channels = list(specs)
    # Never past a channel's last stored value (a fork's snapshot is not its parent's
    # value plus the writes between): the checkpoint's counters say how far that is.
    counters = src.counters(thread_id, ns, checkpoint_id)
    reach = min(int(counters[ch][1]) if ch in counters else 0 for ch in channels)
    if reach < 1:
        return None
    chain = src.chain(thread_id, ns, checkpoint_id, min(WINDOW, reach))
    if not chain or chain[0] != checkpoint_id:
        return None
    depth = next(
        (d for d in range(1, len(chain)) if values.get((thread_id, ns, chain[d]), channels)),
        None,
    )
    if depth is None:
        depth = len(chain) - 1
        base = _rebuilt(values, src, (thread_id, ns, chain[depth]), specs)
        if base is None:
            return None
        values.put((thread_id, ns, chain[depth]), base)
    current = values.get((thread_id, ns, chain[depth]), channels)
    if current is None:
        return None
    by_checkpoint: dict[str, list[WriteRow]] = {}
    for row in src.writes_at(thread_id, ns, chain[1 : depth + 1], channels) if depth else []:
        by_checkpoint.setdefault(row[0], []).append(row)
    for d in range(depth, 0, -1):
        current = _applied(src, specs, current, by_checkpoint.get(chain[d], []))
        values.put((thread_id, ns, chain[d - 1]), current)
    return current


def _applied(
    src: Source, specs: dict[str, DeltaChannel[Any]], base: dict[str, Any], rows: list[WriteRow]
) -> dict[str, Any]:
    """The values after one checkpoint's writes, in the order a superstep applies them."""
    rows.sort(key=lambda r: writes_sort_key(r[6] or "", r[2], r[3]))
    out = {}
    for ch, spec in specs.items():
        writes: list[PendingWrite] = [
            (r[2], ch, src.serde.loads_typed((r[4], r[5]))) for r in rows if r[1] == ch
        ]
        out[ch] = _replayed(spec, DeltaSnapshot(fresh(base[ch])), writes) if writes else base[ch]
    return out


def _replayed(spec: DeltaChannel[Any], seed: Any, writes: list[PendingWrite]) -> Any:
    """A channel's value from a seed and writes, as LangGraph replays them."""
    channel = spec.from_checkpoint(seed)
    channel.replay_writes(writes)
    return channel.value


def _rebuilt(
    values: CheckpointValues, src: Source, key: Key, specs: dict[str, DeltaChannel[Any]]
) -> dict[str, Any] | None:
    """The values at a checkpoint as LangGraph loads them: a value stored in the
    checkpoint as is, a channel never written empty, the others from their history."""
    thread_id, ns, checkpoint_id = key
    config: RunnableConfig = {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }
    found = src.get_tuple(config)
    if found is None:
        return None
    values.counted()
    stored = found.checkpoint["channel_values"]
    versions = found.checkpoint["channel_versions"]
    walk = [ch for ch in specs if ch in versions and ch not in stored]
    histories = src.full_history(config, walk) if walk else {}
    out = {}
    for ch, spec in specs.items():
        if ch in histories:
            history = histories[ch]
            out[ch] = _replayed(spec, history.get("seed"), history["writes"])
        else:
            out[ch] = _replayed(spec, stored.get(ch), [])
    return out
