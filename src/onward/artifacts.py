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
from pathlib import Path
from typing import Any

from onward.errors import ArtifactError
from onward.state import ArtifactRef

URI_PREFIX = "artifact://sha256/"


def canonical_json(value: Any) -> bytes:
    """The one byte encoding of a JSON value: sorted keys, no spaces, UTF-8."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode("utf-8")


def summarize(value: Any, limit: int = 120) -> str:
    """A one-line gist for humans: scalars shown, collections counted."""

    def gist(v: Any) -> str:
        if isinstance(v, list):
            return f"[{len(v)}]"
        if isinstance(v, dict):
            return f"{{{len(v)}}}"
        text = repr(v)
        return text if len(text) <= 24 else text[:23] + "…"

    if isinstance(value, dict):
        text = ", ".join(f"{k}={gist(v)}" for k, v in value.items() if k != "sha256")
    elif isinstance(value, list):
        text = f"{len(value)} items"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fsync_enabled() -> bool:
    """``ONWARD_FSYNC=1``: survive power loss too (fsync files, SQLite synchronous=FULL).
    Off by default: a killed *process* loses nothing either way, and fsync costs ~1 ms."""
    return os.environ.get("ONWARD_FSYNC", "0") not in ("", "0", "false")


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


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:]

    def put(self, name: str, value: Any) -> ArtifactRef:
        body = canonical_json(value)
        digest = hashlib.sha256(body).hexdigest()
        path = self._path(digest)
        # Same content is stored once; but a body damaged on disk is rewritten, so re-running
        # a step repairs its artifact.
        if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            atomic_write(path, body, unique_temp=True)  # parallel steps may store one body
        return ArtifactRef(
            name=name,
            uri=URI_PREFIX + digest,
            sha256=digest,
            size=len(body),
            summary=summarize(value),
        )

    def get(self, ref: ArtifactRef) -> Any:
        path = self._path(ref.sha256)
        try:
            body = path.read_bytes()
        except FileNotFoundError:
            raise ArtifactError(
                f"artifact {ref.name!r} is missing from the artifact store ({path}); "
                "re-run the step that produces it (fork the run before that step)"
            ) from None
        actual = hashlib.sha256(body).hexdigest()
        if actual != ref.sha256:
            raise ArtifactError(
                f"artifact {ref.name!r} was changed on disk: sha256 is {actual[:12]}…, "
                f"expected {ref.sha256[:12]}… ({path}); restore it, or re-run the step "
                "that produces it"
            )
        return json.loads(body)
