"""LangGraph Server wire shapes: state snapshots, threads, runs and stream chunks as JSON.

The shapes are those ``langgraph_sdk`` and ``RemoteGraph`` read (ThreadState with
``tasks[*].interrupts``, ``checkpoint``/``parent_checkpoint`` dicts, metadata always an
object; an escalation's action request titled for a chat's card, onward.serve.cards);
values are made JSON-safe the way the reference server does it (pydantic and
LangChain messages through ``model_dump``, datetimes as ISO-8601, enums by value).
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any

from langgraph.types import Interrupt, StateSnapshot
from pydantic import BaseModel

from onward.model.lazy import LazyList, LazyMap
from onward.model.state import Plan
from onward.serve.cards import card

GRAPH_ID = "onward"
ASSISTANT_ID = str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), GRAPH_ID))
"""The default assistant's id, derived from the graph name as LangGraph Server does."""
EPOCH = "1970-01-01T00:00:00+00:00"
ITEMS_KEPT = 8192
"""Items of lazy collections (step records, artifact refs) whose JSON is kept."""


def jsonable(value: Any) -> Any:
    if isinstance(value, LazyMap):  # a long run's step records: mostly made before
        return _items_json(value)
    if isinstance(value, BaseModel):  # pydantic's JSON mode is JSON already
        if type(value) is Plan:
            return _plan_json(value)
        return value.model_dump(mode="json")
    if isinstance(value, Interrupt):  # an escalation titled for a chat's card
        return {"value": card(jsonable(value.value)), "id": value.id}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset | LazyList):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class _Made:
    """JSON made before, by a key, the least recently used dropped first."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._made: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            found = self._made.get(key)
            if found is not None:
                self._made.move_to_end(key)
            return found

    def put(self, key: Any, made: Any) -> Any:
        with self._lock:
            self._made[key] = made
            while len(self._made) > self._kept:
                self._made.popitem(last=False)
        return made


_ITEMS = _Made(ITEMS_KEPT)
_PLANS = _Made(8)


def _items_json(value: LazyMap[Any]) -> dict[str, Any]:
    """A lazy collection as JSON: an item still encoded is made once per content (the
    versions of a thread's step records share nearly all their items), without decoding
    it again; the JSON is the item's, as :func:`jsonable` makes it."""
    out: dict[str, Any] = {}
    kind = type(value)
    for key, content in value.contents():
        if type(content) is not bytes:
            out[str(key)] = jsonable(content)
            continue
        made = _ITEMS.get((kind, content))
        if made is None:
            made = _ITEMS.put((kind, content), jsonable(value[key]))
        out[str(key)] = made
    return out


def _plan_json(plan: Plan) -> Any:
    """A plan as JSON, made once per plan object (a thread's checkpoints share their plan
    until it changes; a plan is never changed in place)."""
    found = _PLANS.get(id(plan))
    if found is not None and found[0] is plan:
        return found[1]
    return _PLANS.put(id(plan), (plan, plan.model_dump(mode="json")))[1]


def run_state(values: Any) -> Any:
    """The state a values chunk holds (a ``RunState``), or None for a partial chunk."""
    from onward.model.state import RunState, migrate

    if isinstance(values, RunState):
        return values
    try:
        return RunState.model_validate(migrate(dict(values)))
    except Exception:
        return None


def conversation_of(values: Any) -> list[Any]:
    """The conversation's messages (LangChain messages) of a values chunk."""
    from onward.observe.chat import conversation

    state = run_state(values) if values else None
    return conversation(state) if state is not None else []


def chat_values(values: Any) -> Any:
    """A state's values as the API shows them: JSON, with ``messages`` the conversation
    (every settled step as a tool call and its result, onward.observe.chat)."""
    if not values:
        return {}
    from onward.observe.chat import conversation

    state = run_state(values)
    if state is None:  # a partial chunk: as it is
        return jsonable(values)
    if isinstance(values, Mapping):  # the state's own messages are replaced: not dumped
        out = {str(k): None if k == "messages" else jsonable(v) for k, v in values.items()}
    else:
        out = jsonable(values)
    out["messages"] = jsonable(conversation(state))
    return out


def checkpoint_of(config: Any) -> dict[str, Any] | None:
    if not config:
        return None
    c = config.get("configurable", {})
    return {
        "thread_id": c.get("thread_id"),
        "checkpoint_ns": c.get("checkpoint_ns", ""),
        "checkpoint_id": c.get("checkpoint_id"),
        "checkpoint_map": c.get("checkpoint_map") or {},
    }


def thread_state(snap: StateSnapshot) -> dict[str, Any]:
    return {"values": chat_values(snap.values), **state_fields(snap)}


def state_fields(snap: StateSnapshot) -> dict[str, Any]:
    """A state snapshot's fields but its values, in the wire's order (values first)."""
    checkpoint = checkpoint_of(snap.config)
    parent = checkpoint_of(snap.parent_config)
    tasks = [
        {
            "id": t.id,
            "name": t.name,
            "path": jsonable(t.path),
            "error": repr(t.error) if t.error else None,
            "interrupts": [jsonable(i) for i in t.interrupts],
            "checkpoint": None,
            "state": None,
            "result": jsonable(t.result) if t.result is not None else None,
        }
        for t in snap.tasks
    ]
    return {
        "next": list(snap.next),
        "tasks": tasks,
        "metadata": jsonable(snap.metadata) if snap.metadata else {},
        "created_at": snap.created_at or EPOCH,
        "checkpoint": checkpoint,
        "parent_checkpoint": parent,
        "interrupts": [jsonable(i) for i in snap.interrupts],
        "checkpoint_id": checkpoint["checkpoint_id"] if checkpoint else None,
        "parent_checkpoint_id": parent["checkpoint_id"] if parent else None,
    }


def assistant() -> dict[str, Any]:
    return {
        "assistant_id": ASSISTANT_ID,
        "graph_id": GRAPH_ID,
        "name": GRAPH_ID,
        "description": "onward: plan, execute, verify; humans approve what is risky",
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "version": 1,
        "created_at": EPOCH,
        "updated_at": EPOCH,
    }


def chunk(mode: str, data: Any) -> tuple[str, Any]:
    """A graph stream chunk → (SSE event name, JSON data). The graph's ``messages`` mode
    answers the API's ``messages-tuple`` and is named ``messages`` on the wire."""
    if mode == "values":
        return mode, chat_values(data)
    return mode, jsonable(data)  # a messages chunk (message, metadata) becomes a list
