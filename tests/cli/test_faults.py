"""Fault points are named in a production module; the test package only arms them.

A crash test arms a point through the environment of the process it starts
(onward.testing.faults) and the process kills itself there (onward.faults.reach)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from onward.faults import Fault
from onward.settings import FAULT_POINTS, Settings
from onward.testing.faults import execution_log, kill_at, tool_delay
from tests.support.common import cli_env
from tests.support.model_imports import imported
from tests.support.paths import ROOT

SRC = ROOT / "src" / "onward"

REACH = "from onward.faults import Fault, reach; reach(Fault.{point}, {step!r}); print('alive')"


def test_no_production_module_imports_the_test_package() -> None:
    offenders = [
        str(rel)
        for path in SRC.rglob("*.py")
        if "testing" not in (rel := path.relative_to(SRC)).parts
        and any(
            name.startswith("onward.testing")
            for name in imported(path, ".".join(("onward", *rel.parent.parts)))
        )
    ]
    assert offenders == []


def test_every_named_fault_point_is_one_the_settings_accept() -> None:
    assert {point.value for point in Fault} == set(FAULT_POINTS)
    for point in Fault:
        armed = kill_at(point, "s1")["ONWARD_FAULT_KILL"]
        assert Settings.from_env({"ONWARD_FAULT_KILL": armed}).fault_kill == armed


def _reach(point: Fault, step: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = REACH.format(point=point.name, step=step)
    return subprocess.run(
        [sys.executable, "-c", code], env=cli_env(**env), capture_output=True, text=True
    )


@pytest.mark.parametrize("step", ["pay", "*"])
def test_an_armed_point_kills_the_process_that_reaches_it(step: str) -> None:
    done = _reach(Fault.AFTER_EFFECT, "pay", kill_at(Fault.AFTER_EFFECT, step))
    assert done.returncode == -9
    assert "alive" not in done.stdout


@pytest.mark.parametrize(
    ("point", "step"), [(Fault.AFTER_RECORD, "pay"), (Fault.AFTER_EFFECT, "other")]
)
def test_a_point_or_step_not_armed_goes_on(point: Fault, step: str) -> None:
    done = _reach(point, step, kill_at(Fault.AFTER_EFFECT, "pay"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "alive"


def test_arming_without_a_step_is_refused() -> None:
    with pytest.raises(ValueError, match="step id"):
        kill_at(Fault.AFTER_EFFECT, "")


def test_the_other_aids_arm_through_settings(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    parsed = Settings.from_env({**tool_delay(0.25), **execution_log(log)})
    assert parsed.fault_tool_delay.total_seconds() == 0.25
    assert str(parsed.execution_log) == str(log)
