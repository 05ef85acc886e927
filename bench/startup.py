"""Start-up benchmark: how long ``onward --help`` and the read commands take as whole
processes, against ``python -c "import typer, rich"`` timed in the same run.

What is compared
    ``onward --help``, ``status T``, ``list``, ``inbox``, ``timeline T``, and ``inbox`` on a
    store where nothing waits, each a new ``python -m onward`` process on a small real
    SQLite store the script makes first (onward's defaults: WAL, ``synchronous=NORMAL``;
    reads only, so durability settings do not enter): run ``T`` done (two ``noop`` steps),
    run ``W`` waiting for its plan's approval; and ``status T`` and ``inbox`` on the same
    runs in a Postgres store (a fresh schema in ``$ONWARD_BENCH_PG``; ``--no-postgres``
    skips them). The baseline is the price of the CLI's two
    libraries alone, ``python -c "import typer, rich"``. Targets: ``--help`` ≤ 1.5, the
    read commands ≤ 3. For reference (no target), a one-command Typer app the script
    writes: its ``--help`` and one run of its command — what any Typer + Rich CLI pays
    here (Typer renders help with ``typer.rich_utils`` and coerces parameters with
    pydantic); the same for a Typer app with as many commands as onward's (24, each with
    the options a read command has); and the import of Typer's help renderer alone
    (``typer.rich_utils``): the floor of any help Typer renders.

How it is measured
    Every command runs once untimed (its exit code and output checked), then ``--rounds``
    (7) rounds each run every command once, the baseline first, in a fixed order.
    Per process: CPU seconds (user + sys of the child, from ``wait4``) and wall seconds.
    The ratio is the median over rounds of command ÷ baseline within the round (paired,
    so drift in the machine's speed cancels); targets are judged on CPU, since start-up is
    CPU-bound and wall time on a shared machine adds other processes' load. Also printed,
    from one ``-X importtime`` run of each command: how many modules it imported and
    whether it loaded langchain_core, langgraph, langsmith, pydantic (a structural count
    that does not depend on noise).

Run from the repo root: ``python bench/startup.py [--rounds 7]``. The children import
onward from this checkout's ``src`` (PYTHONPATH), or from ``--onward-src DIR`` (another
checkout's ``src``, e.g. ``git archive COMMIT src | tar -x -C /tmp/before``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _common import pg_schema, write_json

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
"""The onward the children import (``--onward-src``; default this checkout's)."""
HEAVY = ("langchain_core", "langgraph", "langsmith", "pydantic")
BASELINE = ["-c", "import typer, rich"]
PG_FLOOR = "import typer, rich, psycopg"
"""For reference: a read of a Postgres store needs its driver too (psycopg imports
asyncio, logging and importlib.metadata: about 2.4 times the baseline by itself)."""
PG_TABLE = """\
import sys, typer, psycopg
from rich.console import Console
from rich.table import Table
with psycopg.connect(sys.argv[1]) as conn:
    rows = conn.execute("SELECT thread_id, status FROM onward_runs LIMIT 5").fetchall()
table = Table("run", "status")
for row in rows:
    table.add_row(*map(str, row))
Console().print(table)
"""
"""For reference, the floor of ``status`` on Postgres: the smallest Typer + Rich program
that does what it does (import the driver, connect, one query, print a Rich table). Any
Rich-table read of a Postgres store pays this; onward's read commands ÷ it is what onward
adds."""
PG_TABLE_LABEL = "a Rich table of a Postgres query"

TYPER_APP = '''"""The smallest Typer + Rich CLI: one command, one option, a Rich table."""
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False)


@app.command()
def show(name: str, limit: int = 5) -> None:
    """Print a table."""
    table = Table()
    table.add_column(name)
    table.add_row(str(limit))
    Console().print(table)


@app.command()
def other() -> None:
    """A second command, so Typer builds a group as onward's CLI does."""


app()
'''

WIDE_APP = '''"""A Typer + Rich CLI as wide as onward's: 24 commands, each with an argument and the
options a read command has (a string, an int with a minimum, a flag, a repeated string)."""
from typing import Annotated

import typer

app = typer.Typer(add_completion=False)


def make(i: int) -> None:
    def command(
        thread_id: str,
        db: Annotated[str | None, typer.Option(help="Store URL.")] = None,
        limit: Annotated[int, typer.Option(min=1, help="At most this many.")] = 50,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        kind: Annotated[list[str] | None, typer.Option(help="Only these (repeatable).")] = None,
    ) -> None:
        print(thread_id, db, limit, as_json, kind)

    command.__doc__ = f"Command number {i}: one line of help, as each of onward's has."
    app.command(f"cmd{i}")(command)


for i in range(24):
    make(i)
app()
'''
RENDERER = "import typer.rich_utils"
"""What any help Typer renders must import: ``typer.rich_utils`` (with the rich.markdown
and rich.traceback it imports at its top)."""


PLAN = """goal: two noop steps
steps:
  - {id: a, tool: noop, args: {value: 1}}
  - {id: b, tool: noop, args: {value: 2}, depends_on: [a]}
"""


def make_store(root: Path, src: Path, url: str, *, waiting: bool = True) -> str:
    """With this checkout's CLI: run T done and (``waiting``) run W waiting for its
    plan's approval, in the store at ``url``."""
    (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    runs = [("T", [], 0), *([("W", ["--approve-plan"], 3)] if waiting else [])]
    for tid, extra, code in runs:
        argv = [sys.executable, "-m", "onward", "run", "--plan", "plan.yaml", "--json"]
        argv += ["--thread-id", tid, "--db", url, *extra]
        proc = subprocess.run(argv, cwd=root, env=env(src), capture_output=True, text=True)
        if proc.returncode != code:
            raise SystemExit(f"run {tid} exited {proc.returncode}: {proc.stderr[-1500:]}")
    return url


def env(src: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
    out.update(NO_COLOR="1", COLUMNS="120", ONWARD_BLOCK_MODEL_REQUESTS="1")
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))
    return out


def timed(argv: list[str], cwd: Path, src: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one whole process; it must exit 0."""
    import time

    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env(src), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def imported(argv: list[str], cwd: Path, src: Path) -> set[str]:
    """Every module one run of the command imported (from its -X importtime log)."""
    proc = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        cwd=cwd,
        env=env(src),
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("import time:")][1:]
    return {ln.rsplit("|", 1)[1].strip() for ln in lines}


def check(argv: list[str], cwd: Path, src: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, env=env(src), capture_output=True, text=True)
    if proc.returncode != 0 or not (
        proc.stdout.strip() or argv[1:] in (BASELINE, ["-c", RENDERER], ["-c", PG_FLOOR])
    ):
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-1500:]}")
    if argv[1:3] == ["-m", "onward"]:
        where = subprocess.run(
            [argv[0], "-c", "import onward; print(onward.__file__)"],
            cwd=cwd,
            env=env(src),
            capture_output=True,
            text=True,
        ).stdout.strip()
        if not where.startswith(str(src)):
            raise SystemExit(f"the children import onward from {where}, not {src}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the ratios here (run_all.py)")
    parser.add_argument(
        "--no-postgres",
        action="store_true",
        help="skip status and inbox on a Postgres store ($ONWARD_BENCH_PG)",
    )
    parser.add_argument(
        "--onward-src",
        type=Path,
        default=SRC,
        help="the src directory of another onward checkout, e.g. one from before a change",
    )
    args = parser.parse_args(argv)
    src = args.onward_src.resolve()
    print(f"onward from {src}")
    console = Console(width=120)
    py = sys.executable
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="onward-bench-")))
        store = make_store(root, src, f"sqlite:///{root / 'store' / 'onward.db'}")
        idle = make_store(root, src, f"sqlite:///{root / 'idle' / 'onward.db'}", waiting=False)
        pg = None if args.no_postgres else make_store(root, src, stack.enter_context(pg_schema()))
        (root / "app.py").write_text(TYPER_APP, encoding="utf-8")
        (root / "wide.py").write_text(WIDE_APP, encoding="utf-8")
        ow = [py, "-m", "onward"]
        # (label, argv, target): target None = reference only.
        commands: list[tuple[str, list[str], float | None]] = [
            ("import typer, rich", [py, *BASELINE], None),
            ("onward --help", [*ow, "--help"], 1.5),
            ("onward status T", [*ow, "status", "T", "--db", store], 3.0),
            ("onward list", [*ow, "list", "--db", store], 3.0),
            ("onward inbox", [*ow, "inbox", "--db", store], 3.0),
            ("onward timeline T", [*ow, "timeline", "T", "--db", store], 3.0),
            ("onward inbox, idle", [*ow, "inbox", "--db", idle], 3.0),
            *(
                [
                    ("import typer, rich, psycopg", [py, "-c", PG_FLOOR], None),
                    (PG_TABLE_LABEL, [py, "-c", PG_TABLE, pg], None),
                    ("onward status T, Postgres", [*ow, "status", "T", "--db", pg], 3.0),
                    ("onward inbox, Postgres", [*ow, "inbox", "--db", pg], 3.0),
                ]
                if pg
                else []
            ),
            ("Typer app --help", [py, "app.py", "--help"], None),
            ("Typer app show x", [py, "app.py", "show", "x"], None),
            ("Typer app, 24 commands --help", [py, "wide.py", "--help"], None),
            ("Typer app, 24 commands cmd0 x", [py, "wide.py", "cmd0", "x"], None),
            ("Typer's help renderer alone", [py, "-c", RENDERER], None),
        ]
        for _, cmd, _ in commands:
            check(cmd, root, src)
        cpu: dict[str, list[float]] = {label: [] for label, _, _ in commands}
        wall: dict[str, list[float]] = {label: [] for label, _, _ in commands}
        for _ in range(args.rounds):
            for label, cmd, _ in commands:
                c, w = timed(cmd, root, src)
                cpu[label].append(c)
                wall[label].append(w)
        modules = {label: imported(cmd, root, src) for label, cmd, _ in commands}
    base = commands[0][0]

    def paired_to(times: dict[str, list[float]], label: str, other: str) -> float:
        return statistics.median(a / b for a, b in zip(times[label], times[other], strict=True))

    def paired(times: dict[str, list[float]], label: str) -> float:
        return paired_to(times, label, base)

    table = Table(
        title=f"whole processes, {args.rounds} interleaved rounds, medians",
        caption="onward = python -m onward; idle = a store where nothing waits; Typer app: "
        "for reference",
    )
    for col in ("command", "CPU ms", "wall ms", "CPU ÷ base", "wall ÷ base", "target"):
        table.add_column(col, justify="left" if col == "command" else "right")
    table.add_column("met")
    rows = []
    for label, _, target in commands:
        ratio = paired(cpu, label)
        met = target is None or ratio <= target
        table.add_row(
            label,
            f"{statistics.median(cpu[label]) * 1000:.0f}",
            f"{statistics.median(wall[label]) * 1000:.0f}",
            f"{ratio:.2f}",
            f"{paired(wall, label):.2f}",
            f"≤ {target}" if target else "—",
            ("yes" if met else "no") if target else "",
        )
        if target is not None:
            baseline = f'`python -c "{base}"`: {statistics.median(cpu[base]) * 1000:.0f}'
            if label.endswith(", Postgres"):
                baseline += (
                    f"; {PG_TABLE_LABEL} (the floor): {paired(cpu, PG_TABLE_LABEL):.2f}×, "
                    f"onward ÷ it {paired_to(cpu, label, PG_TABLE_LABEL):.2f}"
                )
            rows.append(
                {
                    "bench": "startup.py",
                    "measure": f"`{label}`, CPU ms of the whole process",
                    "onward": round(statistics.median(cpu[label]) * 1000),
                    "baseline": baseline,
                    "ratio": round(ratio, 2),
                    "target": f"≤ {target}",
                    "met": met,
                }
            )
    console.print(table)
    loads = Table(title="what each command imported (one -X importtime run)")
    loads.add_column("command")
    loads.add_column("modules", justify="right")
    for name in HEAVY:
        loads.add_column(name)
    for label, _, _ in commands:
        found = modules[label]
        tops = {m.split(".")[0] for m in found}
        loads.add_row(
            label,
            str(len(found)),
            *(str(sum(m.split(".")[0] == h for m in found)) if h in tops else "-" for h in HEAVY),
        )
    console.print(loads)
    console.print("(a number: how many of that package's modules were imported; - none)")
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
