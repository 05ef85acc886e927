"""LangGraph Server's store API (``/store/items``, ``/store/namespaces``) on LangGraph's own
stores: :class:`~langgraph.store.sqlite.SqliteStore` or
:class:`~langgraph.store.postgres.PostgresStore`, in the same database as onward's store
(their tables, ``store`` and ``store_migrations``, are made on first use).

Every user has a store of their own: a namespace a client names is kept under a first label
that is the user's (``u`` + 32 hex digits of the SHA-256 of the user name, all the same
length, so no user's label is a textual prefix of another's and LangGraph's prefix match
cannot reach across users). A client never sees or names that label.

Bounds (:class:`ItemLimits`) keep one token holder from filling the database: a value's
size, a namespace's depth and label length, a key's length, a page's size, and how many
items one user may keep. Filters are checked before LangGraph turns them into SQL (its
SQLite store writes a filter's keys into the statement). On an encrypted store
(``ONWARD_AES_KEY``) values are sealed like everything else; filtering on them is then
refused, since the database cannot read them.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import BaseStore, Item

from onward.errors import RequestLimitError, UsageError
from onward.serve.requests import kind
from onward.store.encryption import Cipher, open_text
from onward.store.sql import Backend, sqlite_path

SEALED = "__onward_sealed__"
"""The one key of a value stored sealed (an encrypted store)."""
FILTER_KEY = re.compile(r"[A-Za-z0-9_]{1,64}")
MAX_OFFSET = 10**9
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemLimits:
    max_value_bytes: int = 64 * 1024
    """Largest value, as compact JSON."""
    max_depth: int = 8
    """Most labels in a namespace."""
    max_label: int = 128
    """Longest label of a namespace (characters)."""
    max_key: int = 512
    """Longest key (characters)."""
    max_page: int = 100
    """Most items or namespaces one search lists."""
    max_items: int = 10_000
    """Most items one user keeps."""

    def __post_init__(self) -> None:
        if min(self.max_value_bytes, self.max_depth, self.max_label, self.max_key) < 1:
            raise UsageError(f"store API limits must be positive ({self})")
        if self.max_page < 1 or self.max_items < 1:
            raise UsageError(f"store API limits must be positive ({self})")


def user_label(user: str) -> str:
    """The first namespace label of ``user``'s items (fixed length, hex: see the module)."""
    return "u" + hashlib.sha256(user.encode()).hexdigest()[:32]


