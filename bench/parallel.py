"""Parallel benchmark: 10 independent I/O steps versus one such step.

What is compared
    A plan of ``--width`` (default 10) independent ``wait`` steps of ``--io`` seconds
    (default 0.2: a tool waiting on a network or a disk), with ``max_concurrency`` equal
    to the width, against a plan with one such step. Both are whole runs (plan, steps,
    checkpoints, finalize) on a fresh SQLite store. If the steps run concurrently the
    wide run takes about as long as the single one. Target: wide ÷ single ≤ 2.

How it is measured
    Interleaved rounds (the order alternates), medians of ``--rounds`` (default 5).

Run from the repo root: ``python bench/parallel.py [--width 10] [--io 0.2]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _common import any_size, write_json
from onward import Onward, Plan, PlanStep, RunStatus


def run(width: int, io: float) -> float:
    plan = Plan(
        steps=[PlanStep(id=f"io{i}", tool="wait", args={"seconds": io}) for i in range(width)]
    )
    with (
        tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp,
        Onward(f"sqlite:///{Path(tmp) / 'onward.db'}", model=None) as ow,
    ):
        start = time.perf_counter()
        view = ow.run(plan=plan, workdir=tmp, max_concurrency=width, **any_size())
        elapsed = time.perf_counter() - start
    if view.status is not RunStatus.DONE:
        raise SystemExit(f"the {width}-step run ended {view.status}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--io", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    args = parser.parse_args(argv)
    console = Console()
    run(1, 0.01)  # warm-up
    seconds: dict[int, list[float]] = {1: [], args.width: []}
    for r in range(args.rounds):
        for width in (1, args.width) if r % 2 == 0 else (args.width, 1):
            seconds[width].append(run(width, args.io))
    med = {w: statistics.median(v) for w, v in seconds.items()}
    table = Table(title=f"{args.io} s I/O steps, whole runs ({args.rounds} rounds)")
    for col in ("steps", "median s", "min s", "max s"):
        table.add_column(col, justify="right")
    for w, v in seconds.items():
        table.add_row(str(w), f"{med[w]:.3f}", f"{min(v):.3f}", f"{max(v):.3f}")
    console.print(table)
    ratio = med[args.width] / med[1]
    console.print(f"{args.width} parallel steps ÷ 1 step: {ratio:.2f}× (target ≤ 2)")
    write_json(
        args.json,
        [
            {
                "bench": "parallel.py",
                "measure": f"run time, {args.width} independent {args.io} s steps vs 1",
                "onward": round(med[args.width], 3),
                "baseline": f"1 step: {med[1]:.3f} s",
                "ratio": round(ratio, 2),
                "target": "≤ 2",
                "met": ratio <= 2,
            }
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
