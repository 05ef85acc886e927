"""Every field of the run policy passes through a start request's tightening: a server's
setting a client leaves alone is kept (no field silently reset to its default), and a
client's value that loosens it is refused, naming the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from onward.errors import ForbiddenError
from onward.policies.run import Deadline, RunPolicy
from onward.serve.requests import tightened_policy

STRICT: dict[str, Any] = {
    "approve_tools": frozenset({"write_file"}),
    "auto_approve": frozenset({"notify"}),
    "approve_all": True,
    "approve_plan": True,
    "confine_paths": True,
    "escalate_failures": False,
    "allow_tools": frozenset({"write_file", "notify"}),
    "deadline": Deadline(expire_after=timedelta(hours=2)),
    "tool_deadlines": {"notify": Deadline(expire_after=timedelta(minutes=5))},
    "judge_failure": "pause",
    "max_plan_steps": 7,
}
"""A server policy with every field away from its default (or at its strict end)."""


def test_the_table_names_every_policy_field() -> None:
    assert set(STRICT) == set(RunPolicy.model_fields)


def test_a_request_that_asks_nothing_keeps_every_server_setting() -> None:
    base = RunPolicy(**STRICT)
    assert tightened_policy(base, {}) == base
    loose_judge = RunPolicy(**{**STRICT, "judge_failure": "pass"})
    assert tightened_policy(loose_judge, {}).judge_failure == "pass"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("judge_failure", "pass"),
        ("max_plan_steps", 8),
        ("auto_approve", ["notify", "write_file"]),
        ("allow_tools", ["write_file", "notify", "http_post"]),
        ("approve_all", False),
        ("approve_plan", False),
    ],
)
def test_a_request_that_loosens_a_field_is_refused_naming_it(field: str, value: Any) -> None:
    with pytest.raises(ForbiddenError, match=field):
        tightened_policy(RunPolicy(**STRICT), {field: value})


def test_a_request_may_ask_a_person_where_the_server_would_pass() -> None:
    base = RunPolicy(judge_failure="pass")
    assert tightened_policy(base, {"judge_failure": "pause"}).judge_failure == "pause"
