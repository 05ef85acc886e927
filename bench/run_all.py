"""Run every bench in one go and write ``bench/RESULTS.md``: each ratio with its target.

Each script runs in its own process (one at a time, so they do not disturb each other),
prints its own tables (kept in RESULTS.md under "Output") and writes its ratios as JSON.

Run from the repo root: ``python bench/run_all.py [--quick]`` (``--quick``: smaller
sizes and fewer rounds, for a smoke run; the committed RESULTS.md uses the defaults).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

VS_BEFORE = ["--onward-rev", "da5633c", "--onward-src", str(HERE.parent / "src")]
"""commits.py compares this checkout with da5633c, the release before issue 18's redesign."""

BENCHES: list[tuple[str, list[str], list[str]]] = [
    # (name: the script, and a word more when a script runs twice; full-size args, --quick args)
    (
        "overhead.py",
        ["--steps", "200", "--rounds", "5"],
        ["--steps", "50", "--rounds", "2", "--count-steps", "10", "40"],
    ),
    ("storage.py", [], ["--steps-small", "20", "--steps-large", "100"]),
    ("resume.py", ["--long", "10000", "--rounds", "5"], ["--long", "300", "--rounds", "2"]),
    ("memory.py", [], ["--steps", "2000", "--csv-mb", "20", "--arg-mb", "5"]),
    ("parallel.py", ["--rounds", "5"], ["--rounds", "2"]),
    ("tokens.py", [], ["--steps", "40", "--late", "40"]),
    (
        "commits.py",
        [*VS_BEFORE, "--rounds", "5"],
        [*VS_BEFORE, "--steps", "10", "40", "--rounds", "1"],
    ),
    ("fleet.py", ["--runs", "24", "--rounds", "3"], ["--runs", "6", "--rounds", "1"]),
    # Issue 37's fleets side by side (onward, DBOS, LangGraph): ~15 min at full size, on
    # $ONWARD_BENCH_PG, which must run on this host (its backends' CPU is read in /proc).
    ("fleet.py --compare", ["--compare", "1,8,32,64"], ["--compare", "32"]),
    ("startup.py", ["--rounds", "7"], ["--rounds", "2"]),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument(
        "--only",
        nargs="*",
        help="run only these (names as in BENCHES, e.g. 'fleet.py --compare'); the others "
        "keep their last results",
    )
    args = parser.parse_args(argv)
    saved = HERE / "results.json"
    kept: dict[str, Any] = json.loads(saved.read_text()) if args.only and saved.exists() else {}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="onward-bench-all-") as tmp:
        for name, full, quick in BENCHES:
            if args.only and name not in args.only:
                continue
            script = name.split()[0]
            out = Path(tmp) / f"{name.replace(' ', '_')}.json"
            cmd = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
            cmd += ["--json", str(out)]
            print(f"$ {' '.join(cmd[1:])}", flush=True)
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
            took = time.perf_counter() - start
            print(proc.stdout, proc.stderr[-2000:] if proc.returncode else "", flush=True)
            if proc.returncode != 0:
                raise SystemExit(f"{name} failed with exit code {proc.returncode}")
            results[name] = {
                "rows": json.loads(out.read_text()),
                "command": " ".join([script, *(quick if args.quick else full)]),
                "output": proc.stdout,
                "seconds": took,
                "at": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            }
    merged = {
        name: results.get(name) or kept[name]
        for name, _, _ in BENCHES
        if name in results or name in kept
    }
    saved.write_text(json.dumps(merged, indent=1, ensure_ascii=False), encoding="utf-8")
    rows = [r for v in merged.values() for r in v["rows"]]
    outputs = [(v["command"], v["output"], v["seconds"], v["at"]) for v in merged.values()]
    args.out.write_text(render(rows, outputs, args.quick), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
    env["ONWARD_BLOCK_MODEL_REQUESTS"] = "1"
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "120"
    return env


def render(
    rows: list[dict[str, Any]], outputs: list[tuple[str, str, float, str]], quick: bool
) -> str:
    def cpu() -> str:
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return platform.processor() or "unknown"

    import os

    lines = [
        "# Benchmark results",
        "",
        f"Produced by `python bench/run_all.py{' --quick' if quick else ''}` (each "
        f"script's date and time under Output) with Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu()}); "
        + ", ".join(
            f"{p} {_version(p)}"
            for p in (
                "onward",
                "langgraph",
                "langgraph-checkpoint-sqlite",
                "langgraph-checkpoint-postgres",
                "dbos",
                "psycopg",
            )
        )
        + ". Method and how to reproduce: [README.md](README.md).",
        "",
        "| bench | measure | onward | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "—" if r["met"] is None else "yes" if r["met"] else "**no**"  # None: a reading
        lines.append(
            f"| `{r['bench']}` | {r['measure']} | {r['onward']} | {r['baseline']} | "
            f"{r['ratio'] if r['ratio'] is not None else '—'} | {r['target']} | {met} |"
        )
    lines += ["", "## Output", ""]
    for cmd, text, took, at in outputs:
        lines += [f"### `python bench/{cmd}` ({at}, {took:.0f} s)", "", "```", text.rstrip()]
        lines += ["```", ""]
    return "\n".join(lines) + "\n"


def _version(package: str) -> str:
    try:
        return version(package)
    except Exception:
        return "not installed"


if __name__ == "__main__":
    raise SystemExit(main())
