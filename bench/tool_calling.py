"""What a tool-calling step's durability costs per call: each model turn and each call is
recorded in the effect ledger (a claim and a result per turn and per call), so a kill
between two calls loses none of them.

What is compared
    The same ``--calls`` (20) calls of one no-op tool (``bench_lookup``, pure), made
    (a) by a tool-calling step whose scripted model asks for one call per turn, then
    answers, and (b) by a declared plan of that many steps of the tool, each after the
    one before. Each drives a fresh store with ``Onward.run``, ``--rounds`` (5) rounds
    alternating which goes first; reported: the median ms per call of each, their ratio,
    and the ledger rows the tool-calling step wrote. Both run in this one process with
    the same store settings: SQLite, onward's defaults (read back from a fresh store and
    printed). The scripted model answers at once:
    a real model's turn (hundreds of ms) dwarfs what is measured here.

Run from the repo root: ``python bench/tool_calling.py [--calls 20] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import sqlite_durability
from onward import Onward, ScriptedChatModel, tool
from onward.llm.fake import tool_calls


@tool(name="bench_lookup")
def bench_lookup(key: str) -> dict[str, Any]:
    """Return the key (a no-op tool)."""
    return {"key": key}


def agent_plan(calls: int) -> dict[str, Any]:
    args = {"instruction": "Look up each key.", "tools": ["bench_lookup"], "max_calls": calls}
    return {"goal": "g", "steps": [{"id": "agent", "tool": "tool_calling", "args": args}]}


def chain_plan(calls: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for i in range(calls):
        step: dict[str, Any] = {"id": f"s{i}", "tool": "bench_lookup", "args": {"key": str(i)}}
        if i:
            step["depends_on"] = [f"s{i - 1}"]
        steps.append(step)
    return {"goal": "g", "steps": steps}


def timed(kind: str, calls: int, root: Path) -> tuple[float, int]:
    """ms per call of one run, and the ledger rows it wrote."""
    answers = [tool_calls(("bench_lookup", {"key": str(i)})) for i in range(calls)]
    model = ScriptedChatModel(responses=[*answers, "done"])
    db = f"sqlite:///{root / kind / 'onward.db'}"
    plan = agent_plan(calls) if kind == "agent" else chain_plan(calls)
    with Onward(db, model=model) as ow:
        started = time.perf_counter()
        view = ow.run(plan=plan, thread_id="t", workdir=root)
        elapsed = time.perf_counter() - started
        assert view.status == "done", view
        rows = len(ow.store.ledger.for_thread("t"))
    return 1000 * elapsed / calls, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    agent: list[float] = []
    chain: list[float] = []
    rows = 0
    for r in range(args.rounds):
        order = ("agent", "chain") if r % 2 == 0 else ("chain", "agent")
        for kind in order:
            with tempfile.TemporaryDirectory() as tmp:
                ms, written = timed(kind, args.calls, Path(tmp))
                if kind == "agent":
                    agent.append(ms)
                    rows = written
                else:
                    chain.append(ms)
    a, c = statistics.median(agent), statistics.median(chain)
    print(f"store: {sqlite_durability()}")
    print(f"{args.calls} calls, {args.rounds} rounds (median ms per call)")
    print(f"  tool-calling step: {a:8.2f} ms/call  ({rows} ledger rows: turns, calls, the step)")
    print(f"  plan of steps:     {c:8.2f} ms/call")
    print(f"  ratio:             {a / c:8.2f}")


if __name__ == "__main__":
    main()
