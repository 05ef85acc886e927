"""What one superstep per plan step instead of two would save: LangGraph itself running
onward's graph shape with execute and verify as two nodes (DESIGN.md's graph) vs fused
into one, in one process.

How it is measured
    The shape of ``_systems.shape_graph`` (a routing function ``Send``s each step to
    ``execute``; verify follows as a node of its own, or is part of ``execute`` with
    ``fused``), no-op nodes, over as many channels as onward's ``RunState`` has. Each way
    without a checkpointer (LangGraph's loop alone) and with LangGraph's own
    ``SqliteSaver`` (WAL from its ``setup()``, ``synchronous`` as the other benches give
    every system — NORMAL, FULL with ``ONWARD_FSYNC=1`` — and ``durability="sync"``; a
    new file per run; journal mode and synchronous read back from the connection and
    printed). Both ways run at the same settings. ``--rounds`` (7) rounds, each running
    a ``--steps`` (200) step chain once each way, the order alternating; the process's
    CPU ms per step (``time.process_time``), medians over rounds, and the paired ratio
    fused ÷ two. onward's own nodes and
    savers are not in it: this prices the loop's part of a superstep, the upper bound of
    what fusing would save onward, whose saver already makes the two supersteps one
    commit. Not in ``run_all.py`` (no target).

Run from the repo root: ``python bench/supersteps.py [--steps 200] [--rounds 7]``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _systems import shape_graph, sqlite_settings, synchronous


def run_once(steps: int, fused: bool, saver: bool, settings: set[str]) -> float:
    """CPU ms per step of one chain (the saver's settings read back into ``settings``)."""
    with tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp:
        conn = sqlite3.connect(Path(tmp) / "lg.db", check_same_thread=False)
        try:
            checkpointer: Any = None
            if saver:
                from langgraph.checkpoint.sqlite import SqliteSaver

                checkpointer = SqliteSaver(conn)
                checkpointer.setup()  # journal_mode=WAL
                conn.execute(f"PRAGMA synchronous={synchronous()}")
                read = sqlite_settings(conn)
                settings.add(
                    f"journal_mode={read['journal_mode']}, "
                    f"synchronous={read['synchronous']}, durability=sync"
                )
            graph = shape_graph(steps, checkpointer, fused=fused)
            config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 3 * steps}
            start = time.process_time()
            out = graph.invoke({"count": 0}, config, durability="sync" if saver else None)
            cpu = time.process_time() - start
        finally:
            conn.close()
    if out["count"] != steps:
        raise RuntimeError(f"the run ended at count {out['count']}, expected {steps}")
    return cpu * 1000 / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"CPU ms per step ({args.steps} steps, {args.rounds} rounds, medians)")
    for saver in (False, True):
        times: dict[bool, list[float]] = {False: [], True: []}
        settings: set[str] = set()
        for r in range(args.rounds):
            for fused in (False, True) if r % 2 == 0 else (True, False):
                times[fused].append(run_once(args.steps, fused, saver, settings))
        label = f"SqliteSaver ({'; '.join(sorted(settings))})" if saver else "no checkpointer"
        two, one = statistics.median(times[False]), statistics.median(times[True])
        ratio = statistics.median(f / t for f, t in zip(times[True], times[False], strict=True))
        print(
            f"  {label}: two supersteps {two:.3f}, fused {one:.3f}, saved {two - one:.3f} ms "
            f"(fused ÷ two {ratio:.2f}, paired)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
