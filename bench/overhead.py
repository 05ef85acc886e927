"""Overhead benchmark: ms per no-op step of onward, DBOS and LangGraph at equal durability.

What is compared (bench/_systems.py runs each; N = ``--steps``, default 200)
    * **onward**: a declared plan of N ``noop`` steps in a dependency chain,
      ``Onward(db).run(plan=...)`` on a fresh store. A plan step is two LangGraph
      supersteps (execute runs the tool and saves its output as produced; verify makes it
      done) and one durable commit (checkpointing/savers.py defers the rest).
    * **LangGraph**: ``StateGraph`` + LangGraph's own ``SqliteSaver`` / ``PostgresSaver``
      with ``durability="sync"``; one node increments a counter and a conditional edge
      loops back until it reaches N: one superstep and one checkpoint per step.
    * **LangGraph, no checkpointer**: the same loop without one (LangGraph's own cost).
    * **LangGraph sync, onward's shape**: LangGraph's own saver on the shape of onward's
      graph with no-op nodes (two supersteps per step, as many channels as ``RunState``).
    * **LangGraph on onward's shape, no checkpointer**: that shape saving nothing: what
      LangGraph's loop costs every onward step. onward's step minus this is onward's own
      (its nodes, savers, serializer and commit); DBOS's whole step is the bar for it.
    * **DBOS**: a ``@DBOS.workflow`` calling a no-op ``@DBOS.step`` N times (each step's
      output is checkpointed): the durable-execution peer a user would pick instead.

How each is configured (and checked: read back from each system's live connection
during the run, printed, and the run refuses to report if they differ)
    * **SQLite, NORMAL**: every system on a fresh file with ``journal_mode=WAL`` and
      ``synchronous=NORMAL`` (onward's default). onward sets them itself; LangGraph's
      ``SqliteSaver.setup()`` sets WAL and the bench sets ``synchronous``; DBOS (which
      defaults to a rollback journal and ``synchronous=FULL``) gets both from a SQLAlchemy
      ``connect`` listener on its engine (bench/_dbos.py).
    * **SQLite, FULL**: the same with ``synchronous=FULL`` (onward's ``ONWARD_FSYNC=1``,
      which also fsyncs onward's artifact files; the others have none).
    * **Postgres**: the server's defaults for all three (``synchronous_commit`` as found),
      each run in a fresh scratch database on ``--pg-admin``'s server.

How it is measured
    Each variant runs in a child process of its own (``commits.py``'s worker, with
    ``PYTHONPATH=src``). One warm-up run of each, then ``--rounds`` rounds; every round
    runs each variant once on a fresh store, in an order that rotates from round to
    round. Only the run is timed (opening stores, compiling graphs and launching DBOS are
    not). Reported: median / min / max ms per step, the child's CPU ms per step (all its
    threads; not the Postgres server's), and each ratio as the median over rounds of the
    two runs' ratio in the same round (neighbouring runs share the machine's load). The
    CPU ratios are reported too (rows of their own): on a busy machine most of every
    system's wall time is waiting for a core, and CPU shows what an idle one would.

Structural counts (``commits.py``'s counters, on separate runs at ``--count-steps``
lengths, per step = the slope between them, so start-up drops out)
    * SQLite: commits (``sqlite3_commit_hook`` on every connection) and ``fsync`` /
      ``fdatasync`` calls (``strace -f``), per step.
    * Postgres: durable commits (WAL commit records of transactions that wrote to the
      scratch database, via ``pg_walinspect``) and ``pg_stat_database.xact_commit``
      (read-only transactions too), per step.

Targets: onward ÷ DBOS ≤ 1.0 in each mode; stretch: onward ÷ LangGraph sync ≤ 1.5.

Run from the repo root: ``python bench/overhead.py [--steps 200] [--rounds 5]
[--count-steps 50 200] [--no-postgres] [--no-counts]``. Needs ``strace`` for the counts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _common import write_json
from commits import (
    PG_ADMIN,
    REPO,
    SENDS,
    Checkout,
    Worker,
    count_postgres,
    count_sqlite,
    fresh_schema,
    paired,
    scratch_database,
)

ONWARD_TARGET = 1.0
STRETCH = 1.5


@dataclass(frozen=True)
class Variant:
    label: str
    system: str
    mode: str
    """'NORMAL' / 'FULL' (SQLite's synchronous) or 'postgres'."""

    @property
    def fsync(self) -> bool:
        return self.mode == "FULL"


MODES = ("NORMAL", "FULL", "postgres")
NAMES = {
    "onward": "onward",
    "langgraph": "LangGraph sync",
    "langgraph-shape": "LangGraph sync, onward's shape",
    "dbos": "DBOS",
}


def variants(postgres: bool) -> list[Variant]:
    out = [
        Variant(f"{NAMES[s]} ({'sqlite ' + m if m != 'postgres' else m})", s, m)
        for m in MODES
        if postgres or m != "postgres"
        for s in ("onward", "langgraph", "langgraph-shape", "dbos")
    ]
    out.append(Variant("LangGraph, no checkpointer", "langgraph-none", "NORMAL"))
    out.append(Variant(LOOP_ONLY, "langgraph-shape-none", "NORMAL"))
    return out


LOOP_ONLY = "LangGraph on onward's shape, no checkpointer"
"""The part of every onward step that is LangGraph's loop (no saving, no-op nodes)."""
NO_SAVER = ("langgraph-none", "langgraph-shape-none")


def expected(mode: str, settings: dict[str, str]) -> bool:
    if mode == "postgres":
        return "synchronous_commit" in settings
    return settings == {"journal_mode": "wal", "synchronous": mode}


def time_rounds(
    vs: list[Variant], steps: int, rounds: int, admin: str | None
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, dict[str, str]]]:
    """Wall and CPU ms per step of every round by variant, and the settings read back."""
    checkout = Checkout("src", REPO / "src")
    wall: dict[str, list[float]] = {v.label: [] for v in vs}
    cpu: dict[str, list[float]] = {v.label: [] for v in vs}
    seen: dict[str, dict[str, str]] = {}
    with ExitStack() as stack:
        workers = {v.label: Worker(checkout, fsync=v.fsync) for v in vs}
        stack.callback(lambda: [w.quit() for w in workers.values()])

        def once(v: Variant, n: int) -> dict[str, Any]:
            if v.mode != "postgres":
                return workers[v.label].run("sqlite", n, system=v.system)
            assert admin is not None
            with scratch_database(admin) as dbname:  # every run: a fresh database
                return workers[v.label].run(fresh_schema(admin, dbname), n, system=v.system)

        for v in vs:  # warm-up: imports, lazy caches, first-file costs
            seen[v.label] = once(v, 5)["settings"]
        for r in range(rounds):
            order = vs[r % len(vs) :] + vs[: r % len(vs)]
            for v in order:
                print(f"  round {r + 1}/{rounds}: {v.label}", flush=True)
                reply = once(v, steps)
                if reply["settings"] != seen[v.label]:
                    raise SystemExit(f"{v.label}: settings changed: {reply['settings']}")
                wall[v.label].append(reply["seconds"] * 1000 / steps)
                cpu[v.label].append(reply["cpu"] * 1000 / steps)
    return wall, cpu, seen


