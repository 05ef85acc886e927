"""Writes golden store v2: a run waiting for a person, as onward saved it before the
redesign that moved its classes into folders (release of 2026-11, commit da5633c).

It holds what v1 does not: a pending interrupt whose payload is an onward task model
(``onward.model.state.ApproveTask``), a policy, artifacts from a write, and a wave of two
parallel steps. Run once (``python tests/store/golden/make_golden_v2.py``) and commit the
output; never regenerate it.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from onward import Onward, Plan, PlanStep, RunPolicy
from onward.verification.checks import Equals

HERE = Path(__file__).resolve().parent
THREAD = "golden-v2"


def plan() -> Plan:
    return Plan(
        steps=[
            PlanStep(id="a", tool="noop", args={"value": 1}, output="first"),
            PlanStep(id="b", tool="noop", args={"value": 2}, output="second"),
            PlanStep(
                id="c",
                tool="noop",
                args={"value": "${first.value}"},
                depends_on=["a", "b"],
                checks=[Equals(field="value", value=1)],
            ),
            PlanStep(
                id="w",
                tool="write_file",
                args={"path": "out.txt", "content": "golden"},
                depends_on=["c"],
                output="written",
            ),
            PlanStep(id="z", tool="noop", args={"value": "${written.bytes}"}, depends_on=["w"]),
        ]
    )


def main() -> None:
    out = HERE / "v2"
    if out.exists():
        raise SystemExit(f"{out} exists: golden stores are never regenerated")
    out.mkdir()
    db = out / "onward.db"
    with Onward(f"sqlite:///{db}") as ow:
        ow.start(
            goal="golden v2",
            plan=plan(),
            workdir=out,
            thread_id=THREAD,
            max_concurrency=2,
            policy=RunPolicy(approve_tools=frozenset({"write_file"})),
        )
        view = ow.drive(THREAD)
        assert view.status == "waiting_for_human", view.status
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    (out / "onward.db.lock").unlink(missing_ok=True)
    shutil.rmtree(out / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
