"""A kill while a wave's answers are applied: no decision lost, none applied twice.

Three parallel payments wait for approval as ONE interrupt; ``onward approve --all``
answers them in one go and is SIGKILLed (``ONWARD_FAULT_KILL``) at one of two moments:

* ``after_answers``: every answer applied inside the approve node, nothing committed;
* ``after_record:b``: the answers committed, payment ``b`` made and recorded in the
  ledger, its checkpoint not written.

Then ``onward resume --takeover`` finishes the run. If the answers died with the process,
the same question stands and is answered again; a sibling payment caught in flight by the
kill has an unknown outcome and is escalated, and the test settles it from the ground
truth (the payments file): done with its result if it happened, else retry. Each payment
happens exactly once, and the decision log holds exactly one approval per step.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from onward import Onward
from tests.support.hitl_tools import rows
from tests.support.paths import SUPPORT

pytestmark = pytest.mark.crash

TOOLS = str(SUPPORT / "hitl_tools.py")
SHORT_LEASE = {"ONWARD_LEASE_TTL": "0.5", "ONWARD_HEARTBEAT": "0.1"}
PLAN = {
    "goal": "pay three people",
    "steps": [
        {"id": "a", "tool": "pay", "args": {"amount": 1, "to": "alice"}},
        {"id": "b", "tool": "pay", "args": {"amount": 2, "to": "bob"}},
        {"id": "c", "tool": "pay", "args": {"amount": 3, "to": "carol"}},
        {"id": "after", "tool": "slow", "args": {"value": 1}, "depends_on": ["a", "b", "c"]},
    ],
}


@pytest.mark.parametrize("kill_at", ["after_answers:a", "after_record:b"])
def test_a_kill_while_answering_a_wave_loses_no_decision_and_applies_none_twice(
    run_cli,  # type: ignore[no-untyped-def]
    workdir: Path,
    db_url: str,
    kill_at: str,
) -> None:
    (workdir / "plan.yaml").write_text(json.dumps(PLAN))
    tid = "t-wave"
    first = run_cli("run", "--plan", "plan.yaml", "--tools", TOOLS, "--thread-id", tid, "--json")
    assert first.code == 3, first.stderr
    items = run_cli("inbox", "--json").json()
    assert [i["step_id"] for i in items] == ["a", "b", "c"]
    assert len({i["interrupt_id"] for i in items}) == 1  # one interrupt for the wave

    env = {"ONWARD_FAULT_KILL": kill_at, **SHORT_LEASE}
    killed = run_cli("approve", tid, "--all", "--tools", TOOLS, "--json", env=env)
    assert killed.code < 0, killed.stderr  # SIGKILLed at the fault point
    time.sleep(0.6)  # the dead driver's lease expires

    resumed = run_cli("resume", tid, "--takeover", "--tools", TOOLS, "--json", env=SHORT_LEASE)
    for _ in range(5):
        if resumed.code != 3:
            break
        waiting = run_cli("inbox", "--json").json()
        if all(i["kind"] == "approval" for i in waiting):
            # The answers died with the process: the whole question stands, nothing ran.
            assert [i["step_id"] for i in waiting] == ["a", "b", "c"]
            assert rows(workdir, "payments.jsonl") == []
            resumed = run_cli("approve", tid, "--all", "--tools", TOOLS, "--json")
            continue
        item = next(i for i in waiting if i["kind"] == "escalation")
        to = item["args"]["to"]
        made = [p for p in rows(workdir, "payments.jsonl") if p["to"] == to]
        how = ["--as", "retry"]
        if made:
            result = {"paid": item["args"]["amount"], "to": to, "workdir": str(workdir)}
            (workdir / "result.json").write_text(json.dumps(result))
            how = ["--as", "done", "--result-file", "result.json"]
        settled = run_cli("resolve", tid, "--step", item["step_id"], *how)
        assert settled.code == 0, settled.stderr
        resumed = run_cli("resume", tid, "--tools", TOOLS, "--json")
    assert resumed.code == 0, resumed.stderr

    paid = Counter(p["to"] for p in rows(workdir, "payments.jsonl"))
    assert paid == {"alice": 1, "bob": 1, "carol": 1}
    with Onward(db_url, tool_modules=[TOOLS]) as ow:
        view = ow.get(tid)
    assert view.status == "done"
    approvals = Counter(d.step_id for d in view.decisions if d.action == "approve")
    assert approvals == {"a": 1, "b": 1, "c": 1}


ESCALATING = {
    "goal": "deliver three",
    "steps": [
        {"id": "a", "tool": "deliver", "args": {"label": "a"}},
        {"id": "b", "tool": "deliver", "args": {"label": "b"}},
        {"id": "c", "tool": "deliver", "args": {"label": "c"}},
        {"id": "after", "tool": "slow", "args": {"value": 1}, "depends_on": ["a", "b", "c"]},
    ],
}


@pytest.mark.parametrize("kill_at", ["after_answers:a", "after_record:b"])
def test_a_kill_while_settling_a_wave_of_escalations_loses_none_and_applies_none_twice(
    run_cli,  # type: ignore[no-untyped-def]
    workdir: Path,
    db_url: str,
    kill_at: str,
) -> None:
    """The wave's three failures are one question; ``approve --all`` (try again) is killed
    with the answers applied but not committed, or with the retried ``b`` delivered and
    recorded but not checkpointed. Resumed, each delivery happens once and each step has
    exactly one retry decision."""
    (workdir / "plan.yaml").write_text(json.dumps(ESCALATING))
    tid = "t-escalations"
    first = run_cli("run", "--plan", "plan.yaml", "--tools", TOOLS, "--thread-id", tid, "--json")
    assert first.code == 3, first.stderr
    items = run_cli("inbox", "--json").json()
    assert [(i["kind"], i["step_id"]) for i in items] == [("escalation", s) for s in "abc"]
    assert len({i["interrupt_id"] for i in items}) == 1  # one interrupt for the wave

    env = {"ONWARD_FAULT_KILL": kill_at, **SHORT_LEASE}
    killed = run_cli("approve", tid, "--all", "--tools", TOOLS, "--json", env=env)
    assert killed.code < 0, killed.stderr  # SIGKILLed at the fault point
    time.sleep(0.6)  # the dead driver's lease expires

    resumed = run_cli("resume", tid, "--takeover", "--tools", TOOLS, "--json", env=SHORT_LEASE)
    if kill_at.startswith("after_answers"):
        # The answers died with the process: the whole question stands, nothing ran again.
        assert resumed.code == 3, resumed.stderr
        waiting = run_cli("inbox", "--json").json()
        assert [(i["kind"], i["step_id"]) for i in waiting] == [("escalation", s) for s in "abc"]
        assert rows(workdir, "deliveries.jsonl") == []
        resumed = run_cli("approve", tid, "--all", "--tools", TOOLS, "--json")
    assert resumed.code == 0, resumed.stderr

    delivered = Counter(r["label"] for r in rows(workdir, "deliveries.jsonl"))
    assert delivered == {"a": 1, "b": 1, "c": 1}
    with Onward(db_url, tool_modules=[TOOLS]) as ow:
        view = ow.get(tid)
    assert view.status == "done"
    retries = Counter(d.step_id for d in view.decisions if d.action == "retry")
    assert retries == {"a": 1, "b": 1, "c": 1}
