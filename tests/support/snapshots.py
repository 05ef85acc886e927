"""Helpers shared by several test modules, moved out of tests/cli/test_bad_input.py:
Snapshot, snapshot."""

from __future__ import annotations

from typing import Any

from onward.client import Onward

Snapshot = tuple[Any, ...]


def snapshot(url: str) -> Snapshot:
    """What a bad command must leave alone: every run's row and the rows of its history."""
    with Onward(url) as ow:
        runs = [(r.thread_id, r.status, r.updated_at) for r in ow.store.list_runs()]
        with ow.store.db.use() as db:
            writes = "checkpoint_writes" if db.postgres else "writes"
            counts = [
                db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("checkpoints", writes, "onward_events", "onward_requests")
            ]
    return (runs, counts)
