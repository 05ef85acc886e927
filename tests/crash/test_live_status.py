"""Status tells the truth while a step runs and after its driver dies: a step that has run
for a moment shows ``running`` (attempt and since when) and the step before it ``done``,
though the step's own record commits only when it ends; after a SIGKILL mid-effect the
step shows its effect started, and the run shows ``stalled`` at once (its driver's process
is gone), in ``onward status``, the Python API and the timeline."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from onward import Onward
from tests.support.common import start_run
from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "live_tools.py")

PLAN = """\
goal: hold a step
steps:
  - id: first
    tool: write_file
    args: {path: a.txt, content: "a"}
  - id: slow
    tool: {tool}
    args: {args}
    depends_on: [first]
"""

pytestmark = pytest.mark.xdist_group("live")


def _status(run_cli: Any, thread_id: str) -> dict[str, Any]:
    shown = run_cli("status", thread_id, "--json")
    assert shown.code in (0, 1, 3), shown.stderr
    return json.loads(shown.stdout)


def _until(what: Any, timeout: float = 60) -> None:
    until = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < until, "timed out"
        time.sleep(0.05)


def _steps(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in view["steps"]}


def test_a_running_step_shows_as_running_and_the_one_before_as_done(
    workdir: Path, db_url: str, run_cli: Any
) -> None:
    (workdir / "plan.yaml").write_text(PLAN.replace("{tool}", "held").replace("{args}", "{}"))
    proc = start_run(workdir, db_url, "live-1", TOOLS)
    try:
        _until(lambda: (workdir / "started-slow").exists())
        _until(lambda: _steps(_status(run_cli, "live-1"))["slow"]["status"] == "running")
        view = _status(run_cli, "live-1")
        steps = _steps(view)
        assert steps["first"]["status"] == "done"
        assert steps["slow"]["attempts"] == 1
        assert "running since" in steps["slow"]["note"]
        assert view["status"] == "running"
        assert view["stalled"] is False
        with Onward(db_url) as ow:
            assert ow.get("live-1").step_counts() == {"done": 1, "running": 1}
            kinds = [e.kind for e in ow.timeline("live-1", step="slow")]
            assert "step_running" in kinds
        (workdir / "go-slow").write_text("")
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    steps = _steps(_status(run_cli, "live-1"))
    assert steps["slow"]["status"] == "done"
    assert steps["slow"]["note"] is None


def test_after_a_kill_mid_effect_the_effect_shows_started_and_the_run_stalled(
    workdir: Path, db_url: str, run_cli: Any
) -> None:
    plan = PLAN.replace("{tool}", "deliver").replace("{args}", '{message: "hello"}')
    (workdir / "plan.yaml").write_text(plan)
    proc = start_run(workdir, db_url, "live-2", TOOLS)
    try:
        _until(lambda: (workdir / "started-slow").exists())
        proc.kill()
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert (workdir / "outbox.txt").read_text() == "hello\n"
    view = _status(run_cli, "live-2")
    assert view["stalled"] is True
    slow = _steps(view)["slow"]
    assert slow["status"] == "running"
    assert "effect was started" in slow["note"]
    assert "driver that stopped" in slow["note"]
    human = run_cli("status", "live-2")
    assert "stalled" in human.stdout
    (workdir / "go-slow").write_text("")
    resumed = run_cli("resume", "live-2", "--tools", TOOLS)
    assert resumed.code == 0, resumed.stderr
    assert _steps(_status(run_cli, "live-2"))["slow"]["status"] == "done"
