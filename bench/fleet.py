"""Fleet benchmark: runs per minute with 1 versus 2 ``onward worker`` processes.

What is compared
    ``--runs`` runs (default 24) are submitted to a fresh store, each a chain of
    ``--steps`` I/O-bound steps (default 3 ``wait`` steps of ``--io`` seconds, 0.2 s:
    a tool waiting on a network or a disk). Then 1 or 2 worker processes
    (``onward worker --exit-when-idle``, one run at a time each) drain the queue. The
    time from starting the workers to the last one exiting gives runs per minute.
    Target: 2 workers ÷ 1 worker ≥ 1.7.

How it is measured
    Interleaved rounds (1 then 2 workers, the order alternating from round to round),
    each on a fresh Postgres schema (``--backend sqlite`` for a SQLite file); medians
    over ``--rounds`` (default 3). Worker start-up (Python, imports) is inside the time,
    as it is for a real fleet that scales out.

Run from the repo root: ``python bench/fleet.py [--runs 24] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _common import pg_schema, write_json
from onward import Onward, Plan, PlanStep, RunStatus


def io_plan(steps: int, io: float) -> Plan:
    return Plan(
        steps=[
            PlanStep(
                id=f"io{i}",
                tool="wait",
                args={"seconds": io},
                depends_on=[f"io{i - 1}"] if i else [],
            )
            for i in range(steps)
        ]
    )


@contextmanager
def store(backend: str) -> Iterator[str]:
    if backend == "postgres":
        with pg_schema() as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="onward-fleet-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'onward.db'}"


def one_round(workers: int, runs: int, steps: int, io: float, backend: str) -> float:
    """Seconds for ``workers`` processes to finish ``runs`` submitted runs."""
    with store(backend) as db, tempfile.TemporaryDirectory(prefix="onward-fleet-") as wd:
        with Onward(db, model=None) as ow:
            tids = [ow.submit(plan=io_plan(steps, io), workdir=wd) for _ in range(runs)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
        env["ONWARD_BLOCK_MODEL_REQUESTS"] = "1"
        cmd = [sys.executable, "-m", "onward", "worker", "--db", db, "--exit-when-idle"]
        start = time.perf_counter()
        procs = [
            subprocess.Popen([*cmd, "--poll", "0.05"], cwd=wd, env=env, stderr=subprocess.DEVNULL)
            for _ in range(workers)
        ]
        for p in procs:
            if p.wait(600) != 0:
                raise SystemExit(f"a worker exited with {p.returncode}")
        elapsed = time.perf_counter() - start
        with Onward(db, model=None) as ow:
            bad = [t for t in tids if ow.get(t).status is not RunStatus.DONE]
        if bad:
            raise SystemExit(f"{len(bad)} runs did not finish")
        return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--io", type=float, default=0.2, help="seconds each step waits")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    args = parser.parse_args(argv)
    console = Console()
    seconds: dict[int, list[float]] = {1: [], 2: []}
    for r in range(args.rounds):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            with console.status(f"round {r + 1}/{args.rounds}: {workers} worker(s)"):
                seconds[workers].append(
                    one_round(workers, args.runs, args.steps, args.io, args.backend)
                )
    per_minute = {w: args.runs * 60 / statistics.median(v) for w, v in seconds.items()}
    table = Table(
        title=f"{args.runs} runs of {args.steps} × {args.io} s I/O steps on {args.backend}, "
        f"{args.rounds} rounds"
    )
    for col in ("workers", "median s", "min s", "max s", "runs / min"):
        table.add_column(col, justify="right")
    for w, v in seconds.items():
        table.add_row(
            str(w),
            f"{statistics.median(v):.2f}",
            f"{min(v):.2f}",
            f"{max(v):.2f}",
            f"{per_minute[w]:.1f}",
        )
    console.print(table)
    ratio = per_minute[2] / per_minute[1]
    console.print(f"2 workers ÷ 1 worker: {ratio:.2f}× runs per minute (target ≥ 1.7)")
    write_json(
        args.json,
        [
            {
                "bench": "fleet.py",
                "measure": f"runs per minute, 2 workers vs 1 ({args.backend}, {args.runs} runs "
                f"of {args.steps} × {args.io} s I/O steps)",
                "onward": round(per_minute[2], 1),
                "baseline": f"1 worker: {per_minute[1]:.1f}",
                "ratio": round(ratio, 2),
                "target": "≥ 1.7",
                "met": ratio >= 1.7,
            }
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
