"""Instructions per plan step, counted with callgrind: a step's CPU work as a number that
does not move with the machine's load.

Wall and CPU times of a no-op step move by ±10 % from run to run on a shared 2-core host,
more than most single changes; callgrind counts the instructions the process executes
(all its threads: the tool's thread too, the interpreter, SQLite, zlib, libc), the same
count for the same code and inputs whatever else runs. It does not see time spent waiting
(the disk, the Postgres server, a thread switch), so it complements ``commits.py``'s
timings and counts rather than replacing them.

What is run
    For each checkout (``--onward-src`` / ``--onward-rev``, as ``commits.py``), in a
    process of its own under ``valgrind --tool=callgrind --instr-atstart=no``: open a
    fresh store, run a 5-step chain (first-use imports and caches stay out), then
    ``Onward.run`` of a chain of N ``noop`` steps with instrumentation switched on around
    it (``callgrind_control -i on|off`` on the process's own pid). Two lengths
    (``--steps``, default 20 and 100); per step = the slope, so a run's fixed cost drops
    out. SQLite (WAL, ``synchronous=NORMAL``) and, unless ``--no-postgres``, a fresh
    schema on the Postgres server (the client's instructions only).

Run from the repo root (about a minute per checkout and backend)::

    python bench/instructions.py --onward-rev 811e7a8 --onward-src src
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from commits import (
    PG_ADMIN,
    Checkout,
    add_checkout_args,
    checkouts_of,
    fresh_schema,
    scratch_database,
)

HERE = Path(__file__).resolve().parent

CHILD = """
import os, subprocess, sys, tempfile
from pathlib import Path
sys.path.insert(0, {here!r})
from _common import any_size, chain_plan
from onward import Onward
steps, url = int(sys.argv[1]), sys.argv[2]
work = Path(tempfile.mkdtemp())
url = f"sqlite:///{{work / 'onward.db'}}" if url == "sqlite" else url
with Onward(url, model=None) as ow:
    ow.store
    ow.run(plan=chain_plan(5), workdir=work)
    toggle = ["callgrind_control", "-i"]
    subprocess.run([*toggle, "on", str(os.getpid())], check=True, capture_output=True)
    view = ow.run(plan=chain_plan(steps), workdir=work, **any_size())
    subprocess.run([*toggle, "off", str(os.getpid())], check=True, capture_output=True)
status = getattr(view.status, "value", view.status)
if status != "done":
    raise SystemExit(f"the run ended {{status}}")
"""

_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(checkout: Checkout, steps: int, url: str) -> int:
    """Instructions ``Onward.run`` of ``steps`` no-op steps executed (see the module doc)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
    env.update(PYTHONPATH=str(checkout.src), ONWARD_BLOCK_MODEL_REQUESTS="1", ONWARD_FSYNC="0")
    with tempfile.TemporaryDirectory(prefix="onward-bench-callgrind-") as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={Path(tmp) / 'callgrind.out'}",
                sys.executable,
                "-c",
                CHILD.format(here=str(HERE)),
                str(steps),
                url,
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=tmp,
        )
    found = _COLLECTED.findall(out.stderr)
    if out.returncode != 0 or not found:
        raise RuntimeError(f"{checkout.label} failed under callgrind:\n{out.stderr[-2000:]}")
    return int(found[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_checkout_args(parser)
    parser.add_argument("--steps", type=int, nargs=2, default=[20, 100], metavar=("N1", "N2"))
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument(
        "--pg-admin", default=PG_ADMIN, help="a Postgres URL that may CREATE DATABASE"
    )
    args = parser.parse_args(argv)
    n1, n2 = sorted(args.steps)
    if n1 < 1 or n1 == n2:
        parser.error("--steps needs two different lengths ≥ 1")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("valgrind is needed (apt-get install valgrind)")
    console = Console()
    table = Table(title=f"instructions per no-op step (callgrind; slope {n1} → {n2} steps)")
    table.add_column("checkout")
    table.add_column("backend")
    table.add_column("per step", justify="right")
    table.add_column(f"total at {n1} / {n2}", justify="right")
    table.add_column("× first", justify="right")
    with tempfile.TemporaryDirectory(prefix="onward-bench-revs-") as revs:
        checkouts = checkouts_of(args, Path(revs))
        backends = ["sqlite"] + ([] if args.no_postgres else ["postgres"])
        first: dict[str, float] = {}
        for backend in backends:
            for c in checkouts:
                print(f"  {c.label}, {backend}", flush=True)
                totals = []
                for n in (n1, n2):
                    if backend == "sqlite":
                        totals.append(instructions(c, n, "sqlite"))
                        continue
                    with scratch_database(args.pg_admin) as dbname:
                        totals.append(instructions(c, n, fresh_schema(args.pg_admin, dbname)))
                per_step = (totals[1] - totals[0]) / (n2 - n1)
                base = first.setdefault(backend, per_step)
                table.add_row(
                    c.label,
                    backend,
                    f"{per_step / 1e6:.2f} M",
                    f"{totals[0] / 1e6:.0f} M / {totals[1] / 1e6:.0f} M",
                    f"×{per_step / base:.3f}",
                )
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
