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

One worker at rising concurrency (``--concurrency 1,8,32``)
    Postgres only. For each concurrency C, 2·C runs (at least 16) of 3 steps that each wait
    ``--io`` seconds (0.5 s here) are submitted, then one ``onward worker --concurrency C
    --exit-when-idle`` drains them. Printed: wall ÷ ideal, the wall from the first tool call's
    start to the last one's end (``ONWARD_EXECUTION_LOG``; the ideal: ⌈runs ÷ C⌉ · steps ·
    io); the worker's start-up to exit with nothing to do (an idle worker on the same store,
    measured first); CPU per step of the worker process and of its Postgres backends (sampled
    from ``/proc``, so the server must run on this host), less the idle worker's; and the
    peak of the worker's connections in ``pg_stat_activity`` (by ``application_name``),
    which ``ONWARD_PG_POOL_SIZE`` (default 10) bounds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _common import pg_durability, pg_schema, write_json
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


class Backends:
    """Samples the connections of one ``application_name``: their peak number, and the CPU
    seconds of their server processes (the last reading of each, from ``/proc``)."""

    def __init__(self, url: str, app: str) -> None:
        self.url, self.app = url, app
        self.peak = 0
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Backends:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu(self) -> float:
        return sum(self._cpu.values())

    def _sample(self) -> None:
        import psycopg

        tick = os.sysconf("SC_CLK_TCK")
        with psycopg.connect(self.url, autocommit=True, application_name="bench") as conn:
            while not self._stop.wait(0.02):
                pids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                        (self.app,),
                    )
                ]
                self.peak = max(self.peak, len(pids))
                for pid in pids:
                    try:
                        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    self._cpu[pid] = (int(fields[11]) + int(fields[12])) / tick


def worker_round(db: str, wd: str, concurrency: int, app: str) -> tuple[float, float, Backends]:
    """(wall s, worker CPU s, its backends) of one ``onward worker`` draining the queue."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
    env |= {"ONWARD_BLOCK_MODEL_REQUESTS": "1", "PGAPPNAME": app}
    env["ONWARD_EXECUTION_LOG"] = str(Path(wd) / "calls.jsonl")
    cmd = [sys.executable, "-m", "onward", "worker", "--db", db, "--exit-when-idle"]
    cmd += ["--poll", "0.05", "--concurrency", str(concurrency)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with Backends(db.split("?")[0], app) as backends:
        start = time.perf_counter()
        if subprocess.run(cmd, cwd=wd, env=env, stderr=subprocess.DEVNULL).returncode != 0:
            raise SystemExit("the worker failed")
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, backends


def concurrency_row(concurrency: int, steps: int, io: float) -> dict[str, float]:
    runs = max(16, 2 * concurrency)
    with pg_schema() as db, tempfile.TemporaryDirectory(prefix="onward-fleet-") as wd:
        with Onward(db, model=None) as made:
            made.store  # noqa: B018  (made before anything is measured)
        idle_wall, idle_cpu, idle = worker_round(db, wd, concurrency, f"bench-idle-{concurrency}")
        with Onward(db, model=None) as ow:
            tids = [ow.submit(plan=io_plan(steps, io), workdir=wd) for _ in range(runs)]
        wall, cpu, busy = worker_round(db, wd, concurrency, f"bench-fleet-{concurrency}")
        with Onward(db, model=None) as ow:
            if any(ow.get(t).status is not RunStatus.DONE for t in tids):
                raise SystemExit("some runs did not finish")
        calls = [json.loads(x) for x in (Path(wd) / "calls.jsonl").read_text().splitlines()]
    span = max(c["t"] for c in calls) - min(c["t"] for c in calls)
    ideal = math.ceil(runs / concurrency) * steps * io
    n = runs * steps
    return {
        "concurrency": concurrency,
        "runs": runs,
        "wall_over_ideal": span / ideal,
        "wall_s": wall,
        "startup_s": idle_wall,
        "client_ms_per_step": 1000 * (cpu - idle_cpu) / n,
        "postgres_ms_per_step": 1000 * (busy.cpu - idle.cpu) / n,
        "peak_connections": busy.peak,
    }


def concurrency_sweep(levels: list[int], steps: int, io: float, json_path: Path | None) -> int:
    console = Console()
    rows = []
    for c in levels:
        with console.status(f"one worker at --concurrency {c}"):
            rows.append(concurrency_row(c, steps, io))
    table = Table(title=f"one worker, runs of {steps} × {io} s I/O steps, Postgres")
    heads = ("concurrency", "runs", "wall ÷ ideal", "start-up s", "client ms/step")
    for col in (*heads, "Postgres ms/step", "peak connections"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["concurrency"]),
            str(r["runs"]),
            f"{r['wall_over_ideal']:.2f}",
            f"{r['startup_s']:.2f}",
            f"{r['client_ms_per_step']:.1f}",
            f"{r['postgres_ms_per_step']:.1f}",
            str(r["peak_connections"]),
        )
    console.print(table)
    console.print(f"pool size: ONWARD_PG_POOL_SIZE={os.environ.get('ONWARD_PG_POOL_SIZE', 10)}")
    console.print(f"durability (read back): {pg_durability()}")
    write_json(json_path, [{"bench": "fleet.py --concurrency", **r} for r in rows])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--io", type=float, default=0.2, help="seconds each step waits")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    parser.add_argument(
        "--concurrency", help="one worker at these concurrencies instead (e.g. 1,8,32)"
    )
    args = parser.parse_args(argv)
    if args.concurrency:
        levels = [int(c) for c in args.concurrency.split(",")]
        return concurrency_sweep(levels, args.steps, 0.5 if args.io == 0.2 else args.io, args.json)
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
