"""What LangGraph's hand-off of every checkpointer call to a worker thread costs a step.

LangGraph's sync loop submits each ``put`` and ``put_writes`` of the checkpointer to a
thread pool (``BackgroundExecutor``) and waits for it: four hand-offs per onward plan step.
onward used to patch that submit to run in the calling thread; issue 40 deleted the patch
(it reached into ``langgraph.pregel._executor``). This bench measures what the deletion
costs, so the price is a number anyone can reproduce, not an estimate.

What is compared
    ``Onward.run`` of a chain of ``--steps`` (300) ``noop`` steps on a fresh store, as
    shipped, against the same run with LangGraph's ``BackgroundExecutor.submit`` replaced,
    for the run only, by a call in the calling thread (a measurement: nothing in onward
    does this). ``--rounds`` (8) rounds alternating which goes first; reported: the
    process's CPU ms per step (all threads) and wall ms per step, medians, and the median
    of the rounds' shipped ÷ inline ratios. SQLite (onward's defaults, read back and
    printed) and, with ``--postgres``, a fresh schema on ``$ONWARD_BENCH_PG``'s server
    (the client's CPU only).

No target: the figure behind docs/benchmarks.md's account of issue 40's overhead allowance.

Run from the repo root: ``python bench/saver_handoff.py [--steps 300] [--rounds 8] [--postgres]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from _common import any_size, chain_plan, pg_durability, pg_schema, sqlite_durability


@contextmanager
def inline_submits() -> Iterator[None]:
    """LangGraph's background submits run in the calling thread while this is open (the
    bench's counterfactual; the private module is imported here only)."""
    from langgraph.pregel import _executor

    original = _executor.BackgroundExecutor.submit

    def submit(self: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        flags = {k: kwargs.pop(k) for k in list(kwargs) if k.startswith("__")}
        task: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            task.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # the loop sees it as it sees a worker's
            task.set_exception(exc)
        self.tasks[task] = (
            flags.get("__cancel_on_exit__", False),
            flags.get("__reraise_on_exit__", True),
        )
        task.add_done_callback(self.done)
        return task

    _executor.BackgroundExecutor.submit = submit  # type: ignore[method-assign]
    try:
        yield
    finally:
        _executor.BackgroundExecutor.submit = original  # type: ignore[method-assign]


def per_step(db: str, steps: int, inline: bool) -> tuple[float, float]:
    """(CPU ms, wall ms) per step of one chain run on ``db``."""
    from onward import Onward

    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="onward-bench-saver-"))
        url = db or f"sqlite:///{tmp}/onward.db"
        ow = stack.enter_context(Onward(url, model=None))
        ow.run(plan=chain_plan(3), workdir=tmp)  # schema, first-use caches
        if inline:
            stack.enter_context(inline_submits())
        cpu, wall = time.process_time(), time.perf_counter()
        view = ow.run(plan=chain_plan(steps), workdir=tmp, **any_size())
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if view.status != "done":
        raise SystemExit(f"the chain ended {view.status}")
    return cpu * 1000 / steps, wall * 1000 / steps


def compare(name: str, db: Callable[[], str], steps: int, rounds: int) -> None:
    got: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    ratios: list[float] = []
    for r in range(rounds):
        pair = {}
        for inline in (False, True) if r % 2 == 0 else (True, False):
            pair[inline] = per_step(db(), steps, inline)
            got[inline].append(pair[inline])
        ratios.append(pair[False][0] / pair[True][0])
    for inline, label in ((False, "as shipped"), (True, "inline submits")):
        cpu = statistics.median(c for c, _ in got[inline])
        wall = statistics.median(w for _, w in got[inline])
        print(f"{name:8} {label:15} CPU {cpu:6.3f} ms/step  wall {wall:6.3f} ms/step")
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(
        f"{name:8} as shipped ÷ inline, CPU, median of {rounds} rounds: "
        f"{statistics.median(ratios):.3f} (middle half {q[0]:.3f}–{q[2]:.3f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--postgres", action="store_true", help="also on $ONWARD_BENCH_PG")
    args = parser.parse_args(argv)
    stated = [sqlite_durability()] + ([pg_durability()] if args.postgres else [])
    print(f"durability (read back): {'; '.join(stated)}; {args.steps} no-op steps a run")
    compare("sqlite", lambda: "", args.steps, args.rounds)
    if args.postgres:
        with ExitStack() as stack:
            schemas: list[str] = []

            def fresh() -> str:
                schemas.append(stack.enter_context(pg_schema()))
                return schemas[-1]

            compare("postgres", fresh, args.steps, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
