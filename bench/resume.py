"""Resume benchmark: time to resume a run with 10 versus 10,000 checkpoints.

What is compared
    Two runs that stopped the same way: a chain of N ``noop`` steps (N = 10 and
    ``--long``, default 10,000), all done, then a ``wait`` step that asks for approval
    (``approve_tools={"wait"}``), then one more step. Resuming = a new ``Onward`` client
    opens the store, loads the thread, takes the approval and runs the waiting step. Two
    times, both from opening the store: to that step's ``step_done`` event (load + first
    step; target: long ÷ short ≤ 1.5, resume cost must not grow with history), and to the
    return of the whole answer-a-question call (``Onward.decide`` with the approval,
    which drives the run to its end: the last step, finalize, the final view; target ≤ 2).

How it is measured
    Each stopped run is built once; every round resumes a fresh copy of its database
    file (so each resume is the first), rounds alternate short and long, medians are
    reported. SQLite (the embedded default).

Run from the repo root: ``python bench/resume.py [--long 10000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _common import any_size, write_json
from onward import Onward, Plan, PlanStep, ProgressEvent, RunStatus


def stopped_run(root: Path, n: int) -> tuple[Path, str]:
    """A chain of ``n`` noop steps, a ``wait`` step waiting for approval, one more step."""
    steps = [
        PlanStep(id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else [])
        for i in range(n)
    ]
    steps.append(PlanStep(id="gate", tool="wait", args={"seconds": 0}, depends_on=[f"s{n - 1}"]))
    steps.append(PlanStep(id="after", tool="noop", args={"value": -1}, depends_on=["gate"]))
    db = root / f"run{n}.db"
    with Onward(f"sqlite:///{db}", model=None) as ow:
        view = ow.run(
            plan=Plan(steps=steps),
            workdir=root,
            **any_size(approve_tools=frozenset({"wait"})),
        )
        if view.status is not RunStatus.WAITING_FOR_HUMAN:
            raise SystemExit(f"the {n}-step run ended {view.status}, expected to wait")
    # Counted in SQL: LangGraph's state history rebuilds every snapshot (slow at 10,000).
    conn = sqlite3.connect(db)
    try:
        (checkpoints,) = conn.execute(
            "SELECT count(*) FROM checkpoints WHERE thread_id = ?", (view.thread_id,)
        ).fetchone()
    finally:
        conn.close()
    return db, f"{view.thread_id}:{checkpoints}"


def resume_once(db: Path, thread_id: str, root: Path) -> tuple[float, float]:
    copy = root / "resume.db"
    for suffix in ("", "-wal"):
        src = db.with_name(db.name + suffix)
        if src.exists():
            shutil.copyfile(src, copy.with_name(copy.name + suffix))
    if (db.parent / "artifacts").exists():  # small outputs live in their refs, not here
        shutil.copytree(db.parent / "artifacts", root / "artifacts", dirs_exist_ok=True)
    start = time.perf_counter()
    took: list[float] = []

    def on_event(event: ProgressEvent) -> None:
        if event.kind == "step_done" and event.step_id == "gate" and not took:
            took.append(time.perf_counter() - start)

    with Onward(f"sqlite:///{copy}", model=None) as ow:
        view = ow.decide(thread_id, {"type": "approve"}, step="gate", on_event=on_event)
        whole = time.perf_counter() - start
    for p in root.glob("resume.db*"):
        p.unlink()
    if not took or view.status is not RunStatus.DONE:
        raise SystemExit(f"the resumed run ended {view.status} without finishing its step")
    return took[0], whole


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--short", type=int, default=10)
    parser.add_argument("--long", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    args = parser.parse_args(argv)
    console = Console()
    with tempfile.TemporaryDirectory(prefix="onward-bench-resume-") as tmp:
        root = Path(tmp)
        built: dict[int, tuple[Path, str, int]] = {}
        for n in (args.short, args.long):
            with console.status(f"building a stopped run of {n:,} steps"):
                (root / f"build{n}").mkdir()
                db, info = stopped_run(root / f"build{n}", n)
                tid, checkpoints = info.split(":")
                built[n] = (db, tid, int(checkpoints))
        seconds: dict[int, list[float]] = {n: [] for n in built}
        calls: dict[int, list[float]] = {n: [] for n in built}
        for r in range(args.rounds):
            order = list(built) if r % 2 == 0 else list(reversed(built))
            for n in order:
                db, tid, _ = built[n]
                work = root / f"round{r}-{n}"
                work.mkdir()
                first, whole = resume_once(db, tid, work)
                seconds[n].append(first)
                calls[n].append(whole)
    med = {n: statistics.median(v) * 1000 for n, v in seconds.items()}
    med_call = {n: statistics.median(v) * 1000 for n, v in calls.items()}
    table = Table(title=f"resume, from opening the store ({args.rounds} rounds)")
    for col in ("steps done", "checkpoints", "to first step: median ms", "min", "max"):
        table.add_column(col, justify="right")
    for col in ("whole decide call: median ms", "min", "max"):
        table.add_column(col, justify="right")
    for n, v in seconds.items():
        table.add_row(
            f"{n:,}",
            f"{built[n][2]:,}",
            f"{med[n]:.1f}",
            f"{min(v) * 1000:.1f}",
            f"{max(v) * 1000:.1f}",
            f"{med_call[n]:.1f}",
            f"{min(calls[n]) * 1000:.1f}",
            f"{max(calls[n]) * 1000:.1f}",
        )
    console.print(table)
    ratio = med[args.long] / med[args.short]
    call_ratio = med_call[args.long] / med_call[args.short]
    console.print(
        f"{args.long:,} ÷ {args.short:,} steps, to first step: {ratio:.2f}× (target ≤ 1.5)"
    )
    console.print(
        f"{args.long:,} ÷ {args.short:,} steps, whole answer call: {call_ratio:.2f}× (target ≤ 2)"
    )
    write_json(
        args.json,
        [
            {
                "bench": "resume.py",
                "measure": f"ms to resume (load + first step), {args.long:,} vs "
                f"{args.short:,} steps done",
                "onward": round(med[args.long], 1),
                "baseline": f"same run at {args.short:,} steps: {med[args.short]:.1f}",
                "ratio": round(ratio, 2),
                "target": "≤ 1.5",
                "met": ratio <= 1.5,
            },
            {
                "bench": "resume.py",
                "measure": f"ms of the whole answer call (open + decide + drive to the end), "
                f"{args.long:,} vs {args.short:,} steps done",
                "onward": round(med_call[args.long], 1),
                "baseline": f"same run at {args.short:,} steps: {med_call[args.short]:.1f}",
                "ratio": round(call_ratio, 2),
                "target": "≤ 2",
                "met": call_ratio <= 2,
            },
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
