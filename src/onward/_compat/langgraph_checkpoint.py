"""What onward takes from langgraph-checkpoint's private names, and the public way round.

* :data:`DeltaSnapshot`: the class of a delta channel's snapshot value. LangGraph keeps it
  private (``langgraph.checkpoint.serde.types._DeltaSnapshot``); onward finds it through
  the public serializer instead, as the type ``JsonPlusSerializer`` decodes an
  ``EXT_DELTA_SNAPSHOT`` extension to, so it is LangGraph's own class on every release.
* :func:`msgpack_default`: LangGraph's msgpack encoding of one value (its private
  ``jsonplus._msgpack_default``), what onward's serializer hands the types it does not
  encode itself. Off the tested releases it is rebuilt from the public
  ``JsonPlusSerializer.dumps_typed``: the value encoded whole, read back with its
  extensions kept as they are (one encode and decode more; the same bytes).
* :data:`SQLITE_DELTA`: ``langgraph.checkpoint.sqlite._delta``'s two builders of the
  delta-history query, or None off the tested releases (then the saver answers with
  LangGraph's public ``get_delta_channel_history``).
* :data:`MSGPACK_OPTIONS`: the ormsgpack options LangGraph encodes with (its private
  ``jsonplus._option``), spelled out here from ormsgpack's public flags.
* :func:`ext_hook`: the msgpack extension hook a ``JsonPlusSerializer`` decodes with, its
  allowlist applied (its private ``_unpack_ext_hook`` attribute). Off the tested releases
  it is rebuilt from the public ``loads_typed``: the extension wrapped back into msgpack
  bytes and read whole (one encode more per extension; the same value).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import EXT_DELTA_SNAPSHOT, JsonPlusSerializer

from onward._compat import tested

TESTED = tested("langgraph-checkpoint", (4, 3), (4, 4))
"""langgraph-checkpoint 4.3.0 (the lowest allowed) to 4.3.2: the private path is used."""
TESTED_SQLITE = tested("langgraph-checkpoint-sqlite", (3, 1), (3, 2))
"""langgraph-checkpoint-sqlite 3.1.0 to 3.1.2."""

MSGPACK_OPTIONS = (
    ormsgpack.OPT_NON_STR_KEYS
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_UUID
    | ormsgpack.OPT_REPLACE_SURROGATES
)


def _delta_snapshot_class() -> type[Any]:
    """The class LangGraph's serializer decodes a delta snapshot to (public API only)."""
    blob = ormsgpack.packb(ormsgpack.Ext(EXT_DELTA_SNAPSHOT, ormsgpack.packb(None)))
    return type(JsonPlusSerializer().loads_typed(("msgpack", blob)))


DeltaSnapshot: type[Any] = _delta_snapshot_class()
"""LangGraph's delta-snapshot class (a named tuple of one field, ``value``)."""

_PUBLIC = JsonPlusSerializer()


def _keep_extension(code: int, data: bytes) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, data)


def public_msgpack_default(obj: Any) -> Any:
    """LangGraph's encoding of ``obj`` through its public serializer: ``obj`` encoded whole,
    then read back with every extension left as it was, so ormsgpack writes the same
    bytes in its place."""
    kind, blob = _PUBLIC.dumps_typed(obj)
    if kind != "msgpack":
        raise TypeError(f"LangGraph does not encode {type(obj).__name__} as msgpack ({kind})")
    return ormsgpack.unpackb(blob, ext_hook=_keep_extension, option=ormsgpack.OPT_NON_STR_KEYS)


def _private_msgpack_default() -> Callable[[Any], Any] | None:
    if not TESTED:
        return None
    try:
        from langgraph.checkpoint.serde.jsonplus import _msgpack_default
    except ImportError:
        return None
    return _msgpack_default


msgpack_default: Callable[[Any], Any] = _private_msgpack_default() or public_msgpack_default
"""LangGraph's msgpack ``default`` hook: its private one where tested, else the public way."""


def _sqlite_delta() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    if not TESTED_SQLITE:
        return None
    try:
        from langgraph.checkpoint.sqlite._delta import (
            build_delta_channels_writes_history,
            build_delta_stage2_sql,
        )
    except ImportError:
        return None
    return build_delta_stage2_sql, build_delta_channels_writes_history


def _public_ext_hook(serializer: JsonPlusSerializer) -> Callable[[int, bytes], Any]:
    def hook(code: int, data: bytes) -> Any:
        blob = ormsgpack.packb(ormsgpack.Ext(code, data))
        return JsonPlusSerializer.loads_typed(serializer, ("msgpack", blob))

    return hook


def ext_hook(serializer: JsonPlusSerializer) -> Callable[[int, bytes], Any]:
    """The extension hook ``serializer`` decodes with (one object per allowlist: a clone
    that widened it has another)."""
    if TESTED:
        private: Callable[[int, bytes], Any] | None = getattr(serializer, "_unpack_ext_hook", None)
        if private is not None:
            return private
    made = _PUBLIC_HOOKS.get(serializer)  # by identity: a clone copies the attributes
    if made is None:
        made = _PUBLIC_HOOKS[serializer] = _public_ext_hook(serializer)
    return made


_PUBLIC_HOOKS: weakref.WeakKeyDictionary[JsonPlusSerializer, Callable[[int, bytes], Any]] = (
    weakref.WeakKeyDictionary()
)


SQLITE_DELTA = _sqlite_delta()
"""(``build_delta_stage2_sql``, ``build_delta_channels_writes_history``) where tested."""

__all__ = [
    "MSGPACK_OPTIONS",
    "SQLITE_DELTA",
    "TESTED",
    "TESTED_SQLITE",
    "DeltaSnapshot",
    "ext_hook",
    "msgpack_default",
    "public_msgpack_default",
]
