"""The domain model knows nothing of storage: no module of onward.model imports
checkpointing, verification, planning or tools (not even inside a function)."""

from __future__ import annotations

from pathlib import Path

from tests.support.model_imports import imported
from tests.support.paths import ROOT

MODEL = ROOT / "src" / "onward" / "model"
FORBIDDEN = ("checkpointing", "verification", "planning", "tools")


def test_the_model_imports_no_storage_verification_planning_or_tools() -> None:
    modules = sorted(MODEL.glob("*.py"))
    assert modules, "the scan must see the model's modules"
    offenders = {
        path.name: sorted(
            name
            for name in imported(path)
            if any(name == f"onward.{f}" or name.startswith(f"onward.{f}.") for f in FORBIDDEN)
        )
        for path in modules
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_scan_sees_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f():\n    from onward.checkpointing import serde\n"
        "from ..tools import registry\nimport onward.planning.validate\n"
    )
    names = imported(sample)
    assert {"onward.checkpointing", "onward.tools", "onward.planning.validate"} <= names
