"""How checkpoints are (de)serialized: LangGraph's msgpack, with onward's lazy collections.

The format is LangGraph's (``JsonPlusSerializer`` with onward's types on its strict
allowlist) except for the collections that grow with a run: step records, artifact refs
and a plan's steps are written as one msgpack extension each (code ``EXT_LAZY``: ids,
one body of encoded items with their offsets, statuses; see :mod:`onward.model.lazy`), so a
load creates no object per item and decodes an item only when it is read. Checkpoints
written before this read as they did; checkpoints written now need this serializer.

A large blob is also decoded once per process: answering a question loads the thread
three times (to find the question, to start the drive, and LangGraph's own load). The
cache is keyed by the blob's bytes, so it cannot serve a stale value (a checkpoint
rewritten under the same id has other bytes), and by the decoding hook, so a clone with
a wider allowlist never reads what a narrower one decoded. Callers get fresh dicts and
lists, so changing a loaded value cannot change the cache; models and lazy collections
are immutable.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_DELTA_SNAPSHOT,
    EXT_METHOD_SINGLE_ARG,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)
from langgraph.types import Send
from pydantic import BaseModel

from onward._compat.langgraph_checkpoint import MSGPACK_OPTIONS as _OPTION
from onward._compat.langgraph_checkpoint import DeltaSnapshot as _DeltaSnapshot
from onward._compat.langgraph_checkpoint import msgpack_default as _msgpack_default
from onward.checkpointing.format import (
    CHUNKED,
    COMPRESS_MIN_BYTES,
    COMPRESSED,
    EXT_LAZY,
    ZDICTS,
    deflate,
    inflate,
)
from onward.errors import StoreCorruptError
from onward.model.lazy import Decode
from onward.model.state import (
    CHECKPOINT_TYPES,
    ArtifactRefs,
    Plan,
    PlanSource,
    PlanSteps,
    StepRecords,
)
from onward.store.encryption import Cipher
from onward.verification import checks

ExtHook = Callable[[int, bytes], Any]

CACHE_MIN_BYTES = 256 * 1024
"""Blobs at least this large are decoded once per process (smaller ones decode in well
under a millisecond)."""
CACHE_MAX_BYTES = 16 * 1024 * 1024
"""Total size of the cached blobs (about two snapshots of a 10,000-step run); the least
recently read go first."""


MOVED_MODULES: Mapping[str, str] = {
    "onward" + ".state": "onward.model.state",
    "onward" + ".checks": "onward.verification.checks",
    "onward" + ".policy": "onward.policies.run",
    "onward" + ".retry": "onward.policies.retry",
}
"""Where the modules named in checkpoints written before the package moved into folders
(2026-12) live now. Their names stay importable as aliases and on the allowlist, so old
stores load (tests/golden/v1 and v2 resume). The names are split so a search for the old
import paths finds no code that uses them."""


def legacy_names() -> tuple[tuple[str, str], ...]:
    """(old module, class) for every checkpoint type whose module moved; makes the old
    module names resolve to the new modules."""
    for old, new in MOVED_MODULES.items():
        sys.modules.setdefault(old, importlib.import_module(new))
    moved = {new: old for old, new in MOVED_MODULES.items()}
    return tuple(
        (moved[t.__module__], t.__name__) for t in checkpoint_types() if t.__module__ in moved
    )


def checkpoint_types() -> tuple[type[Any], ...]:
    """onward types that go into checkpoints (LangGraph's strict msgpack allowlist)."""
    check_types = tuple(
        t
        for t in vars(checks).values()
        if isinstance(t, type) and issubclass(t, checks._Check) and t.__module__ == checks.__name__
    )
    return CHECKPOINT_TYPES + check_types


CORE_MESSAGES = (
    *(
        f"{kind}{part}"
        for kind in ("Base", "Human", "AI", "System", "Chat", "Tool", "Function")
        for part in ("Message", "MessageChunk")
    ),
    "RemoveMessage",
)
"""The LangChain message classes LangGraph always allows in a checkpoint (the list its
graphs add to every allowlist; tests/test_private_imports.py compares the two)."""


def core_message_allowlist() -> set[tuple[str, ...]]:
    """(module, class) of each of :data:`CORE_MESSAGES` this langchain-core has."""
    from langchain_core import messages

    found = (getattr(messages, name, None) for name in CORE_MESSAGES)
    return {(cls.__module__, cls.__name__) for cls in found if cls is not None}


def checkpoint_serde(cipher: Cipher | None) -> JsonPlusSerializer | EncryptedSerializer:
    """The serializer of a store's checkpoints (encrypted when the store has a key)."""
    plain = OnwardSerializer(allowed_msgpack_modules=None).with_msgpack_allowlist(
        (*checkpoint_types(), *legacy_names())
    )
    return plain if cipher is None else EncryptedSerializer(cipher, plain)


class OnwardSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` that decodes a large blob once (see the module docstring).
    LangGraph clones it (``copy.copy``) to widen the allowlist; clones share the cache."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cache = _DecodeCache()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if obj is None or isinstance(obj, bytes | bytearray):
            return super().dumps_typed(obj)
        CHUNKED.bodies = 0
        blob = ormsgpack.packb(obj, default=_default, option=_OPTION)
        # A blob with a body in deflated chunks (a long run's snapshot) stays as it is:
        # deflating it whole again would cost every load an inflate of all of it, the
        # cost the chunks are there to avoid, for the few bytes of ids and statuses.
        if len(blob) >= COMPRESS_MIN_BYTES and not CHUNKED.bodies:
            small = deflate(blob)
            if len(small) < len(blob):
                return COMPRESSED, small
        return "msgpack", blob

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, blob = data
        compressed = type_ in ZDICTS
        if not compressed and type_ != "msgpack":
            return super().loads_typed(data)
        # A compressed blob may inflate past the cache's threshold: look it up from a
        # sixteenth of it (a checkpoint deflates to a quarter or less).
        if len(blob) < (CACHE_MIN_BYTES // 16 if compressed else CACHE_MIN_BYTES):
            return self._unpack(inflate(blob, type_) if compressed else blob)
        key = (self._unpack_ext_hook, bytes(blob))  # a memoryview (some drivers) is unhashable
        value = self._cache.get(key)
        if value is None:
            raw = inflate(blob, type_) if compressed else blob
            CHUNKED.readable = 0
            value = self._unpack(raw)
            # What it costs to decode, not to store; with the chunks it may inflate.
            cost = len(raw) + CHUNKED.readable
            if cost < CACHE_MIN_BYTES:
                return value
            self._cache.put(key, value, cost)
        return fresh(value)

    def _unpack(self, blob: bytes) -> Any:
        _FAILED.reason = None
        try:
            return ormsgpack.unpackb(
                blob, ext_hook=self._lazy_hook(), option=ormsgpack.OPT_NON_STR_KEYS
            )
        except ValueError as exc:  # ormsgpack replaces a hook's error with "ext_hook failed"
            reason = _FAILED.reason
            if reason is None:
                raise
            raise StoreCorruptError(
                f"a checkpoint cannot be read: {reason}. Nothing was changed; restore the "
                "store from a backup or upgrade onward if a newer one wrote it"
            ) from exc

    def _lazy_hook(self) -> ExtHook:
        """LangGraph's hook (with this serializer's allowlist) that also reads the lazy
        collections; built once per hook (clones with another allowlist get their own)."""
        base = self._unpack_ext_hook
        made = getattr(self, "_made_hooks", None)
        if made is not None and made[0] is base:
            return made[1]  # type: ignore[no-any-return]

        def decode_item(blob: bytes) -> Any:
            return ormsgpack.unpackb(blob, ext_hook=base, option=ormsgpack.OPT_NON_STR_KEYS)

        def hook(code: int, data: bytes) -> Any:
            if code == EXT_LAZY:
                try:
                    kind, packed = ormsgpack.unpackb(data)
                    if kind not in _LAZY_KINDS:
                        raise ValueError(f"an onward collection of unknown kind {kind!r}")
                    return _LAZY_KINDS[kind](packed, decode_item)
                except (ValueError, TypeError, ormsgpack.MsgpackDecodeError) as exc:
                    _FAILED.reason = str(exc) or type(exc).__name__
                    raise
            if code == EXT_DELTA_SNAPSHOT:
                return _DeltaSnapshot(
                    ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
                )
            return base(code, data)

        self._made_hooks = (base, hook)
        return hook


_FAILED = threading.local()
"""Why the lazy-collection hook failed in this thread (ormsgpack hides the hook's error)."""


def _plan(packed: list[Any], decode: Decode) -> Plan:
    version, source, steps = packed
    return Plan(version=version, source=PlanSource(source), steps=PlanSteps.unpacked(steps, decode))


_LAZY_KINDS: dict[str, Callable[[list[Any], Decode], Any]] = {
    "steps": StepRecords.unpacked,
    "artifacts": ArtifactRefs.unpacked,
    "plan": _plan,
}
_LAZY_NAMES: dict[type, str] = {StepRecords: "steps", ArtifactRefs: "artifacts"}
"""The mappings stored as they are (a plan is stored as its fields and its steps)."""


def _default(obj: Any) -> Any:
    """LangGraph's msgpack encoding, except that a lazy collection (and a plan, for its
    steps) is stored as its items' own bytes, so a load decodes only what it reads."""
    # One lookup by exact type (a checkpoint calls this a few dozen times per step).
    encode = _ENCODERS.get(type(obj))
    if encode is None:
        encode = _encoder(type(obj))
    return encode(obj)


_ENCODERS: dict[type[Any], Callable[[Any], Any]] = {}
"""How :func:`_default` encodes each of the types it does not leave to LangGraph (filled
on first use: the allowlist's types are listed once)."""


def _encoder(kind: type[Any]) -> Callable[[Any], Any]:
    if not _ENCODERS:
        table: dict[type[Any], Callable[[Any], Any]] = {}
        for enum in _allowed(Enum):
            table[enum] = _encoded_enum
        table[datetime] = _encoded_datetime
        for model in _allowed(BaseModel):
            table[model] = _encoded_frozen if model.model_config.get("frozen") else _encoded_model
        # These before the allowlist's encodings (a plan is an allowed model too).
        table[Send] = _encoded_send
        table[Plan] = _encoded_plan
        for lazy in _LAZY_NAMES:
            table[lazy] = _encoded_lazy
        table[_DeltaSnapshot] = _encoded_delta
        _ENCODERS.update(table)
    return _ENCODERS.get(kind, _msgpack_default)


def _encoded_delta(obj: Any) -> Any:
    return ormsgpack.Ext(
        EXT_DELTA_SNAPSHOT, ormsgpack.packb(obj.value, default=_default, option=_OPTION)
    )


def _encoded_lazy(obj: Any) -> Any:
    return ormsgpack.Ext(EXT_LAZY, ormsgpack.packb([_LAZY_NAMES[type(obj)], obj.packed()]))


def _encoded_plan(obj: Plan) -> Any:
    steps = PlanSteps.of(obj.steps).packed()
    return ormsgpack.Ext(
        EXT_LAZY, ormsgpack.packb(["plan", [obj.version, obj.source.value, steps]])
    )


def _encoded_send(obj: Send) -> Any:
    """As LangGraph's, with its payload encoded here."""
    args = (obj.node, obj.arg) if obj.timeout is None else (obj.node, obj.arg, obj.timeout)
    return ormsgpack.Ext(
        EXT_CONSTRUCTOR_POS_ARGS,
        ormsgpack.packb(("langgraph.types", "Send", args), default=_default, option=_OPTION),
    )


# LangGraph's encodings of the two kinds every record and checkpoint holds, without the
# dozen attribute probes its generic default makes before it reaches them (the same
# bytes: tests/test_serde.py compares them).


def _encoded_datetime(obj: datetime) -> Any:
    # Kept by identity as a frozen model is: a record's times go into its write and again
    # into the checkpoint, and the run's start into every checkpoint, and ``isoformat`` is
    # most of the cost (more with pydantic's ``TzInfo``). Not by value: equal datetimes
    # in other zones encode differently.
    hit = _ENCODED.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    encoded = ormsgpack.Ext(
        EXT_METHOD_SINGLE_ARG,
        ormsgpack.packb(("datetime", "datetime", obj.isoformat(), "fromisoformat"), option=_OPTION),
    )
    _keep(obj, encoded)
    return encoded


def _encoded_enum(obj: Enum) -> Any:
    hit = _ENUMS.get(id(obj))
    if hit is None:
        hit = _ENUMS[id(obj)] = (obj, _msgpack_default(obj))
    return hit[1]


_ENUMS: dict[int, tuple[Enum, Any]] = {}
"""Encoded members of onward's enums by ``id`` (a member lives as long as its class, and
these are module-level classes; there are a few dozen)."""


def _allowed(base: type[Any]) -> frozenset[type[Any]]:
    """onward's subclasses of ``base`` on the checkpoint allowlist (others keep LangGraph's
    encoding)."""
    return frozenset(t for t in checkpoint_types() if isinstance(t, type) and issubclass(t, base))


def _encoded_model(obj: BaseModel) -> Any:
    """LangGraph's encoding of a model (module, class, fields), with two differences.
    Fields at their defaults are left out: LangGraph decodes a model with
    ``cls(**fields)``, which fills them in (most of a step record's and a task's fields
    are at their defaults; they were a fifth of every checkpoint). And a field's value is
    encoded as it is, not as ``model_dump`` turns it into dicts: a nested model of the
    allowlist is an encoded model of its own, so it decodes as its class even with its
    discriminator left out (a check's ``check``), and a frozen one is encoded once
    (:func:`_encoded_frozen`); only onward's lazy collections (a plan in a question)
    become plain values as before. Checkpoints written with every field load as before."""
    cls = type(obj)
    values = obj.__dict__  # a field's value, without a getattr call per field
    fields = {}
    for name, default in _DEFAULTS.get(cls) or _defaults(cls):
        try:
            value = values[name]
        except KeyError:  # not set on the instance (a model built without validation)
            value = getattr(obj, name)
        if value is not default and (
            default is _REQUIRED or type(value) is not type(default) or value != default
        ):
            fields[name] = (
                value if type(value) not in _LAZY_TYPES else obj.model_dump(include={name})[name]
            )
    return ormsgpack.Ext(
        EXT_PYDANTIC_V2,
        ormsgpack.packb(
            (cls.__module__, cls.__name__, fields, "model_validate_json"),
            default=_default,
            option=_OPTION,
        ),
    )


_LAZY_TYPES: frozenset[type[Any]] = frozenset({Plan, PlanSteps, *_LAZY_NAMES})
"""Values kept as plain dicts and lists inside a model, as ``model_dump`` makes them:
LangGraph decodes a model's fields with its own hook, which knows no onward collection."""
_REQUIRED = object()
"""The default of a field that has none (always written)."""
_DEFAULTS: dict[type[BaseModel], tuple[tuple[str, Any], ...]] = {}


def _defaults(cls: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    """(field name, its default) of a model class; a factory's default is what it makes
    (``[]``, ``{}``); a field without a plain default is :data:`_REQUIRED`."""
    found = _DEFAULTS.get(cls)
    if found is None:
        pairs = []
        for name, field in cls.model_fields.items():
            default: Any = _REQUIRED
            if field.default_factory is not None:
                if not field.default_factory_takes_validated_data:
                    default = field.default_factory()  # type: ignore[call-arg]
            elif not field.is_required():
                default = field.default
            pairs.append((name, default))
        found = _DEFAULTS[cls] = tuple(pairs)
    return found


def _encoded_frozen(obj: BaseModel) -> Any:
    """:func:`_encoded_model` of a frozen model, kept by identity: a frozen model cannot
    change, and the same goal, budget, policy and usage are in every checkpoint of a run
    (each re-encoded with ``model_dump`` per superstep before)."""
    hit = _ENCODED.get(id(obj))
    if hit is not None and hit[0] is obj:  # the entry holds obj: its id is not reused
        return hit[1]
    encoded = _encoded_model(obj)
    _keep(obj, encoded)
    return encoded


def _keep(obj: Any, encoded: Any) -> None:
    """Keep an immutable value's encoding for the next time the same object is encoded."""
    if len(_ENCODED) >= ENCODED_KEPT:
        _ENCODED.clear()  # a few per run are read again and again; this bounds the rest
    _ENCODED[id(obj)] = (obj, encoded)


ENCODED_KEPT = 256
_ENCODED: dict[int, tuple[Any, Any]] = {}
"""Encodings of frozen models and datetimes by ``id``; an entry holds its object, so the
``id`` is not reused while it is here."""


def fresh(value: Any) -> Any:
    """The value with new dicts and lists (models and lazy collections are immutable)."""
    kind = type(value)
    if kind is dict:
        return {k: fresh(v) for k, v in value.items()}
    if kind is list:
        return [fresh(v) for v in value]
    if kind is _DeltaSnapshot:
        return _DeltaSnapshot(fresh(value.value))
    return value


class _DecodeCache:
    """Decoded large blobs, least recently read first out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[ExtHook, bytes], tuple[Any, int]] = OrderedDict()
        self._size = 0

    def get(self, key: tuple[ExtHook, bytes]) -> Any:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def put(self, key: tuple[ExtHook, bytes], value: Any, size: int) -> None:
        with self._lock:
            if key in self._entries or size > CACHE_MAX_BYTES:
                return
            self._entries[key] = (value, size)
            self._size += size
            while self._size > CACHE_MAX_BYTES:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._size -= dropped
