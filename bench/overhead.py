"""Overhead benchmark: wall time per step of onward vs. a bare LangGraph loop.

What is compared
    * **onward**: a declared plan of N ``noop`` steps in a dependency chain, run by
      ``Onward(db).run(plan=...)`` on a fresh SQLite store. Each plan step is one
      LangGraph superstep (execute runs the tool and verifies its output; the gate
      routes without a superstep of its own) with a checkpoint after it, plus a
      plan and a finalize superstep per run.
    * **bare-langgraph (sqlite)**: ``StateGraph`` + ``SqliteSaver`` with
      ``durability="sync"``; one node increments a counter and a conditional edge
      loops back to it until the counter reaches N (one superstep per step). The
      connection uses the same pragmas as onward's store (WAL, synchronous=NORMAL).
    * **bare-langgraph (no checkpointer)**: the same loop compiled without a
      checkpointer, as a reference for LangGraph's own per-superstep cost.
    * **DBOS (sqlite)**: the ``dbos`` package, a ``@DBOS.workflow`` calling a no-op
      ``@DBOS.step`` N times on a fresh SQLite system database: the durable-execution
      peer a user would pick instead (each step's output is checkpointed).
    * **onward (postgres)**, **bare-langgraph (postgres, sync)** and **DBOS
      (postgres)**: the same on the machine's PostgreSQL ($ONWARD_BENCH_PG, default the
      local ``test`` database): onward in a fresh schema, the bare graph with LangGraph's
      ``PostgresSaver``, DBOS in a fresh database. ``--no-postgres`` leaves them out.

Target: onward ÷ DBOS ≤ 1.0 on each backend.

How it is measured
    One untimed warm-up run of each variant, then ``--rounds`` rounds; every round
    runs each variant once on a fresh database in a new temporary directory, in an
    order that rotates from round to round so drift is spread evenly. Only the run
    itself is timed (``ow.run(...)`` / ``graph.invoke(...)``); opening the store and
    compiling the graph are not. Reported: median (and min / max) milliseconds per
    step over the rounds, and the ratios of the medians.

Run from the repo root: ``python bench/overhead.py [--steps 200] [--rounds 5] [--no-postgres]``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from rich.console import Console
from rich.table import Table

import _dbos
from _common import chain_plan, pg_schema, write_json
from onward import Onward, RunStatus, StepStatus

ONWARD = "onward (sqlite)"
BARE_SQLITE = "bare-langgraph (sqlite, sync)"
BARE_NONE = "bare-langgraph (no checkpointer)"
ONWARD_PG = "onward (postgres)"
BARE_PG = "bare-langgraph (postgres, sync)"
DBOS_SQLITE = "DBOS (sqlite)"
DBOS_PG = "DBOS (postgres)"

Runner = Callable[[int], float]
"""Runs N steps on a fresh store and returns the timed seconds."""


def _onward_timed(db: str, workdir: Path, n: int) -> float:
    with Onward(db, model=None) as ow:
        start = time.perf_counter()
        view = ow.run(plan=chain_plan(n), workdir=workdir)
        elapsed = time.perf_counter() - start
    done = sum(s.status is StepStatus.DONE for s in view.steps)
    if view.status is not RunStatus.DONE or done != n:
        raise SystemExit(f"onward run ended {view.status} with {done}/{n} steps done")
    return elapsed


def run_onward(n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp:
        return _onward_timed(f"sqlite:///{Path(tmp) / 'onward.db'}", Path(tmp), n)


def run_onward_pg(n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp, pg_schema() as url:
        return _onward_timed(url, Path(tmp), n)


class CountState(TypedDict):
    count: int


def counter_graph(n: int, checkpointer: Any) -> Any:
    def step(state: CountState) -> dict[str, Any]:
        return {"count": state["count"] + 1}

    def route(state: CountState) -> str:
        return "step" if state["count"] < n else END

    g: StateGraph[Any] = StateGraph(CountState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", route, ["step", END])
    return g.compile(checkpointer=checkpointer)


def invoke_timed(graph: Any, n: int, durability: str | None) -> float:
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": n + 10}
    start = time.perf_counter()
    out = graph.invoke({"count": 0}, config, durability=durability)
    elapsed = time.perf_counter() - start
    if out["count"] != n:
        raise SystemExit(f"bare LangGraph run ended at count {out['count']}, expected {n}")
    return elapsed


def run_bare_sqlite(n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp:
        conn = sqlite3.connect(Path(tmp) / "bare.db", check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()  # journal_mode=WAL, as onward's store
            conn.execute("PRAGMA synchronous=NORMAL")  # as onward's store
            return invoke_timed(counter_graph(n, saver), n, "sync")
        finally:
            conn.close()


def run_bare_pg(n: int) -> float:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with pg_schema() as url:
        kwargs: Any = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        with psycopg.connect(url, **kwargs) as conn:
            saver = PostgresSaver(conn)
            saver.setup()
            return invoke_timed(counter_graph(n, saver), n, "sync")


def run_bare_none(n: int) -> float:
    # No durability argument: LangGraph 1.2.24 warns that it has no effect without a
    # checkpointer, then fails on the missing checkpoint future when it is "sync".
    return invoke_timed(counter_graph(n, None), n, None)


VARIANTS: dict[str, Runner] = {
    ONWARD: run_onward,
    BARE_SQLITE: run_bare_sqlite,
    BARE_NONE: run_bare_none,
    DBOS_SQLITE: _dbos.run_sqlite,
    ONWARD_PG: run_onward_pg,
    BARE_PG: run_bare_pg,
    DBOS_PG: _dbos.run_postgres,
}


def measure(
    steps: int, rounds: int, console: Console, variants: dict[str, Runner] = VARIANTS
) -> dict[str, list[float]]:
    """Per-step milliseconds of every round, by variant."""
    for runner in variants.values():  # warm-up: imports, lazy caches, first-file costs
        runner(min(steps, 5))
    names = list(variants)
    ms: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            with console.status(f"round {r + 1}/{rounds}: {name}, {steps} steps"):
                ms[name].append(variants[name](steps) * 1000 / steps)
    return ms


def report(
    ms: dict[str, list[float]], steps: int, rounds: int, console: Console
) -> list[dict[str, object]]:
    med = {name: statistics.median(v) for name, v in ms.items()}
    table = Table(title=f"milliseconds per step ({steps} steps, {rounds} rounds)")
    table.add_column("variant", no_wrap=True)
    table.add_column("median", justify="right")
    table.add_column("min", justify="right")
    table.add_column("max", justify="right")
    table.add_column("÷ bare sqlite", justify="right", no_wrap=True)
    for name, values in ms.items():
        table.add_row(
            name,
            f"{med[name]:.3f}",
            f"{min(values):.3f}",
            f"{max(values):.3f}",
            f"{med[name] / med[BARE_SQLITE]:.2f}",
        )
    console.print(table)
    rows: list[dict[str, object]] = []
    for backend, ours, dbos, bare in (
        ("sqlite", ONWARD, DBOS_SQLITE, BARE_SQLITE),
        ("postgres", ONWARD_PG, DBOS_PG, BARE_PG),
    ):
        if ours not in med:
            continue
        ratio = med[ours] / med[dbos]
        console.print(
            f"onward ÷ DBOS ({backend}): {ratio:.2f}× (target ≤ 1.0); "
            f"onward ÷ bare-langgraph ({backend}, sync): {med[ours] / med[bare]:.2f}×"
        )
        rows.append(
            {
                "bench": "overhead.py",
                "measure": f"ms per no-op step, {backend} ({steps} steps)",
                "onward": round(med[ours], 3),
                "baseline": f"DBOS {med[dbos]:.3f}; LangGraph sync {med[bare]:.3f}",
                "ratio": round(ratio, 2),
                "target": "≤ 1.0",
                "met": ratio <= 1.0,
            }
        )
    console.print(
        f"onward ÷ bare-langgraph (sqlite, sync): {med[ONWARD] / med[BARE_SQLITE]:.2f}×\n"
        f"onward ÷ bare-langgraph (no checkpointer): {med[ONWARD] / med[BARE_NONE]:.2f}×\n"
        f"bare sqlite ÷ bare no checkpointer: {med[BARE_SQLITE] / med[BARE_NONE]:.2f}×\n"
        "(an onward step and a bare step are each one superstep and one checkpoint)"
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=200, help="steps per run (default 200)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite variants only")
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    console = Console()
    variants = {k: v for k, v in VARIANTS.items() if not (args.no_postgres and "postgres" in k)}
    ms = measure(args.steps, args.rounds, console, variants)
    write_json(args.json, report(ms, args.steps, args.rounds, console))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
