"""A thread state's JSON as the server sends it, made from parts made once.

A state's values hold the whole run: their JSON grows with it (the plan, every step's
record, the conversation with a tool-call pair per step). Consecutive
checkpoints share nearly all of it, so the answer is joined from encoded parts kept by
what they are made of, each exactly the JSON :func:`onward.serve.wire.chat_values` makes:

* a step record or an artifact reference, by its encoded bytes (equal bytes, equal item);
* the plan, by the plan object (a plan is never changed in place);
* a settled step's chat messages, by the plan object and the step's record.

And a checkpoint's whole values, by the checkpoint: a checkpoint never changes, and its
values only when rows are saved at an older one (a run resumed from it), which drops them
with the values the savers keep (:meth:`onward.checkpointing.values.CheckpointValues.wrote`).
The bytes are those of ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` of
the same data: a client gets the same answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Hashable, Mapping
from typing import Any

from langgraph.types import StateSnapshot
from pydantic import BaseModel

from onward.checkpointing.values import CheckpointValues
from onward.model.lazy import LazyMap
from onward.model.state import Plan, RunState
from onward.observe.chat import conversation_parts, step_pair
from onward.serve.wire import chat_values, jsonable, run_state, state_fields

PARTS_KEPT = 8192
"""Encoded parts (records, step messages, plans) kept per process."""


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""``json.dumps`` with these arguments, made once: ``dumps`` made an encoder per call (a
state's JSON is some forty calls), ``json.dumps`` reuses one only for its defaults. An
encoder keeps nothing between calls."""


def dumps(value: Any) -> bytes:
    """Plain JSON data as the server's answers encode it."""
    return _ENCODER.encode(value).encode("utf-8")


_KEYS: dict[str, bytes] = {}
"""A state's keys as ``"key":``, made once each (a state has a few dozen)."""


def _key(name: Any) -> bytes:
    found = _KEYS.get(name) if type(name) is str else None
    if found is None:
        found = dumps(str(name)) + b":"
        if type(name) is str and len(_KEYS) < 1024:
            _KEYS[name] = found
    return found


class _Parts:
    """Encoded parts by a key, with the objects they were made of (an object's id is a
    key only while the object lives: the part is used only if it is the same object).
    Read without a lock (a dict's get is atomic); the oldest made go first."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._made: dict[Hashable, tuple[tuple[Any, ...], bytes]] = {}
        self._lock = threading.Lock()
        self.found = self._made
        """The parts by key, each (objects it was made of, part), to read in a loop."""

    def get(self, key: Hashable, of: tuple[Any, ...] = ()) -> bytes | None:
        found = self._made.get(key)
        if found is None:
            return None
        if of and any(a is not b for a, b in zip(found[0], of, strict=True)):
            return None
        return found[1]

    def put(self, key: Hashable, of: tuple[Any, ...], made: bytes) -> bytes:
        with self._lock:
            self._made.pop(key, None)
            self._made[key] = (of, made)
            while len(self._made) > self._kept:
                del self._made[next(iter(self._made))]
        return made


_PARTS = _Parts(PARTS_KEPT)


def _content_key(content: Any) -> tuple[Hashable, tuple[Any, ...]]:
    """(key, objects to check) of an item's content: its bytes, or the item itself."""
    if type(content) is bytes:
        return content, ()
    return id(content), (content,)


def values_bytes(values: Any) -> bytes:
    """``dumps(chat_values(values))``, joined from kept parts."""
    if not values:
        return b"{}"
    state = run_state(values)
    if state is None or not isinstance(values, Mapping):
        return dumps(chat_values(values))
    parts = [
        _key(k) + (_messages(state) if k == "messages" else _value(v)) for k, v in values.items()
    ]
    if "messages" not in values:
        parts.append(b'"messages":' + _messages(state))
    return b"{" + b",".join(parts) + b"}"


_PLAIN = (str, int, float, bool, type(None))
"""Types :func:`~onward.serve.wire.jsonable` gives back as they are."""