def count(vs: list[Variant], steps: list[int], admin: str | None) -> dict[str, dict[str, Any]]:
    """Structural counts per step by variant (commits.py's counters)."""
    checkout = Checkout("src", REPO / "src")
    out: dict[str, dict[str, Any]] = {}
    for v in vs:
        if v.system in NO_SAVER:
            continue
        print(f"  counting: {v.label}", flush=True)
        if v.mode != "postgres":
            c = count_sqlite(checkout, steps, v.fsync, v.system)
            out[v.label] = {
                "commits": c["commits_per_step"],
                "fsyncs": c["fsyncs_per_step"],
                "wal": c["wal_pages_per_step"],
                "settings": c["settings"],
            }
            continue
        assert admin is not None
        with (
            scratch_database(admin) as dbname,
            tempfile.TemporaryDirectory(prefix="onward-bench-strace-") as tmp,
        ):
            worker = Worker(checkout, strace_log=Path(tmp) / "strace.log", trace=SENDS)
            try:
                c = count_postgres(worker, admin, dbname, steps, v.system)
            finally:
                worker.quit()
        out[v.label] = {
            "durable commits": c["per_step"]["durable_commits"],
            "xact_commit": c["per_step"]["xact_commit"],
            "wal": c["per_step"]["wal_records_ours"],
            "sends": c["per_step"]["sends"],
            "settings": c["settings"],
        }
    return out


