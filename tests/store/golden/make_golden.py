"""Writes a golden store: a run stopped mid-way, as this version of onward saves it.

Run once per schema version (``python tests/store/golden/make_golden.py v1``) and commit the
output. Never edit or regenerate an old golden directory: when the state schema changes,
add a migration in ``onward.model.state`` and a new golden directory.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

from onward import Onward, Plan, PlanStep
from onward.verification.checks import Equals

HERE = Path(__file__).resolve().parent
THREAD = "golden-thread"


def plan() -> Plan:
    steps = [PlanStep(id="a", tool="noop", args={"value": 1}, output="first")]
    steps += [
        PlanStep(
            id="b",
            tool="noop",
            args={"value": "${first.value}"},
            depends_on=["a"],
            checks=[Equals(field="value", value=1)],
        ),
        PlanStep(id="c", tool="noop", args={"value": 3}, depends_on=["b"]),
        PlanStep(id="d", tool="noop", args={"value": "${first}"}, depends_on=["a", "c"]),
    ]
    return Plan(steps=steps)


def main(version: str) -> None:
    out = HERE / version
    if out.exists():
        raise SystemExit(f"{out} exists: golden stores are never regenerated")
    out.mkdir()
    db = out / "onward.db"
    with Onward(f"sqlite:///{db}") as ow:
        ow.start(goal="golden run", plan=plan(), workdir=out, thread_id=THREAD)
        for event in ow.stream(THREAD):
            if event.kind == "step_done" and event.step_id == "b":
                break  # stop mid-way: a and b done, c and d pending
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
    conn.close()
    for extra in (out / "onward.db.lock",):
        extra.unlink(missing_ok=True)
    shutil.rmtree(out / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "v1")
