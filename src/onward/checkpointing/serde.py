"""How checkpoints are (de)serialized: LangGraph's msgpack, with onward's type tags and
lazy collections.

The format is LangGraph's (``JsonPlusSerializer`` with onward's types on its strict
allowlist) with two differences. An onward value names its type by its tag
(checkpointing/tags.py), not by the module its class lives in, and is read back through
the tag registry, as are the names older stores wrote. And the collections that grow with
a run (step records, artifact refs, a plan's steps) are written as one msgpack extension
each (code ``EXT_LAZY``, checkpointing/lazy.py), so a load creates no object per item and
decodes an item only when it is read. Checkpoints written before this read as they did;
checkpoints written now need this serializer.

A large blob is also decoded once per process: answering a question loads the thread
three times (to find the question, to start the drive, and LangGraph's own load). The
cache is keyed by the blob's bytes, so it cannot serve a stale value (a checkpoint
rewritten under the same id has other bytes), and by the decoding hook, so a clone with
a wider allowlist never reads what a narrower one decoded. Callers get fresh dicts and
lists, so changing a loaded value cannot change the cache; models and lazy collections
are immutable.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import datetime
from enum import Enum
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_DELTA_SNAPSHOT,
    EXT_METHOD_SINGLE_ARG,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)
from langgraph.types import Interrupt, Send
from pydantic import BaseModel

from onward._compat.langgraph_checkpoint import MSGPACK_OPTIONS as _OPTION
from onward._compat.langgraph_checkpoint import DeltaSnapshot as _DeltaSnapshot
from onward._compat.langgraph_checkpoint import ext_hook
from onward._compat.langgraph_checkpoint import msgpack_default as _msgpack_default
from onward.checkpointing import lazy, tags
from onward.checkpointing.format import (
    CHUNKED,
    COMPRESS_MIN_BYTES,
    COMPRESSED,
    EXT_LAZY,
    ZDICTS,
    deflate,
    inflate,
    stored_name,
)
from onward.errors import StoreCorruptError
from onward.model.state import Plan, PlanSteps
from onward.store.encryption import Cipher

ExtHook = Callable[[int, bytes], Any]

CACHE_MIN_BYTES = 256 * 1024
"""Blobs at least this large are decoded once per process (smaller ones decode in well
under a millisecond)."""
CACHE_MAX_BYTES = 16 * 1024 * 1024
"""Total size of the cached blobs (about two snapshots of a 10,000-step run); the least
recently read go first."""


def checkpoint_types() -> tuple[type[Any], ...]:
    """onward types that go into checkpoints: the classes of the tag registry."""
    return tuple(tags.tags_by_class())


CORE_MESSAGES = (
    *(
        f"{kind}{part}"
        for kind in ("Base", "Human", "AI", "System", "Chat", "Tool", "Function")
        for part in ("Message", "MessageChunk")
    ),
    "RemoveMessage",
)
"""The LangChain message classes LangGraph always allows in a checkpoint (the list its
graphs add to every allowlist; tests/unit/test_private_imports.py compares the two)."""


def core_message_allowlist() -> set[tuple[str, ...]]:
    """(module, class) of each of :data:`CORE_MESSAGES` this langchain-core has."""
    from langchain_core import messages

    found = (getattr(messages, name, None) for name in CORE_MESSAGES)
    return {(cls.__module__, cls.__name__) for cls in found if cls is not None}


def checkpoint_serde(cipher: Cipher | None) -> JsonPlusSerializer | EncryptedSerializer:
    """The serializer of a store's checkpoints (encrypted when the store has a key)."""
    plain = OnwardSerializer(allowed_msgpack_modules=None).with_msgpack_allowlist(
        (*checkpoint_types(), *tags.stored_names())
    )
    return plain if cipher is None else EncryptedSerializer(cipher, plain)


class OnwardSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` that reads onward's tags and decodes a large blob once (see
    the module docstring). LangGraph clones it (``copy.copy``) to widen the allowlist;
    clones share the cache and keep their own allowlist of tagged types."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cache = _DecodeCache()
        allowed = kwargs.get("allowed_msgpack_modules")
        self._allowed: frozenset[tuple[str, ...]] | None = (
            None if allowed is True else _allow_keys(allowed or ())
        )
        """What the allowlist holds (None: everything), as LangGraph keys its own."""

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> JsonPlusSerializer:
        extra = tuple(extra_allowlist)
        clone = super().with_msgpack_allowlist(extra)
        if isinstance(clone, OnwardSerializer) and clone is not self and self._allowed is not None:
            clone._allowed = self._allowed | _allow_keys(extra)
        return clone

    def allows(self, stored: tags.Tag, tag: tags.Tag) -> bool:
        """Whether the allowlist lets a value stored as ``stored`` (its ``tag``) be built:
        the stored name, the tag or the class's own (module, name) is on it."""
        allowed = self._allowed
        if allowed is None or stored in allowed or tag in allowed:
            return True
        cls = tags.resolve(tag)
        return (cls.__module__, cls.__name__) in allowed

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
        key = (ext_hook(self), bytes(blob))  # a memoryview (some drivers) is unhashable
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
        """LangGraph's hook (with this serializer's allowlist) that also reads onward's
        types by tag (and the names older stores wrote), the lazy collections, and the
        Send and Interrupt that carry onward values; built once per hook (clones with
        another allowlist get their own)."""
        base = ext_hook(self)
        made = getattr(self, "_made_hooks", None)
        if made is not None and made[0] is base:
            return made[1]  # type: ignore[no-any-return]

        def inner(blob: bytes) -> Any:
            return ormsgpack.unpackb(blob, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)

        def hook(code: int, data: bytes) -> Any:
            if code == EXT_LAZY:
                try:
                    kind, packed = ormsgpack.unpackb(data)
                    return lazy.unpack_kind(kind, packed, inner)
                except (ValueError, TypeError, ormsgpack.MsgpackDecodeError) as exc:
                    _FAILED.reason = str(exc) or type(exc).__name__
                    raise
            if code == EXT_DELTA_SNAPSHOT:
                return _DeltaSnapshot(inner(data))
            if code in _NAMED:
                stored = stored_name(data) or ("", "")
                tag = tags.tag_of(stored)
                if tag is not None:
                    return _build(code, inner(data), self.allows(stored, tag), tag)
                if stored in _LANGGRAPH_TYPES:
                    return _langgraph_type(stored, inner(data), lambda: base(code, data))
            return base(code, data)

        self._made_hooks = (base, hook)
        return hook


_FAILED = threading.local()
"""Why the lazy-collection hook failed in this thread (ormsgpack hides the hook's error)."""

_NAMED = frozenset(
    {EXT_CONSTRUCTOR_SINGLE_ARG, EXT_CONSTRUCTOR_POS_ARGS, EXT_CONSTRUCTOR_KW_ARGS, EXT_PYDANTIC_V2}
)
"""The extensions that name a type (module, name, ...): onward's are read by tag here."""


def _send(args: list[Any]) -> Send:
    return Send(*args[:2]) if len(args) == 2 else Send(args[0], args[1], timeout=args[2])


_LANGGRAPH_TYPES: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("langgraph.types", "Send"): _send,
    ("langgraph.types", "Interrupt"): lambda kwargs: Interrupt(**kwargs),
}
"""LangGraph's own types that carry onward values (a task's payload, a question): read here
so that what they carry is read by tag too (LangGraph's hook reads its own nested values)."""


def _langgraph_type(stored: tags.Tag, tup: Any, theirs: Callable[[], Any]) -> Any:
    """One of :data:`_LANGGRAPH_TYPES` from its decoded payload; one this LangGraph does
    not build from it (another release's shape) is left to LangGraph's own read."""
    try:
        return _LANGGRAPH_TYPES[stored](tup[2])
    except Exception:
        return theirs()


def _allow_keys(entries: Iterable[Any]) -> frozenset[tuple[str, ...]]:
    """Allowlist entries (classes or name tuples) as LangGraph keys them."""
    return frozenset(
        (e.__module__, e.__name__) if isinstance(e, type) else tuple(e) for e in entries
    )


def _build(code: int, tup: Any, allowed: bool, tag: tags.Tag) -> Any:
    """An onward value read by its tag, built as LangGraph builds one (a blocked type or
    one that no longer validates: its fields, as LangGraph gives them)."""
    if not allowed:
        return tup[2]
    cls = tags.resolve(tag)
    try:
        if code == EXT_CONSTRUCTOR_SINGLE_ARG:
            return cls(tup[2])
        if code == EXT_CONSTRUCTOR_POS_ARGS:
            return cls(*tup[2])
        return cls(**tup[2])
    except Exception:
        if code == EXT_PYDANTIC_V2:
            return cls.model_construct(**tup[2])
        return tup[2]


def encode_fields(fields: Any) -> bytes:
    """A value as msgpack bytes, onward's types by tag (a lazy collection's item)."""
    encoded: bytes = ormsgpack.packb(fields, default=_default, option=_OPTION)
    return encoded


def decode_own(blob: bytes) -> Any:
    """Bytes :func:`encode_fields` made in this process, decoded (every onward type)."""
    return _OWN.loads_typed(("msgpack", blob))


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
        table[Plan] = lazy.encoded_plan
        for collection in lazy.NAMES:
            table[collection] = lazy.encoded_lazy
        table[_DeltaSnapshot] = _encoded_delta
        _ENCODERS.update(table)
    return _ENCODERS.get(kind, _msgpack_default)


def _encoded_delta(obj: Any) -> Any:
    return ormsgpack.Ext(
        EXT_DELTA_SNAPSHOT, ormsgpack.packb(obj.value, default=_default, option=_OPTION)
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
# bytes: tests/store/test_serde.py compares them).


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
    """LangGraph's encoding of an enum member (module, class, value), with its tag."""
    hit = _ENUMS.get(id(obj))
    if hit is None:
        tag = tags.tags_by_class()[type(obj)]
        encoded = ormsgpack.Ext(
            EXT_CONSTRUCTOR_SINGLE_ARG, ormsgpack.packb((*tag, obj.value), option=_OPTION)
        )
        hit = _ENUMS[id(obj)] = (obj, encoded)
    return hit[1]


_ENUMS: dict[int, tuple[Enum, Any]] = {}
"""Encoded members of onward's enums by ``id`` (a member lives as long as its class, and
these are module-level classes; there are a few dozen)."""


def _allowed(base: type[Any]) -> frozenset[type[Any]]:
    """onward's subclasses of ``base`` on the checkpoint allowlist (others keep LangGraph's
    encoding)."""
    return frozenset(t for t in checkpoint_types() if isinstance(t, type) and issubclass(t, base))


def _encoded_model(obj: BaseModel) -> Any:
    """LangGraph's encoding of a model (module, class, fields), with its tag for module and
    class, and two differences.
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
            (*tags.tags_by_class()[cls], fields, "model_validate_json"),
            default=_default,
            option=_OPTION,
        ),
    )


_LAZY_TYPES: frozenset[type[Any]] = frozenset({Plan, PlanSteps, *lazy.NAMES})
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


_OWN = checkpoint_serde(None)
"""The serializer :func:`decode_own` reads this process's own bytes with."""
