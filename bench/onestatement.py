"""What sending a Postgres commit as one statement saves: onward's chain of no-op steps
with the one-statement commit (checkpointing/onestatement.py) vs the same code sending
every commit as the pipeline (BEGIN, an execute per row, COMMIT), in one process.

How it is measured
    One process, one scratch schema on ``$ONWARD_BENCH_PG``'s server. ``--rounds`` (8)
    rounds, each running a ``--steps`` (150) step chain once each way, the order
    alternating; each run on a fresh ``Onward`` (a 5-step warm-up first), timed around
    ``run`` only: wall ms per step, and the process's user and system CPU ms per step
    (``getrusage``). The ratios are medians over rounds of one-statement ÷ pipeline within
    the round (paired: neighbouring runs share the machine's load). The server's own CPU
    is not counted. Both ways run against the same server at its defaults, and the
    ``synchronous_commit`` read back from it is printed (the same durability for both).
    Not in ``run_all.py`` (no target).

Run from the repo root: ``python bench/onestatement.py [--steps 150] [--rounds 8]``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import uuid
from typing import Any

import psycopg

from _common import chain_plan, pg_schema
from onward import Onward
from onward.checkpointing import onestatement


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def run_once(url: str, steps: int) -> tuple[float, float, float]:
    """(wall, user, system) ms per step of one chain on a fresh client."""
    with Onward(url, model=None) as ow:
        ow.run(plan=chain_plan(5), thread_id=f"warm-{uuid.uuid4().hex}")
        user, system = _cpu()
        start = time.perf_counter()
        ow.run(plan=chain_plan(steps), thread_id=f"run-{uuid.uuid4().hex}")
        wall = time.perf_counter() - start
        user2, system2 = _cpu()
    return wall * 1000 / steps, (user2 - user) * 1000 / steps, (system2 - system) * 1000 / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)
    joined = onestatement.one_statement

    def pipeline(_: Any) -> None:
        return None  # the saver then sends the pipeline, as for a batch it cannot join

    results: dict[str, list[tuple[float, float, float]]] = {"one": [], "pipeline": []}
    with pg_schema() as url:
        with psycopg.connect(url) as conn:
            row = conn.execute("SHOW synchronous_commit").fetchone()
        print(f"Postgres synchronous_commit = {row[0] if row else '?'} (read back; both ways)")
        for r in range(args.rounds):
            order = ["one", "pipeline"] if r % 2 == 0 else ["pipeline", "one"]
            for way in order:
                # The saver looks the function up when it is made (each Onward makes one).
                onestatement.one_statement = joined if way == "one" else pipeline
                results[way].append(run_once(url, args.steps))
                print(f"  round {r + 1}/{args.rounds}: {way}", flush=True)
    onestatement.one_statement = joined
    print(f"ms per no-op step on Postgres ({args.steps} steps, {args.rounds} rounds, medians)")
    for way, rows in results.items():
        wall, user, system = (statistics.median(row[i] for row in rows) for i in range(3))
        print(f"  {way:9s} wall {wall:.3f}  user {user:.3f}  system {system:.3f}")
    pairs = list(zip(results["one"], results["pipeline"], strict=True))
    for i, name in enumerate(("wall", "user CPU", "system CPU")):
        ratio = statistics.median(a[i] / b[i] for a, b in pairs)
        print(f"one statement ÷ pipeline, {name}: {ratio:.3f} (paired)")
    cpu = statistics.median((a[1] + a[2]) / (b[1] + b[2]) for a, b in pairs)
    print(f"one statement ÷ pipeline, CPU (user + system): {cpu:.3f} (paired)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