def _value(value: Any) -> bytes:
    if type(value) in _PLAIN:
        return dumps(value)
    if isinstance(value, LazyMap):
        return _items(value)
    if type(value) is Plan:
        return _plan(value)
    if isinstance(value, BaseModel) and value.model_config.get("frozen"):
        return _kept_object(value)
    return dumps(jsonable(value))


def _kept_object(value: Any) -> bytes:
    """An object's JSON, made once per object: a frozen model (the state's goal, policy,
    budget) or a message of the state's own (a channel's value is never changed in
    place: its reducer makes a new one)."""
    key = ("object", id(value))
    made = _PARTS.get(key, (value,))
    if made is None:
        made = _PARTS.put(key, (value,), dumps(jsonable(value)))
    return made


def _items(value: LazyMap[Any]) -> bytes:
    """A lazy collection's JSON: each item's (with its key) made once per content."""
    kind = type(value)
    found = _PARTS.found
    out = []
    for key, content in value.contents():
        made = found.get((kind, key, content if type(content) is bytes else id(content)))
        if made is None or (made[0] and made[0][0] is not content):
            ckey, objects = _content_key(content)
            item = dumps(str(key)) + b":" + dumps(jsonable(value[key]))
            out.append(_PARTS.put((kind, key, ckey), objects, item))
        else:
            out.append(made[1])
    return b"{" + b",".join(out) + b"}"


def _plan(plan: Plan) -> bytes:
    key = ("plan", id(plan))
    made = _PARTS.get(key, (plan,))
    if made is None:
        made = _PARTS.put(key, (plan,), dumps(jsonable(plan)))
    return made


def _messages(state: RunState) -> bytes:
    """The conversation's JSON: a settled step's messages made once per plan and record."""
    plan = state.plan
    index = plan.index()
    records = dict(state.steps.contents())
    out = []
    for part in conversation_parts(state):
        if not isinstance(part, str):
            out.append(_kept_object(part))
            continue
        content = records.get(part)
        ckey, objects = _content_key(content)
        key = ("pair", id(plan), part, ckey)
        made = _PARTS.get(key, (plan, *objects))
        if made is None:
            pair = b",".join(dumps(jsonable(m)) for m in step_pair(state, index, part))
            made = _PARTS.put(key, (plan, *objects), pair)
        out.append(made)
    return b"[" + b",".join(out) + b"]"


def kept_values(
    kept: CheckpointValues | None, snap_config: Any, values: Any, *, streamed: bool = False
) -> bytes:
    """:func:`values_bytes` of a checkpoint's values, kept by ``kept`` per checkpoint
    (``streamed``: a run's superstep as it streams, kept only as its thread's latest:
    :meth:`~onward.checkpointing.values.CheckpointValues.keep_streamed`)."""
    key = _checkpoint_key(snap_config)
    if kept is None or key is None:
        return values_bytes(values)
    found = kept.text(key, read=not streamed)
    if found is None:
        found = values_bytes(values)
        (kept.keep_streamed if streamed else kept.keep_text)(key, found)
    return found


def _checkpoint_key(config: Any) -> tuple[str, str, str] | None:
    conf = (config or {}).get("configurable") or {}
    thread_id, checkpoint_id = conf.get("thread_id"), conf.get("checkpoint_id")
    if not thread_id or not checkpoint_id:
        return None
    return str(thread_id), str(conf.get("checkpoint_ns", "")), str(checkpoint_id)


def state_bytes(snap: StateSnapshot, kept: CheckpointValues | None) -> bytes:
    """``dumps(thread_state(snap))``: its values joined from kept parts."""
    values = kept_values(kept, snap.config, snap.values)
    rest = dumps(state_fields(snap))
    return b'{"values":' + values + (b"," + rest[1:] if len(rest) > 2 else b"}")


def kept_by(saver: Any) -> CheckpointValues | None:
    """The values a store's saver keeps (None for a saver that keeps none)."""
    found = getattr(saver, "values", None)
    return found if isinstance(found, CheckpointValues) else None
