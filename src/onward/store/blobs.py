"""The long strings of a run's stored request, kept as files until its first checkpoint.

A run's request (its input state, the whole plan) is kept in ``onward_requests`` so a run
killed before its first checkpoint with values can start again from it. After that
checkpoint is durable the checkpoints hold the same input and nothing reads the request
again (``client.views.state_of`` falls back to it only while the latest checkpoint has no
values). A big argument (a document pasted into a step's args) would stay a full extra
copy in the database file, which SQLite never shrinks, so on SQLite every string of at
least :data:`LONG_CHARS` is written as a file (:class:`RequestBlobs`) before the row,
which keeps the path to it and its sha256 under ``"blobs"``: ``[[path, sha256], ...]``
(paths, not markers in the value, so no value of the user's is mistaken for one).

Once the checkpoint is durable the request is *settled*: the row is rewritten with the
paths under ``"settled"`` instead, and then the files are removed (in that order: a crash
between leaves only unused files). Reading a settled request, which would mean the
checkpoints are gone, is an error that says so, never a request with parts missing. On
Postgres the strings stay in the row and settling drops them there. A row with neither key
(every store written before) reads as it always did.

On SQLite a long request row is also deflated (:func:`deflate`; a plan's steps repeat
their keys); Postgres compresses long values itself.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onward.errors import StoreCorruptError, StoreError
from onward.store.artifacts import atomic_write
from onward.store.encryption import Cipher

LONG_CHARS = 64 * 1024
"""Strings at least this long leave the row; smaller requests are never rewritten (a
rewrite per drive would cost more than the bytes)."""
BLOBS, SETTLED = "blobs", "settled"
"""Keys of a request row: the long strings in files; the long strings dropped."""
_SEALED = b"ONWARD-AESGCM1\n"

DEFLATED = "z:"
"""Prefix of a request row deflated by :func:`deflate` (then base85)."""
DEFLATE_CHARS = 1024
"""Shorter requests stay plain JSON (deflating them saves less than a page's slack)."""

JsonPath = list[str | int]


def deflate(text: str) -> str:
    """A request's JSON as a SQLite row keeps it: deflated when long."""
    if len(text) < DEFLATE_CHARS:
        return text
    return DEFLATED + base64.b85encode(zlib.compress(text.encode(), 6)).decode()


def inflate(text: str, where: str) -> str:
    """The JSON of a stored request row (deflated or not: JSON objects start with "{", so
    no plain row is mistaken for a deflated one)."""
    if not text.startswith(DEFLATED):
        return text
    try:
        return zlib.decompress(base64.b85decode(text[len(DEFLATED) :])).decode()
    except (ValueError, zlib.error) as exc:
        raise StoreCorruptError(
            f"a run's stored request cannot be read in {where}: its compressed "
            f"bytes are damaged ({exc}); restore the store from a backup"
        ) from exc


def lift(value: Any, keep: Callable[[str], str]) -> tuple[Any, list[list[Any]]]:
    """``value`` with each long string replaced by ``keep(text)`` (what the row holds in
    its place), and ``[path, that]`` for each. ``value`` is not changed (it is what is
    returned when it holds no long string: most requests, whose copy would be dropped)."""
    if not _holds_long(value):
        return value, []
    found: list[list[Any]] = []

    def walk(node: Any, path: JsonPath) -> Any:
        if isinstance(node, str) and len(node) >= LONG_CHARS:
            found.append([path, keep(node)])
            return found[-1][1]
        if isinstance(node, dict):
            return {k: walk(v, [*path, k]) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, [*path, i]) for i, v in enumerate(node)]
        return node

    return walk(value, []), found


def _holds_long(value: Any) -> bool:
    """Whether ``value`` holds a string :func:`lift` takes out: its walk (mappings' values,
    lists' items) without building paths or copies."""
    todo = [value]
    while todo:
        node = todo.pop()
        if isinstance(node, str):
            if len(node) >= LONG_CHARS:
                return True
        elif isinstance(node, dict):
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return False


def restore(value: Any, found: list[list[Any]], load: Callable[[str], str]) -> Any:
    """Undo :func:`lift`: each ``[path, key]`` gets ``load(key)`` (in place; returned)."""
    for path, key in found:
        if not path:
            return load(key)
        node = value
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = load(key)
    return value


class RequestBlobs:
    """Files under ``root``, one folder per thread (named by the thread id's sha256, as a
    thread id is any text); each file named by its text's sha256, which a read checks.
    Encrypted like artifact bodies when the store has a key."""

    def __init__(self, root: Path, cipher: Cipher | None) -> None:
        self.root, self.cipher = root, cipher

    def _folder(self, thread_id: str) -> Path:
        return self.root / hashlib.sha256(thread_id.encode()).hexdigest()[:32]

    def put(self, thread_id: str, text: str) -> str:
        body = text.encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(body).hexdigest()
        stored = body if self.cipher is None else _SEALED + self.cipher.seal(body)
        atomic_write(self._folder(thread_id) / digest, stored)
        return digest

    def get(self, thread_id: str, digest: str) -> str:
        path = self._folder(thread_id) / digest
        try:
            stored = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(
                f"run {thread_id}'s request names a file that is missing ({path})"
            ) from None
        if stored.startswith(_SEALED):
            if self.cipher is None:
                raise StoreError(f"{path} is encrypted; set ONWARD_AES_KEY to its key")
            stored = self.cipher.open(stored[len(_SEALED) :])
        if hashlib.sha256(stored).hexdigest() != digest:
            raise StoreError(f"run {thread_id}'s request file {path} was changed on disk")
        return stored.decode("utf-8", "surrogatepass")

    def holds(self, thread_id: str) -> bool:
        return self._folder(thread_id).is_dir()

    def drop(self, thread_id: str) -> None:
        shutil.rmtree(self._folder(thread_id), ignore_errors=True)
