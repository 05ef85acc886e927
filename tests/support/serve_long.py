"""Helpers shared by several test modules, moved out of tests/server/test_serve_long.py:
noop_chain."""

from __future__ import annotations

from typing import Any


def noop_chain(n: int) -> dict[str, Any]:
    steps = [
        {
            "id": f"s{i}",
            "tool": "noop",
            "args": {"value": i},
            **({"depends_on": [f"s{i - 1}"]} if i else {}),
        }
        for i in range(n)
    ]
    return {"goal": f"{n} no-op steps", "plan": {"steps": steps}}
