"""Shared by the bench scripts (run as ``python bench/NAME.py``, so this is importable)."""

from __future__ import annotations

from onward import Plan, PlanStep


def chain_plan(n: int) -> Plan:
    """N noop steps, each depending on the previous one."""
    return Plan(
        steps=[
            PlanStep(
                id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else []
            )
            for i in range(n)
        ]
    )
