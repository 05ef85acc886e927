"""What reading a long run costs where only a little of it is wanted: ``Onward.pending``
on a run of N steps waiting for its plan's approval (the questions: a served follow-up
asks them first, ``Onward.inbox`` for every waiting run), and the id of a finished N-step
run's newest checkpoint (what a served follow-up's run record names,
``onward.observe.reading.newest_checkpoint``). Median wall and CPU ms of 20 calls each, on
SQLite and on Postgres (a fresh schema).

    python bench/long_reads.py [--steps 1000]
    PYTHONPATH=<worktree>/src python bench/long_reads.py   # an earlier checkout's
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from _common import any_size, chain_plan, pg_durability, pg_schema, sqlite_durability
from onward import Onward
from onward.observe import reading

CALLS = 20


def timed(call: Callable[[], Any]) -> tuple[float, float]:
    """(median wall ms, median CPU ms) of ``CALLS`` calls, after one not counted."""
    call()
    walls, cpus = [], []
    for _ in range(CALLS):
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return 1000 * statistics.median(walls), 1000 * statistics.median(cpus)


def newest_checkpoint(ow: Onward, thread_id: str) -> str | None:
    """``reading.newest_checkpoint``; an earlier checkout has none, and its served path
    read the id through the saver (``onward.serve.intake.latest_checkpoint``)."""
    found = getattr(reading, "newest_checkpoint", None)
    if found is None:
        from onward.serve.intake import latest_checkpoint as found  # type: ignore[attr-defined,no-redef]
    return found(ow, thread_id)  # type: ignore[no-any-return]


def measure(name: str, url: str, steps: int) -> None:
    with Onward(url) as ow:
        plan = chain_plan(steps)
        ow.run("w", plan=plan, thread_id="waiting", **any_size(approve_plan=True))
        ow.run("d", plan=plan, thread_id="done", **any_size())
        reads = {
            "Onward.pending": lambda: ow.pending("waiting"),
            "newest checkpoint": lambda: newest_checkpoint(ow, "done"),
        }
        for label, call in reads.items():
            wall, cpu = timed(call)
            print(f"{name:8s} {steps:6d} {label:18s} {wall:8.2f} ms {cpu:8.2f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    print("durability (read back):", sqlite_durability() + ";", pg_durability())
    print(f"{'store':8s} {'steps':>6s} {'read':18s} {'wall':>11s} {'CPU':>11s}")
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        measure("sqlite", f"sqlite:///{tmp}/reads.db", args.steps)
        measure("postgres", stack.enter_context(pg_schema()), args.steps)


if __name__ == "__main__":
    main()
