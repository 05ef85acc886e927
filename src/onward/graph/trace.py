"""The transitions a run took, read from its checkpoint history (the LangGraph way).

Checkpoint ``k`` says which nodes run next (``next``); checkpoint ``k+1`` was saved after
they ran and says where they led. So each consecutive pair of checkpoints saved by the loop
gives (node that ran → node that runs next) pairs; a checkpoint with nothing next ends the
run (END). A person's edit (``update_state``, source "update") is not a transition: the
pair that leads into it is skipped. Used by the tests that keep the drawn graph honest.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from langgraph.graph import END
from langgraph.types import StateSnapshot


def transitions(history: Iterable[StateSnapshot]) -> set[tuple[str, str]]:
    """``history`` newest first, as ``get_state_history`` gives it."""
    snaps = list(history)[::-1]
    seen: set[tuple[str, str]] = set()
    for older, newer in itertools.pairwise(snaps):
        if (newer.metadata or {}).get("source") != "loop" or not older.next:
            continue
        after = set(newer.next) or {END}
        seen.update((ran, nxt) for ran in set(older.next) for nxt in after)
    return seen


def thread_transitions(
    graph: Any, thread_id: str, *, limit: int | None = None
) -> set[tuple[str, str]]:
    """The transitions of one thread of a compiled graph with a checkpointer (its last
    ``limit`` checkpoints)."""
    config = {"configurable": {"thread_id": thread_id}}
    return transitions(graph.get_state_history(config, limit=limit))
