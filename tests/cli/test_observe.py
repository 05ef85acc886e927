"""See what happened: the event log, timeline, summary, history, show, fork, replay and the
HTML report, checked on one run that had a retry, an approval and a failure."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, Plan, PlanStep
from onward.policies.run import RunPolicy
from tests.support.paths import SUPPORT

HITL = str(SUPPORT / "hitl_tools.py")
FAULTS = str(SUPPORT / "failure_tools.py")


@pytest.fixture
def eventful(db_url: str, workdir: Path) -> str:
    """A run with a retry (flaky), an approval (pay) and a failure (a deterministic error,
    not escalated), so it ends failed."""
    plan = Plan(
        steps=[
            PlanStep(id="flaky", tool="flaky", args={"times": 1}),
            PlanStep(id="pay", tool="pay", args={"amount": 5, "to": "alice"}, depends_on=["flaky"]),
            PlanStep(id="bug", tool="always_value_error", args={"x": 1}, depends_on=["pay"]),
        ]
    )
    with Onward(db_url, tool_modules=[HITL, FAULTS]) as ow:
        tid = ow.start("observe me", plan=plan, policy=RunPolicy(escalate_failures=False))
        assert ow.drive(tid).status == "waiting_for_human"
        assert ow.approve(tid, "pay", by="carol").status == "failed"
    return tid


def _json(run_cli: Any, *args: str) -> Any:
    result = run_cli(*args, "--json")
    assert result.code == 0, result.stderr
    return result.json()


def test_timeline_json_lists_every_event_in_order(run_cli: Any, eventful: str) -> None:
    events = _json(run_cli, "timeline", eventful)
    kinds = [e["kind"] for e in events]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert kinds[0] == "run_started"
    assert [k for k in kinds if not k.startswith("lease_")][-1] == "run_finished"
    started = [(e["step_id"], e["attempt"]) for e in events if e["kind"] == "step_started"]
    assert started == [("flaky", 1), ("flaky", 2), ("pay", 1), ("bug", 1)]
    failed = [
        (e["step_id"], e["detail"]["failure_class"]) for e in events if e["kind"] == "step_failed"
    ]
    assert failed == [("flaky", "transient"), ("bug", "deterministic")]
    assert "retry_scheduled" in kinds
    asked = [e for e in events if e["kind"] == "approval_requested"]
    decided = [e for e in events if e["kind"] == "approval_decided"]
    assert [e["step_id"] for e in asked] == ["pay"]
    assert [(e["detail"]["action"], e["detail"]["by"]) for e in decided] == [("approve", "carol")]
    tools = [e for e in events if e["kind"] == "tool_called"]
    assert all(e["detail"]["duration"] >= 0 and e["detail"]["args_digest"] for e in tools)
    assert "lease_acquired" in kinds
    only_pay = _json(run_cli, "timeline", eventful, "--step", "pay")
    assert {e["step_id"] for e in only_pay} == {"pay"}
    only_failed = _json(run_cli, "timeline", eventful, "--kind", "step_failed")
    assert len(only_failed) == 2


def test_summary_numbers_agree_with_the_events(run_cli: Any, eventful: str) -> None:
    events = _json(run_cli, "timeline", eventful)
    summary = _json(run_cli, "summary", eventful)
    assert summary["status"] == "failed"
    started = Counter(e["step_id"] for e in events if e["kind"] == "step_started")
    assert summary["attempts"] == dict(started)
    assert summary["retries"] == {"flaky": 1}
    failed = Counter(e["detail"]["failure_class"] for e in events if e["kind"] == "step_failed")
    assert summary["failures_by_class"] == dict(failed)
    [human] = summary["interventions"]
    asked = next(e for e in events if e["kind"] == "approval_requested")
    decided = next(e for e in events if e["kind"] == "approval_decided")
    from datetime import datetime

    waited = (
        datetime.fromisoformat(decided["at"]) - datetime.fromisoformat(asked["at"])
    ).total_seconds()
    assert human["waited_seconds"] == pytest.approx(waited, abs=1e-3)
    assert (human["step_id"], human["action"], human["by"]) == ("pay", "approve", "carol")
    assert summary["waiting_seconds"] == pytest.approx(waited, abs=1e-3)
    first = next(e for e in events if e["kind"] == "run_started")
    last = next(e for e in events if e["kind"] == "run_finished")
    span = datetime.fromisoformat(last["at"]) - datetime.fromisoformat(first["at"])
    total = span.total_seconds()
    assert summary["total_seconds"] == pytest.approx(total, abs=1e-2)
    assert summary["busy_seconds"] == pytest.approx(total - waited, abs=1e-2)
    assert summary["model_calls"] == 0


def test_history_and_show_step_back_through_saved_states(run_cli: Any, eventful: str) -> None:
    history = _json(run_cli, "history", eventful)
    assert len(history) >= 5
    assert history[0]["created_at"] >= history[-1]["created_at"]  # newest first
    assert {"checkpoint_id", "step", "node", "status", "created_at"} <= set(history[0])
    latest = _json(run_cli, "show", eventful)
    assert latest["values"]["status"] == "failed"
    # A checkpoint from before the approval: pay was not done there.
    early = next(h for h in reversed(history) if h["node"] == "execute")
    past = _json(run_cli, "show", eventful, "--at", early["checkpoint_id"])
    assert past["values"]["steps"]["flaky"]["status"] in ("failed", "done")
    assert (
        "pay" not in past["values"]["steps"] or past["values"]["steps"]["pay"]["status"] != "done"
    )


def test_fork_changes_one_arg_and_leaves_the_original_alone(
    run_cli: Any, db_url: str, workdir: Path
) -> None:
    plan = Plan(
        steps=[
            PlanStep(id="a", tool="noop", args={"value": 1}, output="first"),
            PlanStep(id="b", tool="noop", args={"value": 2}, depends_on=["a"], output="second"),
        ]
    )
    with Onward(db_url) as ow:
        original = ow.run("fork me", plan=plan).thread_id
    before = _json(run_cli, "history", original)
    after_a = next(
        h for h in reversed(before) if h["node"] == "execute" and h["status"] == "running"
    )
    forked = _json(
        run_cli, "fork", original, "--at", after_a["checkpoint_id"], "--edit", "b.value=7"
    )
    assert forked["thread_id"] != original
    assert forked["status"] == "done"
    with Onward(db_url) as ow:
        assert ow.get(forked["thread_id"]).artifact_value(ow, "second") == {"value": 7}
        assert ow.get(original).artifact_value(ow, "second") == {"value": 2}
    assert _json(run_cli, "history", original) == before  # the original's history is intact
    refused = run_cli("fork", original, "--at", after_a["checkpoint_id"], "--edit", "a.value=9")
    assert refused.code == 2
    assert "already done" in refused.stderr


def test_replay_walks_the_timeline(run_cli: Any, eventful: str) -> None:
    result = run_cli("replay", eventful, "--delay", "0")
    assert result.code == 0, result.stderr
    events = _json(run_cli, "timeline", eventful)
    assert result.stdout.count("\n") >= len(events)
    assert "approval_decided" in result.stdout


def test_html_report_renders_in_headless_chromium(
    run_cli: Any, eventful: str, workdir: Path
) -> None:
    report = workdir / "report.html"
    made = run_cli("report", eventful, "--html", str(report))
    assert made.code == 0, made.stderr
    html = report.read_text(encoding="utf-8")
    assert not re.search(r"(src|href)=\"https?://", html)  # self-contained
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is needed (.ci/run installs Debian's chromium)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,1000"]
    shot = workdir / "report.png"
    subprocess.run(
        [chromium, *flags, f"--screenshot={shot}", report.as_uri()],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert shot.stat().st_size > 5000
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", report.as_uri()],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    events = _json(run_cli, "timeline", eventful)
    assert dom.count('class="step-row"') == 3
    assert dom.count('class="event-row"') == len(events)
    assert 'class="bar wait"' in dom
    assert 'class="bar bad"' in dom


def test_events_of_a_step_saved_just_before_a_kill_are_not_lost(
    run_cli: Any, db_url: str, workdir: Path
) -> None:
    """The node logs its events before its writes commit: step a, checkpointed just
    before the driver is SIGKILLed inside b, keeps its events, and b's re-run attempt
    is logged once."""
    import time

    from tests.support.common import start_run

    steps = [
        {"id": "a", "tool": "slow"},
        {"id": "b", "tool": "slow", "depends_on": ["a"]},
    ]
    (workdir / "plan.yaml").write_text(json.dumps({"goal": "kill me", "steps": steps}))
    # Every tool call of this first driver takes 2 s: a finishes, and b is killed inside.
    proc = start_run(
        workdir,
        db_url,
        "t-log",
        FAULTS,
        ONWARD_FAULT_TOOL_DELAY="2",
        ONWARD_LEASE_TTL="0.5",
        ONWARD_HEARTBEAT="0.1",
    )
    try:
        deadline = time.monotonic() + 60
        with Onward(db_url) as ow:
            while time.monotonic() < deadline:
                if ow.store.get_run("t-log") and ow.state("t-log").status_of("a") == "done":
                    break
                time.sleep(0.05)
        time.sleep(0.3)  # b has started; nothing else arrives on the stream for a while
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.6)
    assert run_cli("resume", "t-log", "--takeover", "--tools", FAULTS, "--json").code == 0
    events = _json(run_cli, "timeline", "t-log")
    done = [(e["kind"], e["step_id"]) for e in events if e["kind"] in ("step_started", "step_done")]
    assert done == [
        ("step_started", "a"),
        ("step_done", "a"),
        ("step_started", "b"),
        ("step_done", "b"),
    ]
    assert "plan_created" in [e["kind"] for e in events]


def test_the_loop_guard_stops_a_drive_and_keeps_its_state(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onward.client.driving
    from onward import LoopGuardError

    steps = [
        PlanStep(id=f"s{i}", tool="noop", depends_on=[f"s{i - 1}"] if i else []) for i in range(6)
    ]
    with Onward(db_url) as ow:
        tid = ow.start("loop", plan=Plan(steps=steps))
        monkeypatch.setattr(onward.client.driving, "superstep_limit", lambda state, registry: 3)
        with pytest.raises(LoopGuardError, match="more than 3 supersteps"):
            ow.drive(tid)
        assert [e.kind for e in ow.store.events.list(tid, ["loop_guard"])] == ["loop_guard"]
        monkeypatch.undo()
        assert ow.resume(tid).status == "done"


def test_a_drive_without_listener_logs_the_same_events_as_one_that_streams(
    db_url: str, workdir: Path
) -> None:
    """A drive nobody streams progress from builds no stream payloads (``QUIET``); its event
    log must still hold every event, field for field, that a streamed drive logs."""
    plan = Plan(
        steps=[
            PlanStep(id="ok", tool="noop", args={"value": 1}),
            PlanStep(id="bug", tool="always_value_error", args={"x": 1}, depends_on=["ok"]),
        ]
    )
    streamed: list[Any] = []

    def logged(ow: Onward, tid: str) -> list[tuple[str, str | None, Any]]:
        return [
            (
                e.kind,
                e.step_id,
                {k: v for k, v in e.detail.items() if k != "duration"},
            )
            for e in ow.timeline(tid)
            if not e.kind.startswith("lease_")  # their text names the drive
        ]

    with Onward(db_url, tool_modules=[FAULTS]) as ow:
        policy = RunPolicy(escalate_failures=False)
        quiet = ow.start("observe me", plan=plan, policy=policy, workdir=workdir)
        assert ow.drive(quiet).status == "failed"
        loud = ow.start("observe me", plan=plan, policy=policy, workdir=workdir)
        assert ow.drive(loud, on_event=streamed.append).status == "failed"
        assert logged(ow, quiet) == logged(ow, loud)
    kinds = [e.kind.value for e in streamed]
    assert {"step_failed", "step_done", "tool_called"} <= set(kinds)