class Items:
    """The store API's items, per user, over one LangGraph store opened on first use."""

    def __init__(
        self, url: str, backend: Backend, cipher: Cipher | None, limits: ItemLimits | None = None
    ) -> None:
        self.url, self.backend, self.cipher = url, backend, cipher
        self.limits = limits or ItemLimits()
        self._store: BaseStore | None = None
        self._raw: Any = None
        self._lock = threading.Lock()

    # -- checking what a client sends --------------------------------------------------

    def namespace(self, value: Any, name: str, *, empty: bool = False) -> tuple[str, ...]:
        """A client's namespace (a list of labels) checked against LangGraph's rules and the
        limits; ``empty``: an empty one is allowed (a search of everything)."""
        if value is None and empty:
            return ()
        if not isinstance(value, list | tuple):
            raise UsageError(f"{name} must be a list of labels, not {kind(value)}")
        if not value and not empty:
            raise UsageError(f"{name} must have at least one label")
        if len(value) > self.limits.max_depth:
            raise UsageError(
                f"{name} has {len(value)} labels; onward keeps at most {self.limits.max_depth}"
            )
        for label in value:
            if not isinstance(label, str) or not label or "." in label:
                raise UsageError(
                    f"{name}: every label must be a non-empty string without periods "
                    f"(not {kind(label) if not isinstance(label, str) else repr(label[:40])})"
                )
            if len(label) > self.limits.max_label:
                raise UsageError(
                    f"{name}: a label is {len(label)} characters; at most {self.limits.max_label}"
                )
        return tuple(value)

    def key(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise UsageError(f"key must be a non-empty string, not {kind(value)}")
        if len(value) > self.limits.max_key:
            raise UsageError(f"key is {len(value)} characters; at most {self.limits.max_key}")
        return value

    def value(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise UsageError(f"value must be an object, not {kind(value)}")
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
        if size > self.limits.max_value_bytes:
            raise RequestLimitError(
                f"value is {size} bytes of JSON; onward's store keeps at most "
                f"{self.limits.max_value_bytes} per item",
                http_status=413,
            )
        return value

    def page(self, value: Any, name: str, default: int) -> int:
        if value is None:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise UsageError(f"{name} must be a whole number ≥ 0, not {kind(value)}")
        if value > MAX_OFFSET:  # past SQL's integers once LangGraph adds to it
            raise UsageError(f"{name} {value} is past the largest this store pages to")
        return value

    def limit(self, value: Any, default: int) -> int:
        number = self.page(value, "limit", default) or default
        if number > self.limits.max_page:
            raise UsageError(
                f"limit {number} is over the most one page lists here, {self.limits.max_page}"
            )
        return number

    def filter(self, value: Any) -> dict[str, Any] | None:
        """A search filter: ``{field: scalar}`` or ``{field: {"$op": scalar}}``."""
        if value is None or value == {}:
            return None
        if not isinstance(value, dict):
            raise UsageError(f"filter must be an object, not {kind(value)}")
        if self.cipher is not None:
            raise UsageError(
                "filter: this store is encrypted (ONWARD_AES_KEY), so its values cannot be "
                "matched in the database; search without a filter"
            )
        if len(value) > 16:
            raise UsageError("filter has more than 16 fields")
        for field, cond in value.items():
            if not FILTER_KEY.fullmatch(field):
                raise UsageError(
                    f"filter field {field[:40]!r}: onward filters on top-level fields named "
                    "with letters, digits and _ (at most 64)"
                )
            conds = cond if isinstance(cond, dict) else {"$eq": cond}
            for op, operand in conds.items():
                if op not in OPERATORS:
                    raise UsageError(
                        f"filter {field}: operator {str(op)[:20]!r} is not one of "
                        + ", ".join(OPERATORS)
                    )
                if not (operand is None or isinstance(operand, str | int | float | bool)):
                    raise UsageError(
                        f"filter {field}: compare with a string, number, boolean or null, "
                        f"not {kind(operand)}"
                    )
        return value

    # -- the store ---------------------------------------------------------------------

    def store(self) -> BaseStore:
        with self._lock:
            if self._store is None:
                self._store = self._open()
            return self._store

    def _open(self) -> BaseStore:
        if self.backend is Backend.SQLITE:
            from langgraph.store.sqlite import SqliteStore

            conn = sqlite3.connect(
                str(sqlite_path(self.url).expanduser().absolute()),
                check_same_thread=False,
                isolation_level=None,  # SqliteStore begins and commits its own
                timeout=10,
            )
            sqlite_store: BaseStore = SqliteStore(conn)
            sqlite_store.setup()  # type: ignore[attr-defined]
            self._raw = conn
            return sqlite_store
        import psycopg
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row

        pg = psycopg.connect(self.url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        pg_store = PostgresStore(pg)
        pg_store.setup()
        self._raw = pg
        return pg_store

    def close(self) -> None:
        with self._lock:
            if self._raw is not None:
                self._raw.close()
            self._raw, self._store = None, None

    def _count(self, user: str) -> int:
        """How many items ``user`` keeps (their label, then a period, starts every prefix)."""
        label = user_label(user)
        store = self.store()
        if self.backend is Backend.SQLITE:
            with store.lock:  # type: ignore[attr-defined]
                row = self._raw.execute(
                    "SELECT count(*) FROM store WHERE prefix LIKE ?", (label + ".%",)
                ).fetchone()
            return int(row[0])
        with store.lock, self._raw.cursor() as cur:  # type: ignore[attr-defined]
            cur.execute("SELECT count(*) AS n FROM store WHERE prefix LIKE %s", (label + ".%",))
            found = cur.fetchone()
        return int(found["n"])

    # -- what the routes do ------------------------------------------------------------

    def put(self, user: str, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        full = (user_label(user), *namespace)
        store = self.store()
        if store.get(full, key) is None and self._count(user) >= self.limits.max_items:
            raise RequestLimitError(
                f"{user} keeps {self.limits.max_items} items, the most onward's store keeps "
                "per user; delete some first",
                http_status=429,
            )
        if self.cipher is not None:
            value = {SEALED: self.cipher.seal_text(json.dumps(value, ensure_ascii=False))}
        store.put(full, key, value)

    def get(self, user: str, namespace: tuple[str, ...], key: str) -> dict[str, Any] | None:
        found = self.store().get((user_label(user), *namespace), key)
        return None if found is None else self._doc(found)

    def delete(self, user: str, namespace: tuple[str, ...], key: str) -> None:
        self.store().delete((user_label(user), *namespace), key)

    def search(
        self,
        user: str,
        prefix: tuple[str, ...],
        filter: dict[str, Any] | None,
        limit: int,
        offset: int,
    ) -> list[dict[str, Any]]:
        found = self.store().search(
            (user_label(user), *prefix), filter=filter, limit=limit, offset=offset
        )
        return [{**self._doc(i), "score": getattr(i, "score", None)} for i in found]

    def namespaces(
        self,
        user: str,
        prefix: tuple[str, ...],
        suffix: tuple[str, ...] | None,
        max_depth: int | None,
        limit: int,
        offset: int,
    ) -> list[list[str]]:
        found = self.store().list_namespaces(
            prefix=(user_label(user), *prefix),
            suffix=suffix or None,
            max_depth=None if max_depth is None else max_depth + 1,
            limit=limit,
            offset=offset,
        )
        return [list(ns[1:]) for ns in found if len(ns) > 1]

    def _doc(self, item: Item) -> dict[str, Any]:
        value = item.value
        if set(value) == {SEALED}:
            value = json.loads(open_text(self.cipher, value[SEALED]))
        return {
            "namespace": list(item.namespace[1:]),
            "key": item.key,
            "value": value,
            "created_at": item.created_at.isoformat(),
            "updated_at": item.updated_at.isoformat(),
        }
