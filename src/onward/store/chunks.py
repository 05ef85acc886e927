"""Rows stored in chunks: the form an artifact's big list takes instead of one JSON body.

A tool that produces millions of rows (``read_csv`` on a big file) writes them through
:meth:`~onward.store.artifacts.ArtifactStore.put_rows`: JSON Lines bodies of
:data:`CHUNK_ROWS` rows each, content-addressed like any body, and in the artifact a
small *manifest* in the list's place::

    {"format": "onward.rows/1", "count": 2700000,
     "chunks": [{"sha256": "…", "size": 812345, "rows": 10000}, …]}

Readers stream the rows chunk by chunk (each chunk's sha256 verified), so neither the
writer nor a reader ever holds the whole list. This module knows only the format (no
store, no onward imports), so checks can recognise a manifest too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

FORMAT = "onward.rows/1"
CHUNK_ROWS = 10_000
"""Rows per chunk: about 1 MB of JSON for a CSV row of ~100 bytes, so a reader holds one
chunk's rows at a time and a manifest lists a few hundred chunks for millions of rows."""


def is_manifest(value: Any) -> bool:
    return isinstance(value, dict) and value.get("format") == FORMAT


def row_count(value: Any) -> int | None:
    """How many rows ``value`` holds: a list's length, a manifest's count, else None."""
    if isinstance(value, list):
        return len(value)
    if is_manifest(value):
        return int(value["count"])
    return None


def manifest(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"format": FORMAT, "count": sum(c["rows"] for c in chunks), "chunks": chunks}


def encode(rows: Iterable[Any]) -> bytes:
    """JSON Lines: one compact JSON value per line (a line never holds a raw newline)."""
    dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
    return "".join(dump(r) + "\n" for r in rows).encode("utf-8")


def decode(body: bytes) -> Iterator[Any]:
    # Split the bytes on b"\n" only: str.splitlines would also split inside a value
    # holding U+2028 or another Unicode line break, which JSON leaves unescaped.
    for line in body.split(b"\n"):
        if line:
            yield json.loads(line)
