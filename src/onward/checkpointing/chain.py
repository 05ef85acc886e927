"""SQL over the savers' ``checkpoints`` table that both the savers and the LangGraph-free
reads (onward.observe.checkpoint) run: a checkpoint's ancestor chain and its metadata.
Text only, so a light read can import it without LangGraph."""

from __future__ import annotations

CHAIN_SQL = (
    "WITH RECURSIVE chain(checkpoint_id, parent_checkpoint_id, depth) AS ("
    "SELECT checkpoint_id, parent_checkpoint_id, 0 FROM checkpoints "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
    "UNION ALL "
    "SELECT c.checkpoint_id, c.parent_checkpoint_id, a.depth + 1 "
    "FROM chain a {join} checkpoints c ON c.checkpoint_id = a.parent_checkpoint_id "
    "WHERE c.thread_id = ? AND c.checkpoint_ns = ? AND a.depth < ?"
    ") SELECT checkpoint_id, parent_checkpoint_id FROM chain ORDER BY depth"
)
"""A checkpoint and its ancestors, nearest first, up to a depth (ids only, no blobs);
parameters (thread, namespace, checkpoint, thread, namespace, depth). ``{join}``:
:data:`SQLITE_JOIN` or :data:`POSTGRES_JOIN`."""

SQLITE_JOIN = "CROSS JOIN"
"""On SQLite ``CROSS JOIN`` keeps the chain as the outer loop: one primary-key lookup per
step."""
POSTGRES_JOIN = "JOIN"
"""Postgres has no ``CROSS JOIN ... ON``."""

METADATA_SQL = (
    "SELECT metadata FROM checkpoints "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
"""A checkpoint's metadata (JSON), by (thread, namespace, checkpoint)."""
