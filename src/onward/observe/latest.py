"""A run's latest state read straight from its checkpoint rows, without LangGraph.

``onward status`` and ``onward inbox`` print a run as it is now: its latest checkpoint's
channel values and the questions its pending interrupts ask. Reading them through
LangGraph (``graph.get_state``) imports LangGraph, LangChain and LangSmith and compiles
the graph: about 1.8 s of CPU for a table of a few rows. Here the same values are read
from the store's checkpoint tables (LangGraph's formats with onward's serializer,
checkpointing/serde.py: on SQLite each checkpoint one blob, on Postgres a JSON row with
the primitive values inline and the others in ``checkpoint_blobs``) and decoded with a
msgpack hook that knows onward's types only:

* the checkpoint's ``channel_values``, each channel at its value, or at
  :class:`~onward.model.run_state.RunState`'s default when it was never written;
* each delta channel not stored in it rebuilt as LangGraph does: its last snapshot up
  the parent chain, then the writes since, oldest first, through onward's reducer;
* the pending ``__interrupt__`` writes of the latest checkpoint: the questions.

Anything this does not read exactly as LangGraph would raises :class:`FullRead`, and the
caller reads through LangGraph instead (same output, the old cost): other pending writes
(a wave whose other tasks finished), interrupts of several tasks, a running run
(``paused_before`` needs LangGraph's next tasks), a type outside onward's, a value of
another shape than the field's, an older state schema. Damaged bytes are a
:class:`~onward.errors.StoreCorruptError` (exit 2), as on the full path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from onward.checkpointing import tags
from onward.checkpointing.lazy import unpack_kind
from onward.model.state import (
    SCHEMA_VERSION,
    ArtifactRefs,
    Budget,
    Decision,
    Goal,
    Plan,
    RunFailure,
    RunStatus,
    StepRecords,
    Usage,
    Waiting,
    append_items,
    merge_optional_records,
    replace_value,
)
from onward.observe.checkpoint import (
    STDLIB,
    Decoder,
    Interrupt,
    Message,
    Seed,
    Stored,
    check_reduced,
    delta_history,
    interrupts,
    latest_checkpoint,
    latest_id,
    stopped,
)
from onward.observe.checkpoint import (
    FullRead as FullRead,
)
from onward.observe.kinds import EventKind
from onward.observe.shape import DELTA_EMPTY
from onward.observe.view import RunView, run_view, waiting_status
from onward.people.inbox import PendingDecision
from onward.store.tables import RunEntry, Tables

if TYPE_CHECKING:
    from onward.observe.events import EventLog
    from onward.store.encryption import Cipher
    from onward.store.leases import Leases
    from onward.store.sql import Db


class Source(Protocol):
    """What the read reads: a :class:`~onward.store.tables.Tables`, or an open store's
    own connection (onward.observe.reading)."""

    @property
    def db(self) -> Db: ...
    @property
    def cipher(self) -> Cipher | None: ...
    @property
    def leases(self) -> Leases: ...
    @property
    def events(self) -> EventLog: ...


_EMPTY: Mapping[str, Callable[[], Any]] = {
    "list": list,
    "dict": dict,
    "Plan": Plan,
    "StepRecords": StepRecords,
    "ArtifactRefs": ArtifactRefs,
}
DELTA_DEFAULTS: Mapping[str, Callable[[], Any]] = {
    channel: _EMPTY[cls] for channel, cls in DELTA_EMPTY.items()
}
"""RunState's delta channels and the empty value each starts from (onward.observe.shape)."""


def append_messages(current: list[Message], writes: Sequence[Any]) -> list[Message]:
    """run_state.append_messages on :class:`Message`: an id from its position when it has
    none, and a message whose id is already there replaces it (``add_messages``)."""
    result = list(current)
    for write in writes:
        batch = write if isinstance(write, list) else [write]
        if not all(isinstance(m, Message) and m.kind != "RemoveMessage" for m in batch):
            raise FullRead("a message write other than LangChain messages")
        named = [
            m if m.id is not None else Message(m.kind, m.content, f"m{len(result) + i}")
            for i, m in enumerate(batch)
        ]
        at = {m.id: i for i, m in enumerate(result)}
        for m in named:
            if m.id in at:
                result[at[m.id]] = m
            else:
                at[m.id] = len(result)
                result.append(m)
    return result


def merge_records(current: Mapping[str, Any], writes: Sequence[Mapping[str, Any]]) -> Any:
    """state.merge_steps, its settled records kept decoded (see LazyMap.merged)."""
    return StepRecords.of(current).merged(writes, pack=False)


