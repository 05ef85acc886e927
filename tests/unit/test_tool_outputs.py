"""A step's output must be JSON: a tool returning an object, a set or a datetime fails at
that step as ``deterministic`` with a message naming the type and what to return, instead
of being stored as its ``repr()`` and counted as done (tests/support/output_tools.py)."""

from __future__ import annotations

from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, Plan, PlanStep
from onward.errors import DeterministicToolError
from onward.policies.egress import EgressResponse
from onward.tools.output import json_output
from tests.support.paths import SUPPORT

TOOLS = str(SUPPORT / "output_tools.py")


@pytest.fixture
def to(db_url: str, workdir: Path) -> Iterator[Onward]:
    with Onward(db_url, tool_modules=[TOOLS]) as client:
        yield client


def _one(ow: Onward, tool: str) -> Any:
    view = ow.run("outputs", plan=Plan(steps=[PlanStep(id="s", tool=tool, output="out")]))
    [step] = view.steps
    return view, step


@pytest.mark.parametrize(
    ("tool", "named", "advice"),
    [
        ("returns_object", "a Thing at output", "return a dict, list"),
        ("returns_set", "a set at output['tags']", "sorted(value)"),
        ("returns_datetime", "a datetime at output[1]", "isoformat()"),
    ],
)
def test_an_output_with_no_json_form_fails_the_step_where_it_happened(
    to: Onward, workdir: Path, tool: str, named: str, advice: str
) -> None:
    view, step = _one(to, tool)
    assert step.status == "failed"
    [failure] = step.failures
    assert failure.failure_class == "deterministic"
    assert named in failure.message
    assert "has no JSON form" in failure.message
    assert advice in (failure.hint or "")
    assert "out" not in view.artifacts  # never stored as its repr
    assert view.status != "done"
    assert (workdir / "calls.txt").read_text().splitlines() == ["s"]  # not retried


def test_a_pydantic_model_output_is_stored_as_its_json(to: Onward) -> None:
    view, _step = _one(to, "returns_model")
    assert view.status == "done"
    assert to.store.artifacts.get(to.state(view.thread_id).artifacts["out"]) == {
        "text": "ship it",
        "at": "2026-01-02T00:00:00Z",
    }


def test_an_effect_whose_output_has_no_json_form_is_not_recorded_as_completed(
    to: Onward, workdir: Path
) -> None:
    view, step = _one(to, "stamps_and_returns_object")
    assert step.status == "failed"
    assert "has no JSON form" in step.failures[0].message
    [effect] = to.store.ledger.for_thread(view.thread_id)
    assert effect.status == "started"  # it may have acted: never replayed as a result


def test_the_check_walks_nested_values_and_names_the_first_problem() -> None:
    assert json_output({"a": [1, 2.5, None, True, "x", (3, 4)]}, "t") == {
        "a": [1, 2.5, None, True, "x", (3, 4)]
    }
    for value, where in [
        ({"a": {"b": [b"x"]}}, "a bytes at output['a']['b'][0]"),
        ({1: "x"}, "an int dict key at output key 1"),
        ([float("nan")], "a float nan at output[0]"),
        ({"s": frozenset()}, "a frozenset at output['s']"),
    ]:
        with pytest.raises(DeterministicToolError, match="has no JSON form") as caught:
            json_output(value, "t")
        assert where in str(caught.value)


def test_an_egress_response_says_how_to_return_it_and_converts_to_json() -> None:
    headers = Message()
    headers["Content-Type"] = "application/json"
    response = EgressResponse(
        url="http://127.0.0.1/x", status=200, headers=headers, body=b'{"quote": "ship it"}'
    )
    with pytest.raises(DeterministicToolError) as caught:
        json_output(response, "fetch")
    assert "response.as_json()" in (caught.value.hint or "")
    assert json_output(response.as_json(), "fetch") == {
        "url": "http://127.0.0.1/x",
        "status": 200,
        "content_type": "application/json",
        "truncated": False,
        "text": '{"quote": "ship it"}',
        "json": {"quote": "ship it"},
    }