def report(
    vs: list[Variant],
    wall: dict[str, list[float]],
    cpu: dict[str, list[float]],
    settings: dict[str, dict[str, str]],
    counts: dict[str, dict[str, Any]],
    steps: int,
    rounds: int,
    console: Console,
) -> list[dict[str, object]]:
    med = {k: statistics.median(v) for k, v in wall.items()}
    table = Table(title=f"ms per no-op step ({steps} steps, {rounds} rounds; counts per step)")
    for col in (
        "variant",
        "median",
        "min",
        "max",
        "CPU",
        "commits",
        "fsyncs",
        "WAL",
        "sends",
        "read back",
    ):
        table.add_column(col, justify="left" if col in ("variant", "read back") else "right")
    for v in vs:
        c = counts.get(v.label, {})
        commits = c.get("commits", c.get("durable commits"))
        fsyncs, wal, sends = c.get("fsyncs"), c.get("wal"), c.get("sends")
        table.add_row(
            v.label,
            f"{med[v.label]:.3f}",
            f"{min(wall[v.label]):.3f}",
            f"{max(wall[v.label]):.3f}",
            f"{statistics.median(cpu[v.label]):.3f}",
            "-" if commits is None else f"{commits:.2f}",
            "-" if fsyncs is None else f"{fsyncs:.2f}",
            "-" if wal is None else f"{wal:.1f}",
            "-" if sends is None else f"{sends:.1f}",
            "/".join(settings[v.label].values()) or "-",
        )
    console.print(table)
    console.print(
        "read back: journal_mode/synchronous (SQLite), synchronous_commit (Postgres), from "
        "each system's live connection.\n"
        "CPU: the child's CPU ms per step (all threads; not the Postgres server's).\n"
        "commits: SQLite commits (sqlite3_commit_hook) / Postgres durable commits (WAL "
        "commit records); fsyncs: fsync+fdatasync calls (strace); WAL: SQLite pages "
        "written to the WAL (strace) / Postgres WAL records of the run's transactions "
        "(pg_walinspect); sends: the Postgres client's socket writes (strace), a message "
        "or a batch of them each; per step = slope between the --count-steps lengths."
    )
    pg_x = {k: v["xact_commit"] for k, v in counts.items() if "xact_commit" in v}
    if pg_x:
        console.print(
            "Postgres xact_commit per step (read-only transactions too): "
            + ", ".join(f"{k}: {x:.2f}" for k, x in pg_x.items())
        )
    rows: list[dict[str, object]] = []
    for mode in MODES:
        by = {v.system: v.label for v in vs if v.mode == mode}
        if "onward" not in by:
            continue
        ours, dbos, lg = by["onward"], by["dbos"], by["langgraph"]
        what = f"sqlite WAL, synchronous={mode}" if mode != "postgres" else "postgres defaults"
        for peer, target, name in ((dbos, ONWARD_TARGET, "DBOS"), (lg, STRETCH, "LangGraph")):
            ratio, cpu_ratio = paired(wall, ours, peer), paired(cpu, ours, peer)
            console.print(
                f"onward ÷ {name} ({what}): {ratio:.2f}× paired, "
                f"{med[ours] / med[peer]:.2f}× of medians (target ≤ {target}); "
                f"CPU {cpu_ratio:.2f}× paired"
            )
            c_ours, c_peer = counts.get(ours, {}), counts.get(peer, {})
            key = "commits" if mode != "postgres" else "durable commits"
            structural = (
                f"; commits/step {c_ours[key]:.2f} vs {c_peer[key]:.2f}"
                if key in c_ours and key in c_peer
                else ""
            )
            if "wal" in c_ours and "wal" in c_peer:
                unit = "WAL pages" if mode != "postgres" else "WAL records"
                structural += f"; {unit}/step {c_ours['wal']:.1f} vs {c_peer['wal']:.1f}"
            if "sends" in c_ours and "sends" in c_peer:
                structural += f"; sends/step {c_ours['sends']:.1f} vs {c_peer['sends']:.1f}"
            rows.append(
                {
                    "bench": "overhead.py",
                    "measure": f"ms per no-op step ÷ {name}, {what} ({steps} steps)",
                    "onward": round(med[ours], 3),
                    "baseline": f"{name} {med[peer]:.3f}{structural}",
                    "ratio": round(ratio, 2),
                    "target": f"≤ {target}" + (" (stretch)" if name == "LangGraph" else ""),
                    "met": ratio <= target,
                }
            )
            # On a busy machine the wall time of every system is mostly waiting for a
            # core; the CPU each spends per step shows what the wall ratio would be on an
            # idle one (on Postgres it leaves out the server's share: DBOS's is larger).
            rows.append(
                {
                    "bench": "overhead.py",
                    "measure": f"CPU ms per no-op step ÷ {name}, {what} (client process)",
                    "onward": round(statistics.median(cpu[ours]), 3),
                    "baseline": f"{name} {statistics.median(cpu[peer]):.3f}",
                    "ratio": round(cpu_ratio, 2),
                    "target": f"≤ {target}" + (" (stretch)" if name == "LangGraph" else ""),
                    "met": cpu_ratio <= target,
                }
            )
        # For reference: LangGraph's own saver on onward's graph shape (two supersteps per
        # step) at the same durability; not onward's floor (its savers replace LangGraph's).
        shape = by["langgraph-shape"]
        shaped = paired(wall, shape, dbos)
        console.print(
            f"reference, LangGraph's own saver on onward's graph shape ÷ DBOS ({what}): "
            f"{shaped:.2f}× paired; onward ÷ it: {paired(wall, ours, shape):.2f}×"
        )
        rows.append(
            {
                "bench": "overhead.py",
                "measure": f"reference: LangGraph sync on onward's graph shape ÷ DBOS, {what}",
                "onward": round(med[shape], 3),
                "baseline": f"DBOS {med[dbos]:.3f}; onward ÷ it {paired(wall, ours, shape):.2f}",
                "ratio": round(shaped, 2),
                "target": "—",
                "met": None,
            }
        )
        # What of onward's step is LangGraph's loop (the shape saving nothing), and what is
        # onward's own; the loop is the same process work in every mode.
        loop = statistics.median(wall[LOOP_ONLY])
        console.print(
            f"of onward's {med[ours]:.3f} ms per step ({what}): LangGraph's loop on the shape "
            f"{loop:.3f} ms ({loop / med[ours]:.0%}), onward's own {med[ours] - loop:.3f} ms "
            f"(nodes, savers, serializer, commit); DBOS's whole step {med[dbos]:.3f} ms"
        )
        rows.append(
            {
                "bench": "overhead.py",
                "measure": f"LangGraph's loop on onward's shape, no checkpointer ÷ DBOS, {what}",
                "onward": round(loop, 3),
                "baseline": f"DBOS {med[dbos]:.3f}; onward's own part {med[ours] - loop:.3f} ms",
                "ratio": round(loop / med[dbos], 2),
                "target": "—",
                "met": None,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=200, help="steps per timed run (200)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--count-steps", type=int, nargs=2, default=[50, 200], metavar=("N1", "N2"))
    parser.add_argument("--no-postgres", action="store_true", help="SQLite variants only")
    parser.add_argument("--no-counts", action="store_true", help="timings only (no strace)")
    parser.add_argument("--pg-admin", default=PG_ADMIN, help="may create databases")
    parser.add_argument("--json", type=Path, help="also write the ratios here (run_all.py)")
    args = parser.parse_args(argv)
    count_steps = sorted(args.count_steps)
    if args.steps < 1 or args.rounds < 1 or count_steps[0] < 1 or len(set(count_steps)) < 2:
        parser.error("--steps, --rounds ≥ 1; --count-steps: two different lengths ≥ 1")
    if not args.no_counts and shutil.which("strace") is None:
        parser.error("strace is needed to count fsyncs (or pass --no-counts)")
    admin = None if args.no_postgres else args.pg_admin
    vs = variants(admin is not None)
    console = Console(width=max(120, shutil.get_terminal_size((120, 24)).columns))
    counts = {} if args.no_counts else count(vs, count_steps, admin)
    wall, cpu, settings = time_rounds(vs, args.steps, args.rounds, admin)
    for v in vs:
        got = [settings[v.label], *([counts[v.label]["settings"]] if v.label in counts else [])]
        if v.system not in NO_SAVER and not all(expected(v.mode, s) for s in got):
            raise SystemExit(f"{v.label}: durability settings read back {got}, not {v.mode}")
    pg = {v.label: settings[v.label] for v in vs if v.mode == "postgres"}
    if len({tuple(s.items()) for s in pg.values()}) > 1:
        raise SystemExit(f"Postgres settings differ between systems: {pg}")
    write_json(args.json, report(vs, wall, cpu, settings, counts, args.steps, args.rounds, console))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
