"""A run's ``values`` events by reference: no copy of the thread's state per superstep.

A values event is the thread's whole state after a superstep (LangGraph Server's
contract), so a long run's state grows with every event. The drive hands its feed a
:class:`StateAt` instead of that state as JSON: the graph's chunk (the channels' reducers
build new values, so the chunk never changes afterwards) and, once the loop saved it, the
id of the checkpoint holding the same state. The JSON is made from one state when a
reader sends the event (:func:`resolve`): a ``runs.wait``, or an ``updates`` or
``messages-tuple`` stream, never pays for the values it does not send.

The store keeps ``{"$checkpoint": id, "$thread": thread}`` for such an event (about 100
bytes, whatever the state's size), so the bytes kept per superstep stay flat as a run
grows. A client that resumes a values stream with ``Last-Event-ID`` gets each event made
from its checkpoint: the same JSON the live stream sent (LangGraph Server replays every
stored event of a resumable stream, exactly; so does onward, without storing states). A
values chunk no checkpoint follows (an interrupt's, one the server makes) is kept whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from onward.serve.clients import Clients
from onward.serve.encoded import kept_by, kept_values, values_bytes
from onward.serve.views import at_checkpoint
from onward.serve.wire import chat_values

REF = "$checkpoint"
"""Key of a stored values event that names its checkpoint instead of holding the state."""
THREAD = "$thread"
MISSING = object()
""":func:`resolve`'s answer for a checkpoint the store does not hold (yet: another process
commits it with its next step; or no more: the thread was deleted)."""

Resolve = Callable[[Any], Awaitable[Any]]
"""A values event's data (a :class:`StateAt`, a stored reference, or JSON) → its JSON."""


class StateAt:
    """The thread's state after a superstep: the graph's chunk while it is held, and the
    checkpoint that saved it once known."""

    __slots__ = ("checkpoint_id", "raw", "thread_id")

    def __init__(self, thread_id: str, raw: Any, checkpoint_id: str | None = None) -> None:
        self.thread_id, self.raw, self.checkpoint_id = thread_id, raw, checkpoint_id

    def stored(self) -> Any:
        """What the store keeps: the reference, or the state itself without one."""
        if self.checkpoint_id:
            return {REF: self.checkpoint_id, THREAD: self.thread_id}
        return chat_values(self.raw)

    def dropped(self) -> StateAt | None:
        """The event without its chunk (a feed keeps few): its reference, if it has one."""
        if not self.checkpoint_id:
            return None
        return StateAt(self.thread_id, None, self.checkpoint_id)


def reference(data: Any) -> tuple[str, str] | None:
    """(thread id, checkpoint id) of a stored values reference, else None."""
    if isinstance(data, StateAt) and data.raw is None and data.checkpoint_id:
        return data.thread_id, data.checkpoint_id
    if isinstance(data, dict) and isinstance(data.get(REF), str) and len(data) == 2:
        return str(data[THREAD]), data[REF]
    return None


class Encoded(bytes):
    """A values event's JSON, encoded (onward.serve.encoded): sent as it is."""


def resolve(clients: Clients, data: Any) -> Any:
    """A values event's JSON: :class:`Encoded` when made from a state; :data:`MISSING`
    when it names a checkpoint the store does not hold. Blocking when it reads that
    checkpoint (call it off the event loop); a chunk the drive holds is only encoded."""
    if isinstance(data, StateAt) and data.raw is not None:
        if not data.checkpoint_id:
            return Encoded(values_bytes(data.raw))
        config = {
            "configurable": {"thread_id": data.thread_id, "checkpoint_id": data.checkpoint_id}
        }
        # A streamed superstep: its JSON is kept as the thread's latest only (the state a
        # chat UI reads as the run ends); a read (state, history) keeps what it makes.
        return Encoded(kept_values(clients.kept(), config, data.raw, streamed=True))
    ref = reference(data)
    if ref is None:
        return data
    thread_id, checkpoint_id = ref
    with clients.use() as ow:
        snap = ow.graph.get_state(at_checkpoint(ow, thread_id, checkpoint_id))
        if snap.created_at is None:
            return MISSING
        return Encoded(kept_values(kept_by(ow.store.saver), snap.config, snap.values))


def encoded_at_once(clients: Clients, data: Any) -> bool:
    """Whether :func:`resolve` only encodes ``data``: a chunk the drive holds, whose
    checkpoint's kept text (if it has one) is looked up without opening a client. Anything
    else may read the store, so it is resolved off the event loop (an outage never stalls
    the loop)."""
    if not isinstance(data, StateAt) or data.raw is None:
        return False
    return not data.checkpoint_id or clients.kept_known()


def plain(found: Any) -> Any:
    """What :func:`resolve` found as plain JSON data (for a document that holds it)."""
    return json.loads(found) if isinstance(found, Encoded) else found


def needs_resolving(data: Any) -> bool:
    return isinstance(data, StateAt) or reference(data) is not None


def resolver(
    clients: Clients, unfinished: Callable[[], bool] | None = None, poll: float = 0.25
) -> Resolve:
    """:func:`resolve` for an event loop. ``unfinished``: whether the run may still
    commit checkpoints (another process drives it): a reference to one not committed
    yet is looked up again until it is there or the run ended (then it is skipped)."""

    async def one(data: Any) -> Any:
        if not needs_resolving(data):
            return data
        if encoded_at_once(clients, data):  # no thread hop: the encoding holds the GIL
            return resolve(clients, data)
        while True:
            found = await asyncio.to_thread(resolve, clients, data)
            if found is not MISSING or unfinished is None:
                return found
            if not await asyncio.to_thread(unfinished):
                return MISSING
            await asyncio.sleep(poll)

    return one
