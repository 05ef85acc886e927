"""Memory benchmark: RSS over a long run, peak RSS of the order template on a big CSV,
and what a big argument costs the store.

What is compared
    (a) Long run. A chain of ``--steps`` (10,000) ``noop`` steps driven by ``Onward.run``
        on SQLite; RSS (``/proc/self/status`` VmRSS, after ``gc.collect()``) is sampled
        at every 1,000th ``step_done``. Baseline, in its own process: a bare LangGraph
        loop of as many supersteps (one node adding 1 to a counter, ``SqliteSaver``,
        ``durability="sync"``), sampled the same way. Target: onward grows ≤ 50 MB from
        step 1,000 to the last. Also printed (no target): the wall time of each 1,000
        steps, and the last thousand's ms per step ÷ the second thousand's, for both:
        whether a step costs more the longer the plan is.
    (b) Order template. ``--csv-mb`` (200) MB of generated orders (with injected
        anomalies of every rule) analysed by the template (``Onward.run`` with the demo
        goal: read_csv → validate_fields → find_anomalies → aggregate → render_report) in
        a child process; its peak RSS is the child's ``ru_maxrss`` (``os.wait4``).
        Baseline: a child that only imports onward and opens the store (the floor), and
        the CSV's size. Target: peak ≤ 1 GB. The report's counts are checked against
        the generator's.
    (c) Big argument. A plan whose first step takes a ``--arg-mb`` (50) MB string
        (``noop``'s ``value``) followed by 5 small steps, against the same plan with an
        empty string; the store's growth (database + WAL + artifact files) ÷ the
        argument's size. ``noop`` returns its argument, so its output artifact is one
        copy by itself: the growth counts the argument once as input and once as output.
        Target: ≤ 2 times. Baseline: bare LangGraph keeping the same string in its state
        over as many supersteps (``SqliteSaver``).

Durability: every side runs on SQLite in WAL mode, ``synchronous=NORMAL`` (onward's
default, and LangGraph's ``SqliteSaver`` is given the same), ``durability="sync"``.

Run from the repo root: ``python bench/memory.py [--steps 10000] [--csv-mb 200]
[--arg-mb 50]``; ``--only curve csv arg`` picks parts.
"""

from __future__ import annotations

