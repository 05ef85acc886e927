"""The transitions a run took, read from its checkpoint history (the LangGraph way).

Each edge of a compiled graph is a write: the task of the node that ran writes
``branch:to:<next>`` (or a ``Send`` to the next node), and those writes are saved as the
pending writes of the checkpoint the task ran from. So each checkpoint whose child was saved
by the loop gives exact (node that ran → node it led to) pairs, even in a parallel wave; a
node that led nowhere in a superstep after which nothing runs ended the run (END). A
person's edit (``update_state``, source "update") is not a transition: the pair that leads
into it is skipped. Used by the tests that keep the drawn graph honest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from langgraph.constants import TASKS
from langgraph.graph import END
from langgraph.types import Send, StateSnapshot

Writes = Callable[[Any], Sequence[tuple[str, str, Any]]]
"""The pending writes (task id, channel, value) saved on a checkpoint, by its config."""

_BRANCH = "branch:to:"


def transitions(
    history: Iterable[StateSnapshot], writes: Writes, *, since: datetime | None = None
) -> set[tuple[str, str]]:
    """``history`` as ``get_state_history`` gives it. Each checkpoint is paired with its
    parent, not its neighbour in time: a resume from a past checkpoint (time travel, a
    fork) starts a branch whose first checkpoint follows the past one. ``since``: only
    the steps that started from a checkpoint saved from then on (a store copied from an
    older release holds its graph's transitions, not this one's)."""
    snaps = list(history)
    by_id = {_id(s.config): s for s in snaps}
    seen: set[tuple[str, str]] = set()
    for newer in snaps:
        older = by_id.get(_id(newer.parent_config)) if newer.parent_config else None
        if older is None or (newer.metadata or {}).get("source") != "loop" or not older.tasks:
            continue
        if since is not None and (
            older.created_at is None or datetime.fromisoformat(older.created_at) < since
        ):
            continue  # its tasks' writes may be the older release's
        seen |= _step(older, writes(older.config), ended=not newer.next)
    return seen


def _step(
    older: StateSnapshot, saved: Sequence[tuple[str, str, Any]], *, ended: bool
) -> set[tuple[str, str]]:
    names = {t.id: t.name for t in older.tasks}
    led: dict[str, set[str]] = {name: set() for name in names.values()}
    for task_id, channel, value in saved:
        name = names.get(task_id)
        if name is None:
            continue
        if channel.startswith(_BRANCH):
            led[name].add(channel.removeprefix(_BRANCH))
        elif channel == TASKS and isinstance(value, Send):
            led[name].add(value.node)
    pairs = {(name, nxt) for name, targets in led.items() for nxt in targets}
    if ended:
        pairs |= {(name, END) for name, targets in led.items() if not targets}
    return pairs


def _id(config: Any) -> str | None:
    found = (config or {}).get("configurable", {}).get("checkpoint_id")
    return str(found) if found else None


def thread_transitions(
    graph: Any, thread_id: str, *, limit: int | None = None, since: datetime | None = None
) -> set[tuple[str, str]]:
    """The transitions of one thread of a compiled graph with a checkpointer (its last
    ``limit`` checkpoints, those saved from ``since`` on)."""
    config = {"configurable": {"thread_id": thread_id}}

    def writes(at: Any) -> Sequence[tuple[str, str, Any]]:
        found = graph.checkpointer.get_tuple(at)
        return list(found.pending_writes or []) if found else []

    return transitions(graph.get_state_history(config, limit=limit), writes, since=since)
