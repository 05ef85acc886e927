"""The transitions a run took, read from its checkpoint history (the LangGraph way).

A checkpoint says which nodes run next (``next``); its child, saved after they ran, says
where they led. So each (parent, child saved by the loop) pair gives (node that ran → node
that runs next) pairs; a checkpoint with nothing next ends the run (END). A person's edit
(``update_state``, source "update") is not a transition: the pair that leads into it is
skipped. Used by the tests that keep the drawn graph honest.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.graph import END
from langgraph.types import StateSnapshot


def transitions(history: Iterable[StateSnapshot]) -> set[tuple[str, str]]:
    """``history`` as ``get_state_history`` gives it. Each checkpoint is paired with its
    parent, not its neighbour in time: a resume from a past checkpoint (time travel, a
    fork) starts a branch whose first checkpoint follows the past one."""
    snaps = list(history)
    by_id = {_id(s.config): s for s in snaps}
    seen: set[tuple[str, str]] = set()
    for newer in snaps:
        older = by_id.get(_id(newer.parent_config)) if newer.parent_config else None
        if older is None or (newer.metadata or {}).get("source") != "loop" or not older.next:
            continue
        after = set(newer.next) or {END}
        seen.update((ran, nxt) for ran in set(older.next) for nxt in after)
    return seen


def _id(config: Any) -> str | None:
    found = (config or {}).get("configurable", {}).get("checkpoint_id")
    return str(found) if found else None


def thread_transitions(
    graph: Any, thread_id: str, *, limit: int | None = None
) -> set[tuple[str, str]]:
    """The transitions of one thread of a compiled graph with a checkpointer (its last
    ``limit`` checkpoints)."""
    config = {"configurable": {"thread_id": thread_id}}
    return transitions(graph.get_state_history(config, limit=limit))
