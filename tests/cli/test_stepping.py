"""Stepping through a run the LangGraph way: ``interrupt_before`` pauses before a node (the
Python API, the CLI and HTTP), and a produced output can be looked at with the checks verify
will run on it before it is done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from onward import Onward, Plan, PlanStep
from onward.errors import UsageError
from onward.nodes.verify import pending_checks
from onward.verification.checks import Equals


def _plan() -> Plan:
    return Plan(
        steps=[
            PlanStep(
                id="a", tool="noop", args={"value": 1}, checks=[Equals(field="value", value=1)]
            ),
            PlanStep(id="b", tool="noop", args={"value": 2}, depends_on=["a"]),
        ]
    )


def test_a_run_pauses_before_verify_with_the_output_produced_not_done(
    ow: Onward, workdir: Path
) -> None:
    view = ow.run("step through", plan=_plan(), workdir=workdir, interrupt_before=["verify"])
    assert view.status == "running"
    assert view.paused_before == ["verify"]
    assert [(s.id, s.status) for s in view.steps] == [("a", "produced"), ("b", "pending")]
    assert view.steps[0].output is not None  # saved, waiting for its verdict

    again = ow.resume(view.thread_id, interrupt_before=["verify"])
    assert again.paused_before == ["verify"]
    assert [(s.id, s.status) for s in again.steps] == [("a", "done"), ("b", "produced")]

    done = ow.resume(view.thread_id)
    assert done.status == "done"
    assert done.paused_before == []
    assert [s.status for s in done.steps] == ["done", "done"]


def test_a_paused_output_shows_the_checks_verify_will_run(ow: Onward, workdir: Path) -> None:
    view = ow.run("look", plan=_plan(), workdir=workdir, interrupt_before=["verify"])
    at = ow.history(view.thread_id)[0]["checkpoint_id"]
    state, nxt = ow.state_at(view.thread_id, at)
    assert nxt == ["verify"]
    checks = pending_checks(ow.deps, state)
    assert list(checks) == ["a"]
    # the tool's default checks, then the step's own
    assert [c["check"] for c in checks["a"]] == ["non_empty", "equals"]
    assert checks["a"][1]["value"] == 1


def test_an_unknown_node_to_pause_before_is_refused_before_anything_runs(
    ow: Onward, workdir: Path
) -> None:
    thread_id = ow.start("typo", plan=_plan(), workdir=workdir)
    with pytest.raises(UsageError, match="no node named 'verfy'"):
        ow.drive(thread_id, interrupt_before=["verfy"])
    assert [s.status for s in ow.get(thread_id).steps] == ["pending", "pending"]


def test_the_cli_pauses_before_verify_and_shows_pending_checks(run_cli: Any, workdir: Path) -> None:
    (workdir / "plan.yaml").write_text(
        "steps:\n  - id: a\n    tool: noop\n    args: {value: 1}\n"
        "    checks: [{check: equals, field: value, value: 1}]\n",
        encoding="utf-8",
    )
    paused = run_cli(
        "run", "--plan", "plan.yaml", "--interrupt-before", "verify", "--thread-id", "p", "--json"
    )
    assert paused.code == 3, paused.stderr  # stopped, not done: resume goes on
    assert paused.json()["paused_before"] == ["verify"]
    shown = run_cli("show", "p", "--json")
    assert shown.code == 0, shown.stderr
    data = shown.json()
    assert data["next"] == ["verify"]
    assert [c["check"] for c in data["pending_checks"]["a"]] == ["non_empty", "equals"]
    text = run_cli("show", "p")
    assert "checks pending: non_empty, equals" in text.stdout
    done = run_cli("resume", "p", "--json")
    assert done.code == 0, done.stderr
    assert done.json()["status"] == "done"


def test_a_run_over_http_pauses_before_verify_and_goes_on(db_url: str, workdir: Path) -> None:
    import httpx

    from tests.support.serve import serve

    plan = {"steps": [{"id": "a", "tool": "noop", "args": {"value": 1}}]}
    with serve(db_url, workdir) as url:
        tid = httpx.post(f"{url}/threads", json={}).json()["thread_id"]
        body: dict[str, Any] = {
            "assistant_id": "onward",
            "input": {"goal": "step", "plan": plan},
            "interrupt_before": ["verify"],
        }
        paused = httpx.post(f"{url}/threads/{tid}/runs/wait", json=body, timeout=60)
        assert paused.status_code == 200, paused.text
        runs = httpx.get(f"{url}/threads/{tid}/runs").json()
        # Paused where asked: the run ended well, its thread stands interrupted.
        assert runs[0]["status"] == "success"
        assert httpx.get(f"{url}/threads/{tid}").json()["status"] == "interrupted"
        state = httpx.get(f"{url}/threads/{tid}/state").json()
        assert state["next"] == ["verify"]
        assert state["values"]["steps"]["a"]["status"] == "produced"
        bad = {"assistant_id": "onward", "interrupt_before": ["verfy"]}
        refused = httpx.post(f"{url}/threads/{tid}/runs/wait", json=bad, timeout=60)
        assert refused.status_code == 422
        assert "no node named 'verfy'" in refused.json()["detail"]
        done = httpx.post(
            f"{url}/threads/{tid}/runs/wait", json={"assistant_id": "onward"}, timeout=60
        )
        assert done.json()["status"] == "done"
