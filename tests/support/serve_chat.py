"""Helpers shared by several test modules, moved out of tests/server/test_serve_chat.py:
COPY, TWO_PAYMENTS, human."""

from __future__ import annotations

from typing import Any

TWO_PAYMENTS = {
    "steps": [
        {"id": "a", "tool": "pay", "args": {"amount": 5, "to": "ann"}},
        {"id": "b", "tool": "pay", "args": {"amount": 7, "to": "bo"}},
        {"id": "after", "tool": "slow", "args": {"value": 2}, "depends_on": ["a", "b"]},
    ]
}
COPY = "copy every file in inbox/ to archive/"


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"type": "human", "content": text}]}