import argparse
import csv
import gc
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import any_size, write_json  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(args: list[str]) -> tuple[dict[str, Any], float]:
    """Run ``memory.py --child ARGS`` alone; (its JSON result, its peak RSS in MB)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
    env["ONWARD_BLOCK_MODEL_REQUESTS"] = "1"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"child {args} failed with exit code {proc.returncode}")
    return json.loads(out), usage.ru_maxrss / 1024  # KiB on Linux


# -- (a) the RSS curve of a long run -------------------------------------------------


def curve_onward(steps: int, every: int) -> dict[str, Any]:
    from _common import chain_plan
    from onward import Onward, ProgressEvent

    samples: dict[int, float] = {}
    times: dict[int, float] = {}
    done = 0

    def on_event(event: ProgressEvent) -> None:
        nonlocal done
        if event.kind == "step_done":
            done += 1
            if done % every == 0:
                times[done] = time.perf_counter()  # before the sample's gc
                gc.collect()
                samples[done] = rss_mb()

    with tempfile.TemporaryDirectory(prefix="onward-bench-mem-") as tmp:
        with Onward(f"sqlite:///{tmp}/onward.db", model=None) as ow:
            view = ow.run(plan=chain_plan(steps), workdir=tmp, on_event=on_event, **any_size())
        if view.status != "done":
            raise SystemExit(f"the chain ended {view.status}")
    return {"samples": samples, "times": times}


def curve_langgraph(steps: int, every: int) -> dict[str, Any]:
    import sqlite3
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        n: int

    def step(s: S) -> S:
        return {"n": s["n"] + 1}

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= steps else "step")
    samples: dict[int, float] = {}
    times: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="onward-bench-mem-") as tmp:
        conn = sqlite3.connect(f"{tmp}/lg.db", check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        graph = g.compile(checkpointer=SqliteSaver(conn))
        cfg: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": steps + 10}
        for chunk in graph.stream({"n": 0}, cfg, stream_mode="values", durability="sync"):
            n = chunk["n"]
            if n and n % every == 0:
                times[n] = time.perf_counter()
                gc.collect()
                samples[n] = rss_mb()
        conn.close()
    return {"samples": samples, "times": times}


# -- (b) the order template on a big CSV ---------------------------------------------

HEADER = ["order_id", "customer", "region", "amount", "order_time", "ship_time"]
CUSTOMERS = ["acme", "globex", "initech", "umbrella", "hooli", "stark"]
REGIONS = ["north", "south", "east", "west"]


def write_orders(path: Path, target_bytes: int) -> dict[str, int]:
    """Stream orders until the file has ``target_bytes``; anomalies at fixed strides.
    Returns the expected count per rule, as the template counts them."""
    expected = dict.fromkeys(
        [
            "rows",
            "non_positive_amount",
            "ship_before_order",
            "duplicate_order_id",
            "missing_required_fields",
            "invalid_value",
            "malformed",
        ],
        0,
    )
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        i, prev = 0, ""
        while i % 1000 or f.tell() < target_bytes:
            day, minute = divmod(i % 500_000, 1440)
            ordered = (
                f"2026-{1 + day % 12:02d}-{1 + day % 28:02d} {minute // 60:02d}:{minute % 60:02d}"
            )
            shipped = f"2026-{1 + day % 12:02d}-{1 + day % 28:02d} 23:59"
            oid, amount = f"A{i:09d}", f"{5 + (i * 7919) % 90000 / 100:.2f}"
            if i % 97 == 1:
                amount = "-3.00"
                expected["non_positive_amount"] += 1
            elif i % 101 == 2 and minute // 60 > 0:
                shipped = ordered.replace(f" {minute // 60:02d}:", " 00:")
                expected["ship_before_order"] += 1
            elif i % 103 == 3:
                amount = "n/a"
                expected["invalid_value"] += 1
            elif i % 107 == 4:
                oid = ""
                expected["missing_required_fields"] += 1
            elif i % 109 == 5 and prev:
                oid = prev  # the row before has this id too: both rows count
                expected["duplicate_order_id"] += 2
            w.writerow([oid, CUSTOMERS[i % 6], REGIONS[i % 4], amount, ordered, shipped])
            if i % 250_000 == 7:
                f.write(f"B{i},acme,truncated\n")
                expected["malformed"] += 1
            i, prev = i + 1, oid
        expected["rows"] = i
    return expected


def analyse_csv(workdir: str) -> dict[str, Any]:
    from onward import Onward
    from onward.demo import DEMO_GOAL

    with Onward(f"sqlite:///{workdir}/onward.db", model=None) as ow:
        view = ow.run(DEMO_GOAL, inputs=["orders.csv"], workdir=workdir)
        summary = view.artifact_value(ow, "summary") if view.status == "done" else {}
        return {"status": str(view.status), "summary": summary}


def open_only(workdir: str) -> dict[str, Any]:
    from onward import Onward

    with Onward(f"sqlite:///{workdir}/floor.db", model=None):
        return {"status": "done"}


# -- (c) a big argument --------------------------------------------------------------


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def where_bytes(db: Path) -> dict[str, int]:
    """Bytes of column values per table of a SQLite file, and of the artifact files."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        out: dict[str, int] = {}
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        for (table,) in tables:
            cols = [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]
            total = sum(
                conn.execute(f'SELECT coalesce(sum(length("{c}")), 0) FROM "{table}"').fetchone()[0]
                for c in cols
            )
            if total:
                out[table] = total
    finally:
        conn.close()
    artifacts = db.parent / "artifacts"
    out["artifact files"] = store_bytes(artifacts) if artifacts.exists() else 0
    requests = db.parent / "requests"  # a request's long strings until its first checkpoint
    out["request files"] = store_bytes(requests) if requests.exists() else 0
    return out


def arg_onward(size: int) -> dict[str, Any]:
    from onward import Onward, Plan, PlanStep

    steps = [PlanStep(id="big", tool="noop", args={"value": "x" * size})]
    steps += [
        PlanStep(
            id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}" if i else "big"]
        )
        for i in range(5)
    ]
    with tempfile.TemporaryDirectory(prefix="onward-bench-mem-") as tmp:
        store = Path(tmp) / "store"
        with Onward(f"sqlite:///{store}/onward.db", model=None) as ow:
            view = ow.run(plan=Plan(steps=steps), workdir=tmp)
        if view.status != "done":
            raise SystemExit(f"the big-argument run ended {view.status}")
        return {"bytes": store_bytes(store), "where": where_bytes(store / "onward.db")}


