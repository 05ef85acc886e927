"""Helpers shared by several test modules, moved out of tests/cli/test_model_steps.py:
NOTES, TITLE, plan, prompt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage

TITLE = {
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 20}},
    "required": ["title"],
}
NOTES = "Quarterly report: revenue up 20 %, costs flat.\n"


def plan(output: Any = TITLE, checks: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return {
        "goal": "title the notes",
        "steps": [
            {"id": "read", "tool": "read_file", "args": {"path": "notes.txt"}, "output": "notes"},
            {
                "id": "title",
                "tool": "model_step",
                "depends_on": ["read"],
                "output": "title",
                "args": {
                    "instruction": "Give the notes a short title.",
                    "inputs": {"notes": "${notes.text}"},
                    "output": output,
                },
                "checks": list(checks),
            },
        ],
    }


def prompt(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(m.text for m in messages)
