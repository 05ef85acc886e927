"""Where an edited human message forks the thread, whatever checkpoint the client sent.

agent-chat-ui (and any ``useStream`` page) sends, for an edited message M, the parent of
the first state *it fetched* that holds M. It fetches only the newest states of the
thread's history (``limit: 10``), so on a long thread that parent is a checkpoint in the
middle of the goal M started, not the one just before M. The edit means "M, said
differently", so :func:`fork_point` maps any checkpoint of the goal M started (a state
that is not finished, or whose messages end with M) to the checkpoint just before M:
the thread's start for the first message, else where the goal before M finished. A
finished checkpoint stays as it is (a message after that goal).
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from onward.client import Onward
from onward.serve.views import at_checkpoint


def humans(ow: Onward, thread_id: str, checkpoint_id: str) -> tuple[int, bool]:
    """(how many human messages the state at the checkpoint holds, whether it is where
    a goal ended: finished, and its last message not a human one)."""
    state, _next = ow.state_at(thread_id, checkpoint_id)
    count = sum(1 for m in state.messages if isinstance(m, HumanMessage))
    last_human = bool(state.messages) and isinstance(state.messages[-1], HumanMessage)
    return count, state.status.finished and not last_human


def parent_of(ow: Onward, thread_id: str, checkpoint_id: str) -> tuple[str | None, str]:
    """The checkpoint's parent (None at the root of the thread) and the checkpoint's
    ``source`` (``update`` for one a new goal's message made)."""
    found = ow.store.saver.get_tuple(at_checkpoint(ow, thread_id, checkpoint_id))
    if found is None:
        return None, ""
    source = str((found.metadata or {}).get("source") or "")
    parent = (found.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return (str(parent) if parent else None), source


def fork_point(ow: Onward, thread_id: str, checkpoint_id: str) -> str:
    """The checkpoint an edit sent with ``checkpoint_id`` forks from (see the module doc):
    ``checkpoint_id`` itself where a goal ended or at the thread's root; else, for the
    first message, the root; for a later one, the parent of the update that added it
    (the newest ancestor holding fewer human messages). Only updates' parents are read
    whole: walking a long goal back reads checkpoint metadata, not states."""
    count, ended = humans(ow, thread_id, checkpoint_id)
    at = checkpoint_id
    parent, source = parent_of(ow, thread_id, at)
    if ended or parent is None:
        return checkpoint_id
    while parent is not None:
        if count > 1 and source == "update" and humans(ow, thread_id, parent)[0] < count:
            return parent
        at = parent
        parent, source = parent_of(ow, thread_id, at)
    return at  # the root: the first message is the one edited
