"""Content-addressed artifact store beside the database.

Bodies are canonical JSON, stored once per sha256 under ``artifacts/ab/cdef…``;
state only ever holds an ``ArtifactRef``. Reads verify the hash, so a body
that was edited or truncated on disk is reported, never silently used.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onward.errors import ArtifactError, EncryptionKeyError
from onward.model.state import ArtifactRef
from onward.observe.per_thread import PerThread
from onward.settings import settings
from onward.store import chunks

if TYPE_CHECKING:
    from onward.store.encryption import Cipher

URI_PREFIX = "artifact://sha256/"


def canonical_json(value: Any) -> bytes:
    """The one byte encoding of a JSON value: sorted keys, no spaces, UTF-8."""
    return _CANONICAL.encode(value).encode("utf-8")


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)
"""``json.dumps`` with these options, made once (an encoder keeps no state between calls)."""


def summarize(value: Any, limit: int = 120) -> str:
    """A one-line gist for humans: scalars shown, collections counted (``6 items``,
    ``3 keys``). Text is shortened inside its quotes and the line ends at a whole item
    (``… +2 more``), so a summary never ends mid-quote."""
    if chunks.is_manifest(value):
        return f"{value['count']} rows in {len(value['chunks'])} chunks"
    if isinstance(value, dict):
        parts = [f"{k}={_gist(v)}" for k, v in value.items() if k != "sha256"]
        return _joined(parts, limit) if parts else "no keys"
    if isinstance(value, list):
        return _count(len(value), "item")
    return _scalar(value, limit)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _gist(v: Any) -> str:
    if chunks.is_manifest(v):  # a long list stored in chunks: still a list
        return _count(int(v["count"]), "item")
    if isinstance(v, list):
        return _count(len(v), "item")
    if isinstance(v, dict):
        return _count(len(v), "key")
    return _scalar(v, 32)


def _scalar(v: Any, width: int) -> str:
    """``repr`` of a scalar in at most ``width`` characters; a string keeps both quotes."""
    text = repr(v)
    if len(text) <= width:
        return text
    if isinstance(v, str):
        quote = text[0]
        return f"{quote}{text[1 : width - 2]}…{quote}"
    return text[: width - 1] + "…"


def _joined(parts: list[str], limit: int) -> str:
    """``parts`` joined by commas: as many whole ones as fit in ``limit``, then how many
    more there are."""
    text = ", ".join(parts)
    if len(text) <= limit:
        return text
    shown: list[str] = []
    for part in parts:
        more = f", … +{len(parts) - len(shown) - 1} more"
        if len(", ".join([*shown, part])) + len(more) > limit:
            break
        shown.append(part)
    if not shown:
        return _count(len(parts), "key")
    return ", ".join(shown) + f", … +{len(parts) - len(shown)} more"


def fsync_enabled() -> bool:
    """``ONWARD_FSYNC=1``: survive power loss too (fsync files, SQLite synchronous=FULL).
    Off by default: a killed *process* loses nothing either way, and each fsync waits for
    the disk."""
    return settings().fsync


def atomic_write(path: Path, data: bytes, *, unique_temp: bool = False) -> None:
    """Write to a temp file in the same directory, then rename over ``path``: readers see
    the old or the new content, never half of it.

    The temp name is fixed per target (``.NAME.onward-tmp``), so a write a killed process
    left behind is simply overwritten when its step runs again, with no directory scan.
    ``unique_temp`` uses a fresh name instead, for writers that may race on one target.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if unique_temp:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        tmp = Path(name)
    else:
        tmp = path.with_name(f".{path.name}.onward-tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync_enabled():
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


INLINE_LIMIT = 256
"""Bodies up to this many bytes of canonical JSON live in their ref (in the checkpoint),
not in the artifact store: a ref is about this size anyway, and a file write (or, on
Postgres, a row insert) per step costs more than the bytes."""

ARTIFACT_REFS: PerThread[tuple[str, str]] = PerThread()
"""(sha256, thread id) references of the node running on this thread: written in one
transaction with its events instead of one each (see :mod:`onward.observe.per_thread`)."""


_SEALED = b"ONWARD-AESGCM1\n"
"""Marks an encrypted body (JSON never starts with it)."""


class ArtifactStore:
    """Artifact bodies as files under ``root`` (the SQLite backend; Postgres keeps them in
    a table, see :class:`~onward.store.postgres.TableArtifacts`).

    ``cipher``: bodies are encrypted at rest; the sha256 is of the plaintext, and GCM
    authentication reports a changed body as tampered. ``on_put(sha256, owner)`` records
    which run uses a body, so retention can remove bodies no kept run needs.
    """

    def __init__(
        self,
        root: Path,
        *,
        cipher: Cipher | None = None,
        on_put: Callable[[str, str], None] | None = None,
    ) -> None:
        self.root = root
        self.cipher = cipher
        self.on_put = on_put

    # -- where bodies live (overridden by the table store) --------------------------

    def location(self, sha256: str) -> str:
        return str(self._path(sha256))

    def _path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:]

    def read_body(self, sha256: str) -> bytes | None:
        try:
            return self._path(sha256).read_bytes()
        except FileNotFoundError:
            return None

    def write_body(self, sha256: str, body: bytes) -> None:
        atomic_write(self._path(sha256), body, unique_temp=True)  # parallel steps may race

    def delete_body(self, sha256: str) -> int:
        """Remove a body; returns the bytes freed."""
        path = self._path(sha256)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    # -- the store ------------------------------------------------------------------

    def _decode(self, stored: bytes) -> bytes:
        if not stored.startswith(_SEALED):
            return stored
        if self.cipher is None:
            raise EncryptionKeyError(
                "artifact bodies in this store are encrypted; set ONWARD_AES_KEY to its key"
            )
        return self.cipher.open(stored[len(_SEALED) :])

    def put(self, name: str, value: Any, *, owner: str | None = None) -> ArtifactRef:
        body = canonical_json(value)
        inline = len(body) <= INLINE_LIMIT
        digest = hashlib.sha256(body).hexdigest() if inline else self._store(body, owner)
        return ArtifactRef(
            name=name,
            uri=URI_PREFIX + digest,
            sha256=digest,
            size=len(body),
            summary=summarize(value),
            body=body.decode() if inline else None,
        )

    def _store(self, body: bytes, owner: str | None) -> str:
        """Keep ``body`` under its sha256 (once per content) and note who uses it."""
        digest = hashlib.sha256(body).hexdigest()
        # Same content is stored once; but a damaged body is rewritten, so re-running a
        # step repairs its artifact.
        if not self._intact(digest):
            stored = body if self.cipher is None else _SEALED + self.cipher.seal(body)
            self.write_body(digest, stored)
        if owner and not ARTIFACT_REFS.add((digest, owner)) and self.on_put:
            self.on_put(digest, owner)
        return digest

    def put_rows(
        self, rows: Iterable[Any], *, owner: str | None = None, per_chunk: int = chunks.CHUNK_ROWS
    ) -> dict[str, Any]:
        """Store ``rows`` (JSON values) in chunks of ``per_chunk`` as they come; returns
        the manifest to put in an artifact in their place (see :mod:`onward.store.chunks`)."""
        listed: list[dict[str, Any]] = []
        it = iter(rows)
        while batch := list(islice(it, per_chunk)):
            body = chunks.encode(batch)
            listed.append(
                {"sha256": self._store(body, owner), "size": len(body), "rows": len(batch)}
            )
        return chunks.manifest(listed)

    def rows(self, value: Any, name: str = "rows") -> Iterator[Any]:
        """The rows of a list or of a manifest, streamed one chunk at a time (each
        chunk's sha256 verified as it is read)."""
        if not chunks.is_manifest(value):
            yield from value
            return
        for chunk in value["chunks"]:
            yield from chunks.decode(self._body(name, chunk["sha256"], "a chunk of "))

    def _intact(self, digest: str) -> bool:
        stored = self.read_body(digest)
        if stored is None:
            return False
        try:
            return hashlib.sha256(self._decode(stored)).hexdigest() == digest
        except EncryptionKeyError:
            return False

    def get(self, ref: ArtifactRef) -> Any:
        """The artifact's value, its sha256 verified; rows stored in chunks stay a
        manifest (read them with :meth:`rows`), but every chunk is verified here too, so a
        damaged chunk is found before a step runs on it, like a damaged body."""
        if ref.body is not None:
            actual = hashlib.sha256(ref.body.encode()).hexdigest()
            if actual != ref.sha256:
                raise ArtifactError(
                    f"artifact {ref.name!r} was changed in the run's saved state: sha256 is "
                    f"{actual[:12]}…, expected {ref.sha256[:12]}…; re-run the step that "
                    "produces it (fork the run before that step)"
                )
            return json.loads(ref.body)
        value = json.loads(self._body(ref.name, ref.sha256))
        for part in value.values() if isinstance(value, dict) else [value]:
            if chunks.is_manifest(part):
                for chunk in part["chunks"]:
                    self._body(ref.name, chunk["sha256"], "a chunk of ")
        return value

    def _body(self, name: str, sha256: str, what: str = "") -> bytes:
        """A stored body (decrypted), or an error naming the artifact if it is missing
        or is not its sha256."""
        where = self.location(sha256)
        stored = self.read_body(sha256)
        if stored is None:
            raise ArtifactError(
                f"{what}artifact {name!r} is missing from the artifact store ({where}); "
                "re-run the step that produces it (fork the run before that step)"
            )
        try:
            body = self._decode(stored)
        except EncryptionKeyError as exc:
            if self.cipher is None:
                raise
            raise ArtifactError(
                f"{what}artifact {name!r} was changed at rest: it no longer decrypts with "
                f"the store's key ({where}; {exc}); restore it, or re-run the step that "
                "produces it"
            ) from None
        actual = hashlib.sha256(body).hexdigest()
        if actual != sha256:
            raise ArtifactError(
                f"{what}artifact {name!r} was changed on disk: sha256 is {actual[:12]}…, "
                f"expected {sha256[:12]}… ({where}); restore it, or re-run the step "
                "that produces it"
            )
        return body