def arg_langgraph(size: int) -> int:
    import sqlite3
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        value: str
        n: int

    g = StateGraph(S)
    g.add_node("step", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= 6 else "step")
    with tempfile.TemporaryDirectory(prefix="onward-bench-mem-") as tmp:
        conn = sqlite3.connect(f"{tmp}/lg.db", check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        graph = g.compile(checkpointer=SqliteSaver(conn))
        cfg: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({"value": "x" * size, "n": 0}, cfg, durability="sync")
        conn.close()
        return store_bytes(Path(tmp))


CHILDREN = {
    "curve-onward": lambda a: curve_onward(int(a[0]), int(a[1])),
    "curve-langgraph": lambda a: curve_langgraph(int(a[0]), int(a[1])),
    "csv": lambda a: analyse_csv(a[0]),
    "floor": lambda a: open_only(a[0]),
    "arg-onward": lambda a: arg_onward(int(a[0])),
    "arg-langgraph": lambda a: {"bytes": arg_langgraph(int(a[0]))},
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(CHILDREN[argv[1]](argv[2:])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--csv-mb", type=float, default=200)
    parser.add_argument("--arg-mb", type=float, default=50)
    parser.add_argument("--only", nargs="*", choices=["curve", "csv", "arg"])
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    args = parser.parse_args(argv)
    parts = set(args.only or ["curve", "csv", "arg"])
    console = Console()
    rows: list[dict[str, Any]] = []
    if "curve" in parts:
        rows.append(run_curve(console, args.steps, args.every))
    if "csv" in parts:
        rows.append(run_csv(console, int(args.csv_mb * 1_000_000)))
    if "arg" in parts:
        rows.append(run_arg(console, int(args.arg_mb * 1_000_000)))
    write_json(args.json, rows)
    return 0


def run_curve(console: Console, steps: int, every: int) -> dict[str, Any]:
    with console.status(f"driving a {steps:,}-step chain (onward, then LangGraph)"):
        ours, _ = child(["curve-onward", str(steps), str(every)])
        theirs, _ = child(["curve-langgraph", str(steps), str(every)])
    table = Table(title=f"RSS (MB) during a {steps:,}-step chain, after gc.collect()")
    for col in (
        "steps done",
        "onward",
        "LangGraph bare loop",
        "onward ms/step (last 1,000)",
        "LangGraph ms/step",
    ):
        table.add_column(col, justify="right")
    mine, base = ours["samples"], theirs["samples"]
    pace, base_pace = per_step(ours["times"]), per_step(theirs["times"])
    for n in mine:
        table.add_row(
            f"{int(n):,}",
            f"{mine[n]:.1f}",
            f"{base.get(n, float('nan')):.1f}",
            f"{pace[n]:.3f}" if n in pace else "",
            f"{base_pace[n]:.3f}" if n in base_pace else "",
        )
    console.print(table)
    late = max(pace, key=int)
    early = min(pace, key=int)
    slowdown = pace[late] / pace[early]
    base_slowdown = base_pace[late] / base_pace[early] if late in base_pace else float("nan")
    console.print(
        f"ms per step, steps to {int(late):,} ÷ steps to {int(early):,}: onward "
        f"{slowdown:.2f}, LangGraph {base_slowdown:.2f} (no target: a step should not "
        "cost more the longer the plan)"
    )
    first, last = str(every), max(mine, key=int)
    growth = mine[last] - mine[first]
    base_growth = base[last] - base[first] if first in base and last in base else float("nan")
    console.print(
        f"growth from step {int(first):,} to {int(last):,}: onward {growth:+.1f} MB, "
        f"LangGraph {base_growth:+.1f} MB (target: onward ≤ 50 MB)"
    )
    return {
        "bench": "memory.py",
        "measure": f"RSS growth (MB) from step {int(first):,} to {int(last):,} of a chain",
        "onward": round(growth, 1),
        "baseline": f"LangGraph bare loop: {base_growth:+.1f} MB; ms per step, last 1,000 ÷ "
        f"second 1,000: onward {slowdown:.2f}, LangGraph {base_slowdown:.2f}",
        "ratio": None,
        "target": "≤ 50 MB",
        "met": growth <= 50,
    }


def per_step(times: dict[Any, float]) -> dict[Any, float]:
    """ms per step over each window between two samples, at the window's end (JSON keys
    come back as text, so they are ordered by their number)."""
    keys = sorted(times, key=int)
    return {
        b: (times[b] - times[a]) * 1000 / (int(b) - int(a)) for a, b in itertools.pairwise(keys)
    }


def run_csv(console: Console, size: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="onward-bench-mem-") as tmp:
        with console.status(f"writing {size / 1e6:.0f} MB of orders"):
            expected = write_orders(Path(tmp) / "orders.csv", size)
        actual = (Path(tmp) / "orders.csv").stat().st_size
        with console.status("analysing it with the order template"):
            result, peak = child(["csv", tmp])
            _, floor = child(["floor", tmp])
    summary = result["summary"]
    if result["status"] != "done":
        raise SystemExit(f"the order template ended {result['status']}")
    got = {
        **summary["by_rule"],
        "rows": summary["total_rows"],
        "malformed": summary["malformed_rows"],
    }
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    if wrong:
        raise SystemExit(f"the report's counts differ from the generator's: {wrong}")
    table = Table(
        title=f"order template on a {actual / 1e6:.0f} MB CSV ({expected['rows']:,} rows)"
    )
    for col in ("process", "peak RSS (MB)", "÷ file size"):
        table.add_column(col, justify="right")
    table.add_row("onward run (template)", f"{peak:.0f}", f"{peak * 2**20 / actual:.2f}")
    table.add_row("floor: import + open store", f"{floor:.0f}", f"{floor * 2**20 / actual:.2f}")
    console.print(table)
    console.print(f"counts per rule match the generator's: {expected}")
    return {
        "bench": "memory.py",
        "measure": f"peak RSS (MB) of the order template on a {actual / 1e6:.0f} MB CSV",
        "onward": round(peak),
        "baseline": f"floor (import + open): {floor:.0f} MB; file {actual / 2**20:.0f} MB",
        "ratio": round(peak * 2**20 / actual, 2),
        "target": "≤ 1024 MB",
        "met": peak <= 1024,
    }


def run_arg(console: Console, size: int) -> dict[str, Any]:
    with console.status(f"a run with a {size / 1e6:.0f} MB argument"):
        big_run, small_run = child(["arg-onward", str(size)])[0], child(["arg-onward", "0"])[0]
        big, small = big_run["bytes"], small_run["bytes"]
        lg_big = child(["arg-langgraph", str(size)])[0]["bytes"]
        lg_small = child(["arg-langgraph", "0"])[0]["bytes"]
    ours, theirs = (big - small) / size, (lg_big - lg_small) / size
    table = Table(title=f"store bytes for a {size / 1e6:.0f} MB string argument")
    for col in ("system", "with it", "without", "growth ÷ arg size"):
        table.add_column(col, justify="right")
    table.add_row(
        "onward (noop echoes it: input + output)", f"{big:,}", f"{small:,}", f"{ours:.2f}"
    )
    table.add_row("LangGraph, string in state", f"{lg_big:,}", f"{lg_small:,}", f"{theirs:.2f}")
    console.print(table)
    where = Table(title="where onward's copies are (bytes of column values, and files)")
    for col in ("table", "with it", "without", "÷ arg size"):
        where.add_column(col, justify="right")
    for name, n in sorted(big_run["where"].items(), key=lambda kv: -kv[1]):
        m = small_run["where"].get(name, 0)
        where.add_row(name, f"{n:,}", f"{m:,}", f"{(n - m) / size:.2f}")
    console.print(where)
    return {
        "bench": "memory.py",
        "measure": f"store growth ÷ size of a {size / 1e6:.0f} MB argument (noop: in + out)",
        "onward": f"{(big - small) / 1e6:.0f} MB",
        "baseline": f"LangGraph state: {theirs:.2f}×",
        "ratio": round(ours, 2),
        "target": "≤ 2",
        "met": ours <= 2,
    }


if __name__ == "__main__":
    raise SystemExit(main())
