"""Collections that grow with a run and decode each item only when it is read.

A run of 10,000 steps holds 10,000 step records, plan steps and artifact refs. Rebuilding
and validating every one of them when a thread is loaded made a load cost O(steps)
(about a second at 10,000 on a slow machine) while a resume reads a handful. So a
collection can hold its items encoded: one body of bytes with each item's offsets, and
the little every step needs without decoding (for step records: each one's status and
the total of attempts). Loading one creates no object per item; an item is decoded (then
validated into its model) the first time it is read, and stays decoded.

The collections are immutable: merging writes returns a new one that shares the items.

How items are encoded and stored is storage's business, not the model's: an
:class:`ItemCodec` (onward.checkpointing.lazy installs the checkpoint format's with
:func:`use_codec`) encodes and decodes one item; :meth:`LazyMap.packed` gives the items'
bytes and offsets, which storage stores as it likes, and :meth:`LazyMap.unpacked` takes
them back as a body to slice (``bytes`` or anything sliced and searched like it). With a
codec installed, an item written settled (a finished step's record) is kept encoded too.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar, Generic, Protocol, TypeVar, overload

from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import core_schema

T = TypeVar("T")
Decode = Callable[[bytes], Any]
"""Bytes of one item → the item's fields (the store's decoder, with its allowlist)."""


class ItemCodec(Protocol):
    """How the items of a lazy collection are encoded (installed by storage)."""

    def encode(self, fields: Mapping[str, Any]) -> bytes:
        """One item's fields as bytes."""

    def decode(self, blob: bytes) -> Any:
        """Bytes this process encoded (an item kept encoded) back to the item's fields."""

    def needle(self, field: str, value: Any) -> bytes:
        """The bytes an encoded item holds for ``field`` set to ``value``."""


class _Codec:
    installed: ItemCodec | None = None


def use_codec(codec: ItemCodec) -> None:
    """Encode items with ``codec`` from now on (storage calls this once, when imported)."""
    _Codec.installed = codec


def codec() -> ItemCodec:
    """The installed codec (a collection is packed or loaded only by storage)."""
    found = _Codec.installed
    if found is None:
        raise RuntimeError("no item codec: import onward.checkpointing.lazy first")
    return found


def pack_item(item: BaseModel, dump: Mapping[str, Any]) -> bytes:
    """One item's fields (``model_dump(**dump)``) encoded by the installed codec."""
    return codec().encode(item.model_dump(**dump))


def _no_decoder(_: bytes) -> Any:
    raise RuntimeError("an encoded item without a decoder: build lazy collections with one")


class _Items(Generic[T]):
    """Where a collection's encoded items are: one ``body`` of bytes and the ``offsets``
    of each item in it. A collection stores an item's slot (an ``int``) until the item is
    read; decoding replaces the slot with the item in place (the same value for every
    reader, so versions of a collection can share their store's items)."""

    __slots__ = ("body", "decode", "kind", "offsets")

    def __init__(self, kind: Any, decode: Decode, body: Any = b"", offsets: bytes = b"") -> None:
        self.kind = kind
        self.decode = decode
        self.body = body
        self.offsets = array("Q")
        self.offsets.frombytes(offsets)

    def get(self, store: dict[Any, Any] | list[Any], key: Any) -> T:
        value = store[key]
        if type(value) is int or type(value) is bytes:
            fields = self.fields(value)
            value = store[key] = self.kind.model.model_validate(fields)  # one assignment
        return value  # type: ignore[no-any-return]

    def fields(self, value: int | bytes) -> Any:
        """An encoded item's fields: a slot's through the store's decoder; an item this
        process encoded itself (``bytes``, see :meth:`LazyMap._settled`) as it was packed."""
        if type(value) is bytes:
            return codec().decode(value)
        return self.decode(self.raw(value))

    def raw(self, value: Any) -> bytes:
        """An item's encoded bytes (a slot's, its own, or a decoded item encoded again)."""
        if type(value) is int:
            part: bytes = self.body[self.offsets[value] : self.offsets[value + 1]]
            return part
        if type(value) is bytes:
            return value
        return pack_item(value, self.kind.dump)


