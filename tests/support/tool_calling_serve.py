"""Helpers shared by several test modules, moved out of
tests/server/test_tool_calling_serve.py: PLAN, TOOLS."""

from __future__ import annotations

from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "tool_calling_tools.py")
PLAN = {
    "steps": [
        {
            "id": "agent",
            "tool": "tool_calling",
            "output": "answer",
            "args": {
                "instruction": "Look the revenue up and publish it.",
                "tools": ["lookup", "publish"],
            },
        }
    ]
}
