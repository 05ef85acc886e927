"""Collects the transitions every test's runs took (from their SQLite stores' checkpoint
histories), so the session can check them against the drawn graph (conftest.py).

Postgres-backed variants are left out: their schemas are dropped before this runs, and
each runs the same flows as its SQLite twin.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START

from onward.checkpointing.serde import checkpoint_serde
from onward.graph.build import build_graph
from onward.graph.routes import Node
from onward.graph.trace import thread_transitions
from onward.nodes.deps import NodeDeps
from onward.store.artifacts import ArtifactStore
from onward.tools.registry import default_registry

HISTORY_LIMIT = 300
"""Checkpoints read per thread (a long-run test's history is sampled from its end)."""
MAX_BYTES = 20 * 1024 * 1024
"""Larger stores (scale tests) are left out: reading them would slow the suite."""


class _TasksOnlySaver(SqliteSaver):
    """SqliteSaver whose loads leave every delta channel empty: the transitions need a
    checkpoint's tasks and writes, which no delta channel's value enters (tasks come from
    the trigger channels' versions and the ``Send``s), and rebuilding them is most of the
    cost (SqliteSaver's walk decodes the chain back to a snapshot for every checkpoint: a
    200-step store's history took 10-20 s)."""

    def get_delta_channel_history(
        self, *, config: Any, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return {}


@cache
def _compiled() -> Any:
    """The graph, compiled once per test process: each store gets a copy with its own saver
    (compiling per store cost about a quarter of the tracing)."""
    deps = NodeDeps(registry=default_registry, artifacts=ArtifactStore(Path(tempfile.gettempdir())))
    return build_graph(deps).compile()


SINCE = datetime.now(UTC)
"""Only steps saved while this session runs count: a store copied from tests/store/golden holds
the transitions of the release that wrote it."""
NODES = {str(n) for n in Node} | {START, END}
"""Threads of other graphs (a saver test's own graph) are not onward's runs."""


def store_transitions(db: Path) -> set[tuple[str, str]]:
    """Every transition of onward's graph in the checkpoint histories of one SQLite store
    (nothing if it is not an onward store, or is encrypted or corrupt: those tests are
    about that)."""
    seen: set[tuple[str, str]] = set()
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, check_same_thread=False)
    except sqlite3.Error:
        return seen
    try:
        threads = [t for (t,) in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]
        saver = _TasksOnlySaver(conn, serde=checkpoint_serde(None))
        graph = _compiled().copy(update={"checkpointer": saver})
        for thread_id in threads:
            taken = thread_transitions(graph, thread_id, limit=HISTORY_LIMIT, since=SINCE)
            seen |= {(a, b) for a, b in taken if a in NODES and b in NODES}
    except Exception:  # not a store, encrypted, corrupt, or a store of another version
        return set()
    finally:
        conn.close()
    return seen


def transitions_under(root: Path) -> set[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    for db in root.rglob("*.db"):
        if db.is_file() and db.stat().st_size <= MAX_BYTES:
            seen |= store_transitions(db)
    return seen


def save(path: Path, seen: dict[tuple[str, str], str]) -> None:
    """``seen`` maps each transition to the test that took it."""
    rows = [[a, b, test] for (a, b), test in sorted(seen.items())]
    path.write_text(json.dumps(rows), encoding="utf-8")


def load(directory: Path) -> dict[tuple[str, str], str]:
    seen: dict[tuple[str, str], str] = {}
    for f in sorted(directory.glob("*.json")):
        for a, b, test in json.loads(f.read_text(encoding="utf-8")):
            seen.setdefault((a, b), test)
    return seen
