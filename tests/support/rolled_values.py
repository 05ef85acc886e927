"""Helpers shared by several test modules, moved out of tests/store/test_rolled_values.py:
chain, run."""

from __future__ import annotations

from onward import Onward, Plan, PlanStep
from onward.policies.run import RunPolicy


def chain(n: int) -> Plan:
    return Plan(
        steps=[
            PlanStep(
                id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else []
            )
            for i in range(n)
        ]
    )


def run(ow: Onward, n: int) -> str:
    policy = RunPolicy(max_plan_steps=10_000)
    return str(ow.run(f"{n} no-op steps", plan=chain(n), policy=policy).thread_id)
