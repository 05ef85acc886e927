"""Storage benchmark: SQLite bytes per step for onward vs. a bare LangGraph loop and DBOS.

What is compared
    * **onward**: a declared plan of N ``noop`` steps in a dependency chain
      (``s{i}`` depends on ``s{i-1}``), run by ``Onward(db).run(plan=...)`` on a
      fresh SQLite store in a temporary directory. Each plan step is two LangGraph
      supersteps (execute saves the output as produced, verify makes it done), so two
      checkpoints and their writes; checkpoint blobs of 256 B and more are stored
      deflated (checkpointing/serde.py, type ``msgpack-z1``).
    * **bare LangGraph (baseline)**: ``StateGraph`` + ``SqliteSaver`` with
      ``durability="sync"``; one node loops N times and appends a 200-byte string
      to a ``list`` channel reduced with ``operator.add``, so the state grows 200
      bytes per step and every checkpoint stores the whole list again. This is the
      naive design that onward's delta channels are meant to avoid.
    * **DBOS**: a ``@DBOS.workflow`` of N ``@DBOS.step`` calls on a fresh SQLite system
      database (WAL, as onward's: bench/_dbos.py); each step returns its 200-byte share
      of the growing state, which DBOS checkpoints as the step's output (what a DBOS
      user stores to resume the work).

How it is measured
    Each variant runs twice, at ``--steps-small`` and ``--steps-large`` steps, each
    time on a new database. After the run the writer connection is closed, a fresh
    ``sqlite3`` connection runs ``PRAGMA wal_checkpoint(TRUNCATE)``, and the size of
    the database file plus its ``-wal`` file is divided by N. The payload columns
    split that into the checkpoint blobs, the pending-write blobs and the checkpoint
    metadata; the rest is SQLite pages, indexes and slack. A second table splits
    onward's file by table, each with its indexes (SQLite's ``dbstat``). onward's
    artifact bodies of more than 256 bytes live in files beside the database and are
    shown separately, not counted (smaller ones ride in their refs, in the
    checkpoint, and are counted).

Targets for onward: at most 5 KB per step at both sizes (issue 19; DBOS stores 0.3 to 0.7),
and a growth ratio (bytes per step at the large size ÷ bytes per step at the small size)
of at most 1.5.

Run from the repo root: ``python bench/storage.py [--steps-small 100 --steps-large 1000]``.
"""

from __future__ import annotations

import argparse
import operator
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from rich.console import Console
from rich.table import Table

from _common import any_size, chain_plan, write_json
from onward import Onward, RunStatus, StepStatus

TARGET_BYTES_PER_STEP = 5 * 1024
TARGET_RATIO = 1.5
PAYLOAD = "x" * 200
ONWARD = "onward"
BARE = "bare-langgraph +200B"
DBOS = "DBOS +200B"


@dataclass(frozen=True, slots=True)
class Sample:
    """One run's storage footprint."""

    variant: str
    steps: int
    db_bytes: int
    checkpoints: int
    checkpoint_blob_bytes: int
    write_blob_bytes: int
    metadata_bytes: int
    artifact_bytes: int = 0
    by_table: tuple[tuple[str, int], ...] = ()
    """Bytes of each table with its indexes (dbstat), largest first."""

    @property
    def per_step(self) -> float:
        return self.db_bytes / self.steps


