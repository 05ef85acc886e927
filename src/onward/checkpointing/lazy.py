"""How onward's lazy collections are stored in a checkpoint (the model's side is
onward.model.lazy).

Step records, artifact refs and a plan's steps are written as one msgpack extension each
(code ``EXT_LAZY``): ``[kind, packed]``, ``packed`` the collection's ids, one body of its
encoded items with their offsets, and its summary (statuses...). A large body is stored as
chunks deflated one by one (checkpointing/format.py's ``ChunkedBody``): a load inflates
only the chunks of the items it reads. Each item is encoded as LangGraph's msgpack with
onward's type tags (checkpointing/encode.py), so it decodes with the store's allowlist.

Importing this module installs that item codec into the model (``use_codec``). It needs no
LangGraph until an item is encoded or re-read from bytes this process made (the
LangGraph-free readers only unpack).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import ormsgpack

from onward.checkpointing.format import EXT_LAZY, stored_items, storing_items
from onward.model.lazy import Decode, use_codec
from onward.model.state import ArtifactRefs, Plan, PlanSource, PlanSteps, StepRecords


def pack(collection: Any) -> list[Any]:
    """A lazy collection's ``packed`` form as a checkpoint stores it (a large body in
    deflated chunks)."""
    ids, body, ends, *summary = collection.packed()
    return [ids, *storing_items(body, ends), *summary]


def unpack(cls: Any, packed: list[Any], decode: Decode) -> Any:
    """A lazy collection of class ``cls`` from :func:`pack`'s form, its items decoded by
    ``decode`` when read."""
    ids, body, offsets, *summary = packed
    return cls.unpacked([ids, *stored_items(body, offsets), *summary], decode)


def _plan(packed: list[Any], decode: Decode) -> Plan:
    version, source, steps = packed
    return Plan(version=version, source=PlanSource(source), steps=unpack(PlanSteps, steps, decode))


KINDS: Mapping[str, Callable[[list[Any], Decode], Any]] = {
    "steps": lambda packed, decode: unpack(StepRecords, packed, decode),
    "artifacts": lambda packed, decode: unpack(ArtifactRefs, packed, decode),
    "plan": _plan,
}
"""How each kind of ``EXT_LAZY`` extension is read back."""
NAMES: Mapping[type, str] = {StepRecords: "steps", ArtifactRefs: "artifacts"}
"""The mappings stored as they are (a plan is stored as its fields and its steps)."""


def unpack_kind(kind: Any, packed: Any, decode: Decode) -> Any:
    """The collection an ``EXT_LAZY`` extension holds (``ValueError``: an unknown kind)."""
    if kind not in KINDS:
        raise ValueError(f"an onward collection of unknown kind {kind!r}")
    return KINDS[kind](packed, decode)


def encoded_lazy(obj: Any) -> ormsgpack.Ext:
    """A step-record or artifact-ref mapping as its ``EXT_LAZY`` extension."""
    return ormsgpack.Ext(EXT_LAZY, ormsgpack.packb([NAMES[type(obj)], pack(obj)]))


def encoded_plan(obj: Plan) -> ormsgpack.Ext:
    """A plan as its ``EXT_LAZY`` extension: its version, source and packed steps."""
    steps = pack(PlanSteps.of(obj.steps))
    return ormsgpack.Ext(
        EXT_LAZY, ormsgpack.packb(["plan", [obj.version, obj.source.value, steps]])
    )


def _serde() -> ModuleType:
    """The serializer module, imported when an item is first encoded (it needs LangGraph;
    reading a checkpoint's collections does not: onward status)."""
    from onward.checkpointing import serde

    return serde


class MsgpackItems:
    """The item codec of checkpoints: an item's fields as LangGraph's msgpack with onward's
    type tags."""

    def encode(self, fields: Mapping[str, Any]) -> bytes:
        encoded: bytes = _serde().encode_fields(fields)
        return encoded

    def decode(self, blob: bytes) -> Any:
        return _serde().decode_own(blob)

    def needle(self, field: str, value: Any) -> bytes:
        """msgpack writes a map's key, then its value (a string in its shortest form)."""
        return ormsgpack.packb(field) + ormsgpack.packb(value)


use_codec(MsgpackItems())