def _pack(items: _Items[Any], values: Iterable[Any]) -> tuple[bytes, array[int]]:
    """``(body, offsets)`` of these items: their bytes one after another, and where each
    ends (the first offset 0)."""
    parts = [items.raw(v) for v in values]
    offsets = array("Q", [0])
    end = 0
    for part in parts:
        end += len(part)
        offsets.append(end)
    return b"".join(parts), offsets


def wrapper_schema(cls: Any, plain: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """Pydantic accepts one of ``cls`` as is (no item is decoded or validated) or the plain
    form (``plain``: validated, then wrapped), and dumps the plain form."""
    items = handler.generate_schema(plain)
    wrapped = core_schema.no_info_after_validator_function(cls, items)
    return core_schema.json_or_python_schema(
        json_schema=wrapped,
        python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), wrapped]),
        serialization=core_schema.plain_serializer_function_ser_schema(
            cls._plain, return_schema=items
        ),
    )


class LazyMap(Mapping[str, T]):
    """An immutable ``id → item`` mapping whose items decode on first read."""

    __slots__ = ("_items", "_values")
    model: ClassVar[type[BaseModel]]
    """The items' type (subclasses set it): plain values written are validated into it."""
    dump: ClassVar[Mapping[str, Any]] = {}
    """How an item's fields are dumped into a checkpoint (``model_dump`` arguments); they
    are validated back into ``model`` when read."""

    def __init__(self, values: Mapping[str, T] | None = None) -> None:
        self._values: dict[str, Any] = {}
        self._items: _Items[T] = _Items(type(self), _no_decoder)
        self._start()
        for key, value in (values or {}).items():
            self._put(key, value)

    def _start(self) -> None:
        """Subclasses set up empty summaries here."""

    def _put(self, key: str, value: Any, pack: bool = True) -> None:
        if not isinstance(value, self.model):
            value = self.model.model_validate(value)
        self._note(key, value)  # before the write: a summary may need the old item
        # A settled item is kept encoded (its checkpoint bytes, a twentieth of the
        # object's memory): a long run holds thousands that are rarely read again.
        settle = pack and _Codec.installed is not None and self._settled(value)
        self._values[key] = pack_item(value, self.dump) if settle else value

    @classmethod
    def _settled(cls, value: Any) -> bool:
        """Subclasses: whether an item written now is unlikely to be read again soon."""
        return False

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return wrapper_schema(cls, dict[str, cls.model], handler)  # type: ignore[name-defined]

    @staticmethod
    def _plain(value: Mapping[str, T]) -> dict[str, T]:
        return dict(value.items())

    @classmethod
    def of(cls, value: Mapping[str, T] | None) -> Any:
        """``value`` itself if it is one already, else a new one holding its items."""
        return value if type(value) is cls else cls(value)

    # -- Mapping ---------------------------------------------------------------

    def __getitem__(self, key: str) -> T:
        return self._items.get(self._values, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self._values:
            return default
        return self._items.get(self._values, key)

    def peek(self, key: str, field: str, default: Any = None) -> Any:
        """One field of an item, read without decoding the item into its model (a scan
        of every item's field costs a tenth of decoding them); ``default`` for a field an
        item does not hold, or dumped as its default (``exclude_defaults``)."""
        value = self._values[key]
        if type(value) is not int and type(value) is not bytes:
            return getattr(value, field, default)
        return self._items.fields(value).get(field, default)

    def ids(self) -> Any:
        """The keys as a real ``dict_keys`` (set operations run in C)."""
        return self._values.keys()

    def contents(self) -> Iterator[tuple[str, Any]]:
        """Each key with its item's content, not decoded: the item's encoded bytes while
        it is encoded (equal bytes, equal items: versions of a collection share them),
        else the item itself."""
        raw = self._items.raw
        for key, value in self._values.items():
            yield key, raw(value) if type(value) is int else value

    def decoded(self) -> int:
        """How many items have been read (decoded) so far."""
        return sum(type(v) is not int and type(v) is not bytes for v in self._values.values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"

    def __copy__(self) -> Any:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

    def __reduce__(self) -> Any:
        return (type(self), (dict(self.items()),))

    def model_dump(self, **how: Any) -> dict[str, Any]:
        """The items' plain fields, by key. Not pydantic's: the duck-typed hook that
        serializers outside onward's own call (LangGraph's msgpack, ``langgraph dev``'s JSON),
        so the collection reads there as a JSON object instead of null or a pickle."""
        return {key: self[key].model_dump(**how) for key in self._values}  # type: ignore[attr-defined]

    # -- versions --------------------------------------------------------------

    def merged(self, writes: Iterable[Mapping[str, T]], *, pack: bool = True) -> Any:
        """A new mapping with ``writes`` applied in order (later wins per key).
        ``pack=False`` keeps settled items as they are: a read that prints them and
        exits need not encode them (that needs LangGraph's encoder: onward status)."""
        new = self._copy()
        for write in writes:
            for key, value in write.items():
                new._put(key, value, pack)
        return new

    def _copy(self) -> Any:
        new = object.__new__(type(self))
        new._values = dict(self._values)
        new._items = self._items
        return new

    def _note(self, key: str, value: Any) -> None:
        """Subclasses keep summaries of their items up to date here (``key`` still holds
        its old item, if any)."""

    # -- checkpoint form -------------------------------------------------------

    def packed(self) -> list[Any]:
        """``[ids, body, offsets, *summary]``: the items' bytes, where each ends
        (``array("Q")``) and the summary, for storage to store."""
        return [list(self._values), *_pack(self._items, self._values.values()), *self._summary()]

    def _summary(self) -> list[Any]:
        return []

    @classmethod
    def unpacked(cls, packed: list[Any], decode: Decode) -> Any:
        """A collection of :meth:`packed`'s items (``body``: bytes or sliced like them;
        ``offsets``: bytes of an ``array("Q")``), each decoded by ``decode`` when read."""
        ids, body, offsets, *summary = packed
        new = object.__new__(cls)
        new._items = _Items(cls, decode, body, offsets)
        if len(new._items.offsets) != len(ids) + 1:
            raise ValueError("a packed collection whose ids and items differ in number")
        new._values = dict(zip(ids, range(len(ids)), strict=True))
        new._load_summary(ids, summary)
        return new

    def _load_summary(self, ids: list[str], summary: list[Any]) -> None:
        """Subclasses rebuild their summaries from :meth:`_summary`'s output here."""


class LazyList(Sequence[T]):
    """An immutable list of items with ids that decode on first read. The ids are always
    at hand (a scheduler looks up every item by id); anything else decodes the item."""

    __slots__ = ("__dict__", "_ids", "_items", "_items_list")
    model: ClassVar[type[BaseModel]]
    dump: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, items: Iterable[T] = ()) -> None:
        values = [v if isinstance(v, self.model) else self.model.model_validate(v) for v in items]
        self._items_list: list[Any] = values
        self._ids: list[str] = [v.id for v in values]  # type: ignore[attr-defined]
        self._items: _Items[T] = _Items(type(self), _no_decoder)

    @classmethod
    def of(cls, value: Iterable[T] | None) -> Any:
        return value if type(value) is cls else cls(value or ())

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return wrapper_schema(cls, list[cls.model], handler)  # type: ignore[name-defined]

    @staticmethod
    def _plain(value: Iterable[T]) -> list[T]:
        return list(value)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._items.get(self._items_list, j) for j in range(len(self._ids))[i]]
        if i < 0:
            i += len(self._ids)
        return self._items.get(self._items_list, i)

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[T]:
        get, items = self._items.get, self._items_list
        for i in range(len(self._ids)):
            yield get(items, i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyList):
            return self._ids == other._ids and list(self) == list(other)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self

    def __reduce__(self) -> Any:
        return (type(self), (list(self),))

    def model_dump(self, **how: Any) -> list[Any]:
        """The items' plain fields, in order (see :meth:`LazyMap.model_dump`)."""
        return [item.model_dump(**how) for item in self]  # type: ignore[attr-defined]

    def peek(self, i: int, field: str, default: Any = None) -> Any:
        """One field of item ``i``, read without decoding the item (see
        :meth:`LazyMap.peek`)."""
        value = self._items_list[i]
        if type(value) is not int and type(value) is not bytes:
            return getattr(value, field, default)
        return self._items.fields(value).get(field, default)

    def where(self, field: str, *values: str) -> list[int]:
        """Positions of the items whose ``field`` is one of ``values``, in order, decoding
        only the candidates.

        An encoded item holds ``field`` and its value side by side, as msgpack writes them
        (a key, then its value; a string in its shortest form), so the encoded items are
        searched for those bytes (in C) and only the items they occur in are peeked to
        confirm. A value that is the field's default is left out of an encoded item
        (``exclude_defaults``): then every encoded item is peeked."""
        spec = self.model.model_fields[field]  # KeyError: no such field
        items, store, wanted = self._items, self._items_list, set(values)
        if not spec.is_required() and spec.get_default(call_default_factory=True) in wanted:
            return [i for i in range(len(store)) if self.peek(i, field) in wanted]
        slots: set[int] = set()
        for value in wanted if len(items.body) else ():  # no encoded items: none to search
            needle, at = codec().needle(field, value), -1
            while (at := items.body.find(needle, at + 1)) >= 0:
                slots.add(bisect_right(items.offsets, at) - 1)
        return [
            i
            for i, v in enumerate(store)
            if (type(v) is not int or v in slots) and self.peek(i, field) in wanted
        ]

    @property
    def ids(self) -> Sequence[str]:
        """Every item's id, in order."""
        return self._ids

    def decoded(self) -> int:
        """How many items have been read (decoded) so far."""
        return sum(type(v) is not int for v in self._items_list)

    @cached_property
    def position(self) -> dict[str, int]:
        """Where an id first appears."""
        n = len(self._ids)
        return dict(zip(reversed(self._ids), range(n - 1, -1, -1), strict=True))

    @cached_property
    def id_set(self) -> frozenset[str]:
        return frozenset(self._ids)

    @cached_property
    def children(self) -> dict[str, list[str]]:
        """The items that depend on an item directly, in order (decodes every item)."""
        out: dict[str, list[str]] = {}
        for item in self:
            for d in item.depends_on:  # type: ignore[attr-defined]
                out.setdefault(d, []).append(item.id)  # type: ignore[attr-defined]
        return out

    def by_id(self, item_id: str) -> T:
        """The first item with this id (``KeyError`` if none)."""
        return self[self.position[item_id]]

    def replaced(self, item: T) -> Any:
        """A new list with every item of ``item``'s id replaced by it."""
        new = object.__new__(type(self))
        new._items_list = list(self._items_list)
        new._ids = self._ids
        new._items = self._items
        for i, sid in enumerate(self._ids):
            if sid == item.id:  # type: ignore[attr-defined]
                new._items_list[i] = item
        return new

    def packed(self) -> list[Any]:
        return [self._ids, *_pack(self._items, self._items_list)]

    @classmethod
    def unpacked(cls, packed: list[Any], decode: Decode) -> Any:
        ids, body, offsets = packed
        new = object.__new__(cls)
        new._items = _Items(cls, decode, body, offsets)
        if len(new._items.offsets) != len(ids) + 1:
            raise ValueError("a packed list whose ids and items differ in number")
        new._items_list = list(range(len(ids)))
        new._ids = ids
        return new
