"""Helpers shared by several test modules, moved out of tests/cli/test_milestones.py:
EXPANSION, KILLED_RUN, MILESTONE, plan, section, sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MILESTONE = "write one section per source found in s1"


def plan(**milestone: Any) -> dict[str, Any]:
    """s1 lists sources/, m1 (a milestone) writes a section per source, final waits for it."""
    return {
        "goal": "a report with one section per source",
        "acceptance": [{"check": "file_count", "path": "sections", "equals": 2}],
        "steps": [
            {"id": "s1", "tool": "list_dir", "args": {"path": "sources"}, "output": "found"},
            {"id": "m1", "milestone": MILESTONE, "depends_on": ["s1"], **milestone},
            {"id": "final", "tool": "noop", "args": {"value": "assembled"}, "depends_on": ["m1"]},
        ],
    }


def section(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"sec-{name}",
        "tool": "write_file",
        "args": {"path": f"sections/{name}.md", "content": f"# {name}\n"},
        "depends_on": ["s1"],
        **extra,
    }


EXPANSION = {"steps": [section("a"), section("b")]}


def sources(workdir: Path) -> None:
    (workdir / "sources").mkdir()
    for name in ("a", "b"):
        (workdir / "sources" / f"{name}.txt").write_text(f"source {name}\n", encoding="utf-8")


KILLED_RUN = """
import json, os, signal, sys
from onward import Onward, ScriptedChatModel

answer = json.loads(sys.argv[3])
if sys.argv[4] == "inside":  # the process dies while the model answers
    answer = lambda messages: os.kill(os.getpid(), signal.SIGKILL)
model = ScriptedChatModel(responses=[answer])
with Onward(sys.argv[1], model=model) as ow:
    ow.run(plan=json.loads(sys.argv[2]), thread_id="t")
"""