def measure_db(path: Path) -> tuple[int, int, int, int, int]:
    """Checkpoint the WAL into the main file; return sizes and payload totals."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        n_ckpt, ckpt_bytes, meta_bytes = conn.execute(
            "SELECT count(*), coalesce(sum(length(checkpoint)), 0),"
            " coalesce(sum(length(metadata)), 0) FROM checkpoints"
        ).fetchone()
        (write_bytes,) = conn.execute(
            "SELECT coalesce(sum(length(value)), 0) FROM writes"
        ).fetchone()
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return size, int(n_ckpt), int(ckpt_bytes), int(write_bytes), int(meta_bytes)


def table_bytes(path: Path) -> tuple[tuple[str, int], ...]:
    """Each table's pages with its indexes' (SQLite's dbstat), largest first."""
    conn = sqlite3.connect(path)
    try:
        owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
        totals: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table = owner.get(name, name)
            totals[table] = totals.get(table, 0) + int(size)
    except sqlite3.OperationalError:  # a SQLite built without dbstat
        return ()
    finally:
        conn.close()
    return tuple(sorted(totals.items(), key=lambda kv: -kv[1]))


def dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def run_onward(n: int) -> Sample:
    with tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp:
        workdir = Path(tmp)
        db = workdir / "onward.db"
        with Onward(f"sqlite:///{db}") as ow:
            view = ow.run(plan=chain_plan(n), workdir=workdir, **any_size())
        done = sum(s.status is StepStatus.DONE for s in view.steps)
        if view.status is not RunStatus.DONE or done != n:
            raise SystemExit(f"onward run ended {view.status} with {done}/{n} steps done")
        size, n_ckpt, ckpt, writes, meta = measure_db(db)
        files = dir_bytes(workdir / "artifacts")
        return Sample(ONWARD, n, size, n_ckpt, ckpt, writes, meta, files, table_bytes(db))


class GrowState(TypedDict):
    count: int
    log: Annotated[list[str], operator.add]


def growing_graph(n: int, saver: SqliteSaver) -> Any:
    def grow(state: GrowState) -> dict[str, Any]:
        return {"count": state["count"] + 1, "log": [PAYLOAD]}

    def route(state: GrowState) -> str:
        return "grow" if state["count"] < n else END

    g: StateGraph[Any] = StateGraph(GrowState)
    g.add_node("grow", grow)
    g.add_edge(START, "grow")
    g.add_conditional_edges("grow", route, ["grow", END])
    return g.compile(checkpointer=saver)


def run_dbos(n: int) -> Sample:
    import _dbos

    with tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp:
        db = Path(tmp) / "dbos.sqlite"
        with _dbos.launched(f"sqlite:///{db}"):
            if _dbos.growing_chain(n, len(PAYLOAD)) != n:
                raise SystemExit("DBOS workflow returned a wrong count")
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        size = sum(p.stat().st_size for p in Path(tmp).glob("dbos.sqlite*"))
        return Sample(DBOS, n, size, 0, 0, 0, 0)


def run_bare(n: int) -> Sample:
    with tempfile.TemporaryDirectory(prefix="onward-bench-") as tmp:
        db = Path(tmp) / "bare.db"
        conn = sqlite3.connect(db, check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()  # journal_mode=WAL, as onward's store
            conn.execute("PRAGMA synchronous=NORMAL")  # as onward's store
            graph = growing_graph(n, saver)
            config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": n + 10}
            out = graph.invoke({"count": 0, "log": []}, config, durability="sync")
        finally:
            conn.close()
        if out["count"] != n or len(out["log"]) != n:
            raise SystemExit(f"bare LangGraph run ended at count {out['count']}, expected {n}")
        size, n_ckpt, ckpt, writes, meta = measure_db(db)
        return Sample(BARE, n, size, n_ckpt, ckpt, writes, meta)


def kb(n: float) -> str:
    return f"{n / 1024:,.2f}"


def verdict(ok: bool) -> str:
    return "[green]PASS[/green]" if ok else "[red]FAIL[/red]"


def report(
    samples: list[Sample], small: int, large: int, console: Console
) -> list[dict[str, object]]:
    table = Table(title="SQLite bytes per step (db + wal files)")
    table.add_column("variant", no_wrap=True)
    table.add_column("steps", justify="right")
    table.add_column("ckpts", justify="right")
    table.add_column("db bytes", justify="right")
    table.add_column("KB/step", justify="right")
    for s in samples:
        table.add_row(
            s.variant, f"{s.steps:,}", f"{s.checkpoints:,}", f"{s.db_bytes:,}", kb(s.per_step)
        )
    console.print(table)

    parts = Table(title="where the bytes go (KB per step)")
    parts.add_column("variant", no_wrap=True)
    parts.add_column("steps", justify="right")
    parts.add_column("ckpt", justify="right")
    parts.add_column("writes", justify="right")
    parts.add_column("meta", justify="right")
    parts.add_column("sqlite", justify="right")
    parts.add_column("files*", justify="right")
    for s in samples:
        other = s.db_bytes - s.checkpoint_blob_bytes - s.write_blob_bytes - s.metadata_bytes
        parts.add_row(
            s.variant,
            f"{s.steps:,}",
            kb(s.checkpoint_blob_bytes / s.steps),
            kb(s.write_blob_bytes / s.steps),
            kb(s.metadata_bytes / s.steps),
            kb(other / s.steps),
            kb(s.artifact_bytes / s.steps) if s.variant == ONWARD else "-",
        )
    console.print(parts)
    for s in samples:
        if s.by_table:
            top = [(t, b) for t, b in s.by_table if b / s.steps >= 51.2]  # ≥ 0.05 KB/step
            rest = s.db_bytes - sum(b for _, b in top)
            console.print(
                f"{s.variant}, {s.steps:,} steps, KB/step by table (with its indexes): "
                + ", ".join(f"{t} {kb(b / s.steps)}" for t, b in top)
                + f", the rest {kb(rest / s.steps)}"
            )
    console.print(
        "db + wal sizes taken after PRAGMA wal_checkpoint(TRUNCATE)\n"
        "ckpt = checkpoint blobs, writes = pending-write blobs,\n"
        "meta = checkpoint metadata, sqlite = the rest (pages, indexes, slack)\n"
        "* onward's artifact bodies over 256 B: files beside the db, not counted in KB/step\n"
        f"{BARE}: a list channel (operator.add) gaining 200 bytes per step\n"
    )

    by = {(s.variant, s.steps): s for s in samples}
    for variant in dict.fromkeys(s.variant for s in samples):
        if (variant, large) not in by:
            continue
        ratio = by[variant, large].per_step / by[variant, small].per_step
        console.print(
            f"{variant}: {kb(by[variant, small].per_step)} → "
            f"{kb(by[variant, large].per_step)} KB/step ({small:,} → {large:,} steps), "
            f"ratio {ratio:.2f}"
        )

    o_small, o_large = by[ONWARD, small], by[ONWARD, large]
    ratio = o_large.per_step / o_small.per_step
    console.print("\n[bold]onward targets[/bold]")
    for n, s in ((small, o_small), (large, o_large)):
        console.print(
            f"  ≤ {TARGET_BYTES_PER_STEP // 1024} KB/step at {n:,} steps: {kb(s.per_step)} KB "
            f"{verdict(s.per_step <= TARGET_BYTES_PER_STEP)}"
        )
    console.print(
        f"  per-step ratio {large:,}/{small:,} ≤ {TARGET_RATIO}: {ratio:.2f} "
        f"{verdict(ratio <= TARGET_RATIO)}"
    )
    rows: list[dict[str, object]] = []
    for n, sample in ((small, o_small), (large, o_large)):
        b, d = by[BARE, n], by.get((DBOS, n))
        rows.append(
            {
                "bench": "storage.py",
                "measure": f"KB per step at {n:,} steps (SQLite; ratio: ÷ DBOS)",
                "onward": round(sample.per_step / 1024, 2),
                "baseline": f"LangGraph +200 B/step {b.per_step / 1024:.2f}"
                + (f"; DBOS {d.per_step / 1024:.2f}" if d else ""),
                "ratio": round(sample.per_step / d.per_step, 2) if d else None,
                "target": f"≤ {TARGET_BYTES_PER_STEP // 1024} KB",
                "met": sample.per_step <= TARGET_BYTES_PER_STEP,
            }
        )
    rows.append(
        {
            "bench": "storage.py",
            "measure": f"KB per step, {large:,} ÷ {small:,} steps",
            "onward": round(ratio, 2),
            "baseline": f"LangGraph {by[BARE, large].per_step / by[BARE, small].per_step:.2f}",
            "ratio": round(ratio, 2),
            "target": f"≤ {TARGET_RATIO}",
            "met": ratio <= TARGET_RATIO,
        }
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps-small", type=int, default=100, help="N of the small run")
    parser.add_argument("--steps-large", type=int, default=1000, help="N of the large run")
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    args = parser.parse_args(argv)
    small, large = args.steps_small, args.steps_large
    if not 0 < small < large:
        parser.error("need 0 < --steps-small < --steps-large")

    console = Console()
    samples: list[Sample] = []
    for n in (small, large):
        for runner in (run_onward, run_bare, run_dbos):
            with console.status(f"{runner.__name__}, {n:,} steps"):
                samples.append(runner(n))
    write_json(args.json, report(samples, small, large, console))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