def merge_refs(current: Mapping[str, Any], writes: Sequence[Mapping[str, Any]]) -> Any:
    """state.merge_artifacts, kept decoded."""
    return ArtifactRefs.of(current).merged(writes, pack=False)


REDUCERS: Mapping[str, Callable[[Any, Sequence[Any]], Any]] = {
    "messages": append_messages,
    "plan": replace_value,
    "steps": merge_records,
    "artifacts": merge_refs,
    "decisions": append_items,
    "approvals": merge_optional_records,
}


@dataclass(slots=True)
class Snapshot:
    """A run's latest values (a :class:`~onward.observe.view.ViewedState`) and questions."""

    status: RunStatus = RunStatus.PLANNING
    goal: Goal | None = None
    workdir: str = "."
    plan: Plan = field(default_factory=Plan)
    steps: StepRecords = field(default_factory=StepRecords)
    artifacts: ArtifactRefs = field(default_factory=ArtifactRefs)
    failure: RunFailure | None = None
    resume_at: datetime | None = None
    usage: Usage = field(default_factory=Usage)
    budget: Budget = field(default_factory=Budget)
    waiting: dict[str, Waiting | None] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    interrupts: list[Interrupt] = field(default_factory=list)


FIELD_TYPES: Mapping[str, type | tuple[type, ...]] = {
    "status": RunStatus,
    "goal": (Goal, type(None)),
    "workdir": str,
    "plan": Plan,
    "steps": StepRecords,
    "artifacts": ArtifactRefs,
    "failure": (RunFailure, type(None)),
    "resume_at": (datetime, type(None)),
    "usage": Usage,
    "budget": Budget,
    "waiting": dict,
    "decisions": list,
    "messages": list,
}
"""The channels a view reads, and the types RunState's validation would keep as they are
(any other shape: RunState coerces it, so the full read does)."""


# -- decoding ------------------------------------------------------------------------


def _types() -> dict[tuple[str, str], Callable[..., Any]]:
    """onward's checkpoint types but RunState, by every name a store gives them (their
    tags and legacy names), and the standard ones."""
    found: dict[tuple[str, str], Callable[..., Any]] = dict(STDLIB)
    found.update(tags.classes(light=True))
    return found


def latest(tables: Source, thread_id: str) -> Snapshot:
    """The thread's latest values and open questions, as ``graph.get_state`` gives them."""
    db = tables.db
    decoder = Decoder(tables.cipher, _types(), unpack_kind)
    stored = latest_checkpoint(decoder, db, thread_id)
    if stored.v < 1:
        raise FullRead("a checkpoint of an older LangGraph format")
    values, versions = stored.values, stored.versions
    if type(values.get("status")) is str:  # Postgres keeps text inline: RunState's coercion
        try:
            values["status"] = RunStatus(values["status"])
        except ValueError:
            raise FullRead("a status onward does not know") from None
    check_reduced(values, versions)
    # As LangGraph: a delta channel stored here is its value (a snapshot; None is empty);
    # one written but not stored is rebuilt; one never written is empty.
    replay = [ch for ch in DELTA_DEFAULTS if ch in versions and ch not in values]
    values.update(_rebuilt(decoder, db, thread_id, stored, replay))
    for ch in DELTA_DEFAULTS:
        if ch in values:
            values[ch] = _seeded(ch, values[ch])
    if int(values.get("schema_version", SCHEMA_VERSION)) != SCHEMA_VERSION:
        raise FullRead("state of an older schema (RunState migrates it)")
    snap = Snapshot()
    for name, kind in FIELD_TYPES.items():
        if name not in values:
            continue  # never written: RunState's default
        if not isinstance(values[name], kind):
            raise FullRead(f"{name} as {type(values[name]).__name__}")
        setattr(snap, name, values[name])
    if not all(isinstance(w, Waiting | None) for w in snap.waiting.values()):
        raise FullRead("waiting entries of another shape")
    if not all(isinstance(d, Decision) for d in snap.decisions):
        raise FullRead("decisions of another shape")
    snap.interrupts = interrupts(decoder, db, thread_id, stored.id)
    _materialise(snap)
    return snap


def _rebuilt(
    decoder: Decoder, db: Any, thread_id: str, at: Stored, channels: list[str]
) -> dict[str, Any]:
    """Delta channels at the checkpoint ``at``: each from its nearest snapshot up the
    chain (or empty at the root), then every write since through onward's reducer. Kept
    for the next read of the same checkpoint (:data:`_KEPT`)."""
    key = (db.where, thread_id, at.id, tuple(channels))
    with _KEPT_LOCK:
        kept = _KEPT.get(key)
        if kept is not None:
            _KEPT.move_to_end(key)
    if kept is None:
        kept = {}
        for ch, (stored, writes) in delta_history(decoder, db, thread_id, at, channels).items():
            value = _seeded(ch, stored)
            kept[ch] = REDUCERS[ch](value, writes) if writes else value
        with _KEPT_LOCK:
            _KEPT[key] = kept
            while len(_KEPT) > KEPT_CHECKPOINTS:
                _KEPT.popitem(last=False)
    return {ch: v.copy() if isinstance(v, list) else v for ch, v in kept.items()}


