"""``onward inbox`` without LangGraph and without pydantic: the questions runs wait on,
read from their latest checkpoints' pending interrupts.

A question is all in its interrupt's value (plain msgpack: dicts, lists, text, the
times as ISO text), so no run state and none of onward's models is decoded: each item
is :class:`~onward.people.inbox.PendingDecision`'s fields, made as
``PendingDecision.of_interrupt`` makes them, and printed as its ``model_dump(mode="json")``
(a test keeps the field lists, kinds and formats equal). A value pydantic would convert
or refuse (another type, a time with an odd offset) is a :class:`FullRead`: the caller
reads with the models instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from onward.observe.checkpoint import STDLIB, Decoder, FullRead, Interrupt, interrupts, latest_id
from onward.store.tables import RunEntry, Tables

WAIT_KINDS = frozenset({"approval", "plan", "escalation", "budget", "judge"})
"""``WaitKind``'s values (a test keeps them equal)."""
EXPIRY_ACTIONS = frozenset({"reject", "suspend"})
"""``ExpiryAction``'s values (a test keeps them equal)."""


class Valued(Protocol):
    """An enum member as the inbox prints it."""

    @property
    def value(self) -> str: ...


class Asked(Protocol):
    """What ``onward inbox`` prints of a question: a PendingDecision or a :class:`Question`."""

    @property
    def thread_id(self) -> str: ...
    @property
    def step_id(self) -> str | None: ...
    @property
    def kind(self) -> Valued: ...
    @property
    def tool(self) -> str: ...
    @property
    def args(self) -> dict[str, Any]: ...
    @property
    def resolved(self) -> list[dict[str, str]]: ...
    @property
    def asked_at(self) -> datetime: ...
    @property
    def expire_at(self) -> datetime: ...
    @property
    def on_expiry(self) -> Valued: ...
    @property
    def token(self) -> str | None: ...
    def model_dump(self, *, mode: str = ...) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Choice:
    """A ``WaitKind`` or ``ExpiryAction`` member, by its value."""

    value: str

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Question:
    """PendingDecision's fields, in its order (its ``--json`` is theirs)."""

    thread_id: str
    interrupt_id: str
    kind: Choice
    step_id: str | None
    tool: str
    args: dict[str, Any]
    description: str
    allowed: list[str]
    args_hash: str
    asked_at: datetime
    remind_at: datetime
    expire_at: datetime
    on_expiry: Choice
    reason: str | None
    key: str | None
    errors: list[str]
    objective: str
    token: str | None
    batch_token: str | None
    batch: list[str]
    resolved: list[dict[str, str]]

    def model_dump(self, *, mode: str = "json") -> dict[str, Any]:
        """``PendingDecision.model_dump(mode="json")``."""
        if mode != "json":
            raise ValueError("a question is dumped as JSON only")
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, Choice):
                value = value.value
            elif isinstance(value, datetime):
                value = json_time(value)
            out[name] = value
        return out


def json_time(at: datetime) -> str:
    """pydantic's JSON form of a datetime: ISO 8601, UTC as ``Z``."""
    offset = at.utcoffset()
    if offset is None:
        return at.isoformat()
    if offset == timedelta(0):
        return at.replace(tzinfo=None).isoformat() + "Z"
    if offset % timedelta(minutes=1):
        raise FullRead("a time whose offset has seconds")
    return at.isoformat()


def _plain(value: Any) -> bool:
    """JSON already: what pydantic's JSON mode leaves as it is."""
    kind = type(value)
    if kind in (str, int, bool) or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(_plain(v) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


def _text(value: Any, optional: bool = False) -> Any:
    if type(value) is str or (optional and value is None):
        return value
    raise FullRead("a question's field of another type")


def _texts(value: Any) -> list[str]:
    if type(value) is list and all(type(v) is str for v in value):
        return value
    raise FullRead("a question's list of another type")


def _resolved(value: Any) -> list[dict[str, str]]:
    if type(value) is list and all(
        type(r) is dict and all(type(v) is str for v in r.values()) for r in value
    ):
        return value
    raise FullRead("a question's resolved values of another type")


def _time(value: Any) -> datetime:
    if type(value) is not str:
        raise FullRead("a question's time of another type")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise FullRead("a question's time pydantic reads otherwise") from None


def of_interrupt(thread_id: str, interrupt_id: str, value: Any, objective: str) -> list[Question]:
    """``PendingDecision.of_interrupt``, without pydantic."""
    if not isinstance(value, dict) or "onward" not in value:
        return []
    if not _plain(value):
        raise FullRead("a question holding other values than JSON")
    metas = value["onward"].get("questions") or [value["onward"]]
    actions = value["action_requests"]
    batch = [m.get("step_id") or "plan" for m in metas]
    if len(metas) != len(actions):
        raise FullRead("questions and action requests differ in number")
    found = []
    for meta, action in zip(metas, actions, strict=True):
        if meta["kind"] not in WAIT_KINDS or meta["on_expiry"] not in EXPIRY_ACTIONS:
            raise FullRead("a question of a kind onward does not know")
        if type(action["args"]) is not dict:
            raise FullRead("a question's args of another type")
        found.append(
            Question(
                thread_id=thread_id,
                interrupt_id=_text(interrupt_id),
                kind=Choice(meta["kind"]),
                step_id=_text(meta.get("step_id"), optional=True),
                tool=_text(action["name"]),
                args=action["args"],
                description=_text(action["description"]),
                allowed=_texts(meta["allowed"]),
                args_hash=_text(meta["args_hash"]),
                asked_at=_time(meta["asked_at"]),
                remind_at=_time(meta["remind_at"]),
                expire_at=_time(meta["expire_at"]),
                on_expiry=Choice(meta["on_expiry"]),
                reason=_text(meta.get("reason"), optional=True),
                key=_text(meta.get("key"), optional=True),
                errors=_texts(meta.get("errors") or []),
                objective=objective,
                token=None,
                batch_token=None,
                batch=_texts(batch),
                resolved=_resolved(meta.get("resolved") or []),
            )
        )
    return found


def pending(tables: Tables, run: RunEntry) -> list[Question]:
    """``Onward.pending`` of one run: its latest checkpoint's questions, oldest first."""
    checkpoint_id = latest_id(tables.db, run.thread_id)
    decoder = Decoder(tables.cipher, STDLIB)
    found: list[Interrupt] = interrupts(decoder, tables.db, run.thread_id, checkpoint_id)
    items = [q for i in found for q in of_interrupt(run.thread_id, i.id, i.value, run.objective)]
    return sorted(items, key=lambda q: q.asked_at)


def inbox(tables: Tables, runs: Sequence[RunEntry]) -> list[Question]:
    """``Onward.inbox`` without resume tokens: every question of these runs, oldest first."""
    items = [q for run in runs for q in pending(tables, run)]
    return sorted(items, key=lambda q: q.asked_at)
