"""What a tool's timeout costs a step: the hand-off to the worker thread that can abandon it.

What is compared
    Two user tools that do nothing, ``bounded`` (``@tool``, the default 300 s timeout: the
    call runs on onward's worker thread, so a hung call can be abandoned) and
    ``unbounded`` (``@tool(timeout=None)``: the call runs on the step's own thread). Each
    drives a chain of ``--steps`` (300) steps of its tool with ``Onward.run`` on a fresh
    store, ``--rounds`` (8) rounds alternating which goes first; reported: the median ms
    per step of each, and the median of the rounds' bounded ÷ unbounded. Both run in
    this one process, with the same store settings: SQLite, onward's defaults
    (``journal_mode=WAL``, ``synchronous=NORMAL``, read back and printed).

    Also: the round trip of one call through the worker pool alone (``--calls`` no-op
    calls submitted and waited for one at a time), in µs.

No target: the figure behind docs/tools.md's "what a timeout costs". On a virtual machine
most of the hand-off is waking a thread on another vCPU, twice a call.

Run from the repo root: ``python bench/handoff.py [--steps 300] [--rounds 8]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOOLS = """
from onward import tool


@tool
def bounded(value: int = 0) -> dict:
    return {"value": value}


@tool(timeout=None)
def unbounded(value: int = 0) -> dict:
    return {"value": value}
"""


def chain(tool: str, n: int) -> object:
    from onward import Plan, PlanStep

    return Plan(
        steps=[
            PlanStep(
                id=f"s{i}", tool=tool, args={"value": i}, depends_on=[f"s{i - 1}"] if i else []
            )
            for i in range(n)
        ]
    )


def ms_per_step(tool: str, steps: int, tools: Path) -> tuple[float, str]:
    """(ms per step of a chain of ``tool``, the store's journal_mode/synchronous)."""
    from _common import any_size
    from onward import Onward

    with tempfile.TemporaryDirectory(prefix="onward-bench-handoff-") as tmp:
        with Onward(f"sqlite:///{tmp}/onward.db", model=None, tool_modules=[str(tools)]) as ow:
            conn = ow.store.conn  # type: ignore[attr-defined]
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
                conn.execute("PRAGMA synchronous").fetchone()[0]
            ]
            start = time.perf_counter()
            view = ow.run(plan=chain(tool, steps), workdir=tmp, **any_size())
            elapsed = time.perf_counter() - start
        if view.status != "done":
            raise SystemExit(f"the {tool} chain ended {view.status}")
    return elapsed * 1000 / steps, f"{mode}/{sync}"


def pool_round_trip_us(calls: int) -> float:
    from onward.nodes.execute import _POOL

    def nothing() -> None:
        return None

    _POOL.submit(nothing).result()
    start = time.perf_counter()
    for _ in range(calls):
        _POOL.submit(nothing).result(timeout=60)
    return (time.perf_counter() - start) * 1e6 / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="onward-bench-handoff-tools-") as tmp:
        tools = Path(tmp) / "handoff_tools.py"
        tools.write_text(TOOLS, encoding="utf-8")
        ms_per_step("bounded", 20, tools)  # warm-up: imports, first-use caches
        ms_per_step("unbounded", 20, tools)
        runs: dict[str, list[float]] = {"bounded": [], "unbounded": []}
        ratios: list[float] = []
        settings: set[str] = set()
        for r in range(args.rounds):
            order = ("bounded", "unbounded") if r % 2 == 0 else ("unbounded", "bounded")
            got = {}
            for tool in order:
                got[tool], setting = ms_per_step(tool, args.steps, tools)
                settings.add(setting)
                runs[tool].append(got[tool])
            ratios.append(got["bounded"] / got["unbounded"])
    trip = statistics.median(pool_round_trip_us(args.calls) for _ in range(3))
    print(f"SQLite {', '.join(sorted(settings))} (journal_mode/synchronous, read back)")
    for tool, values in runs.items():
        print(
            f"{tool:9} ms per step: median {statistics.median(values):.3f} "
            f"(min {min(values):.3f}, max {max(values):.3f}; {args.steps} steps, "
            f"{args.rounds} rounds)"
        )
    print(f"bounded ÷ unbounded, median of rounds: {statistics.median(ratios):.3f}")
    print(f"one call's round trip through the worker pool: {trip:.0f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