KEPT_CHECKPOINTS = 16
"""Checkpoints whose rebuilt delta channels a process keeps. A checkpoint's ancestors and
their writes never change once it exists, so what was rebuilt for it stays true: a
process that reads a run again (``Onward.get`` in a server, a notebook) pays the rebuild
once per new checkpoint, as LangGraph's read does with the values its saver keeps."""
_KEPT: OrderedDict[tuple[str, str, str, tuple[str, ...]], dict[str, Any]] = OrderedDict()
_KEPT_LOCK = threading.Lock()


def _seeded(channel: str, stored: Any) -> Any:
    """``DeltaChannel.from_checkpoint``: a snapshot's value, empty for None, else as is."""
    if isinstance(stored, Seed):
        return stored.value
    return DELTA_DEFAULTS[channel]() if stored is None else stored


def _materialise(snap: Snapshot) -> None:
    """Decode what a view reads now, so that a damaged item is this read's error, not one
    raised later while printing."""
    for step in snap.plan.steps:
        snap.steps.get(step.id)
    for name in snap.artifacts:
        snap.artifacts[name]


# -- the views -----------------------------------------------------------------------


def status_of(tables: Source, thread_id: str, snap: Snapshot) -> RunStatus:
    """views.state_of's correction: an unfinished run with questions waits for a person,
    or is suspended (a budget stop, or a question a sweep suspended)."""
    if not snap.interrupts or snap.status.finished:
        return snap.status

    def suspended() -> Iterator[Any]:
        for e in tables.events.list(thread_id, [EventKind.RUN_SUSPENDED]):
            yield e.detail.get("interrupt_id")

    return waiting_status(snap.interrupts, suspended)


def pending(thread_id: str, objective: str, snap: Snapshot) -> list[PendingDecision]:
    """views.pending_of: the questions, oldest first."""
    found = [
        p
        for i in snap.interrupts
        for p in PendingDecision.of_interrupt(thread_id, i.id, i.value, objective)
    ]
    return sorted(found, key=lambda p: p.asked_at)


def view(tables: Tables, thread_id: str) -> RunView:
    """``onward status --json``: the run's view, read without LangGraph (or :class:`FullRead`)."""
    return view_of(tables, thread_id, tables.run(thread_id).objective)


def view_of(tables: Source, thread_id: str, objective: str) -> RunView:
    """``Onward.get``: the view of the run (its goal's ``objective``), read without
    LangGraph (or :class:`FullRead`)."""
    snap = latest(tables, thread_id)
    snap.status = status_of(tables, thread_id, snap)
    if snap.status is RunStatus.RUNNING:
        raise FullRead("a running run: what it pauses before is LangGraph's next tasks")
    return run_view(
        tables.leases,
        thread_id,
        snap,
        report=snap.messages[-1].text if _reported(snap) and snap.messages else "",
        pending=pending(thread_id, objective, snap) if snap.status.waiting else [],
        paused_before=[],
    )


def asked(tables: Source, thread_id: str, objective: str) -> list[PendingDecision]:
    """``Onward.pending``: the questions of the latest checkpoint's pending interrupts,
    oldest first; the checkpoint's values are not read (as ``onward inbox``'s plain read):
    its id, then its writes."""
    decoder = Decoder(tables.cipher, _types(), unpack_kind)
    checkpoint_id = latest_id(tables.db, thread_id)
    snap = Snapshot(interrupts=interrupts(decoder, tables.db, thread_id, checkpoint_id))
    return pending(thread_id, objective, snap)


def questions(tables: Source, runs: Sequence[RunEntry]) -> list[PendingDecision]:
    """``Onward.inbox`` without resume tokens: every question of these runs, oldest first."""
    items: list[PendingDecision] = []
    for run in runs:
        items += asked(tables, run.thread_id, run.objective)
    return sorted(items, key=lambda p: p.asked_at)


def _reported(snap: Any) -> bool:
    """Whether the last message is the report: a finished run's, or a stopped run's (an
    API cancel saves it *suspended* with no time and says why: client.driving)."""
    return bool(snap.status.finished or stopped(snap.status, snap.resume_at, bool(snap.interrupts)))
