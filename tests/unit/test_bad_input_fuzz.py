"""Fuzzing plan parsing and validation (issue 21): whatever a plan file holds, reading and
validating it gives a valid plan that the store can hold, or a PlanValidationError. Never
another exception. Bounded for CI (``max_examples``; no deadline: the machine is shared)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onward.errors import PlanValidationError
from onward.llm.planner import DraftStep, PlanDraft, normalise
from onward.model.state import RunState
from onward.planning.reading import parse_plan_text
from onward.planning.validate import parse_declared, plan_problems
from onward.tools.registry import default_registry

FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ODD_TEXT = ["\ud83c", "\udf89", "\ud83c\udf89", "🎉", "\x00", "${a}", "${résultat_🎉}", "", " "]
"""Text that broke onward once: halves of a surrogate pair, NUL, references."""

texts = st.one_of(st.text(max_size=12), st.sampled_from(ODD_TEXT))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=20,
)
ids = st.sampled_from(["a", "b", "c", "a", "🎉", ""])
tools = st.sampled_from(["noop", "write_file", "http_post", "read_file", "teleport", ""])
step = st.fixed_dictionaries(
    {"id": ids, "tool": tools},
    optional={
        "args": st.one_of(
            st.dictionaries(
                st.sampled_from(["path", "content", "value", "url", "payload"]), values
            ),
            values,
        ),
        "depends_on": st.one_of(st.lists(ids, max_size=3), values),
        "output": st.one_of(st.sampled_from(["a", "out", "résultat_🎉", "x y"]), values),
        "checks": st.one_of(
            st.lists(st.fixed_dictionaries({"check": st.sampled_from(["file_exists", "nope"])})),
            values,
        ),
        "description": values,
        "retry": values,
    },
)
good_steps = st.lists(
    st.fixed_dictionaries(
        {"tool": st.just("noop")},
        optional={"args": st.fixed_dictionaries({"value": values}), "description": texts},
    ),
    min_size=1,
    max_size=4,
).map(lambda steps: [{"id": f"s{i}", **s} for i, s in enumerate(steps)])
"""Steps valid but for their values: a value the store cannot hold is caught only by the
checks of values (onward.planning.limits), not by a tool's schema."""

plans = st.one_of(
    st.fixed_dictionaries({"goal": texts, "steps": good_steps}),
    st.fixed_dictionaries(
        {"steps": st.one_of(st.lists(st.one_of(step, values), max_size=5), values)},
        optional={
            "goal": values,
            "acceptance": values,
            "constraints": values,
            "inputs": values,
            "max_concurrency": values,
            "extra": values,
        },
    ),
    values,
)


def _stored_or_refused(data: Any) -> None:
    """The contract: PlanValidationError, or a plan the store holds (JSON as UTF-8)."""
    try:
        goal, plan, _ = parse_declared(data, default_registry)
    except PlanValidationError as exc:
        refused: PlanValidationError | None = exc
    else:
        refused = None
    if refused is not None:
        assert refused.problems
        str(refused).encode("utf-8")  # printable: bad text it quotes is escaped
        return
    state = RunState(goal=goal, plan=plan)
    json.dumps(state.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")


@FUZZ
@given(plans)
def test_any_plan_value_is_valid_or_a_plan_validation_error(data: Any) -> None:
    _stored_or_refused(data)


@FUZZ
@given(plans, st.sampled_from(["json", "json-ascii", "yaml"]), st.data())
def test_any_plan_text_is_valid_or_a_plan_validation_error(
    data: Any, fmt: str, draw: st.DataObject
) -> None:
    try:
        if fmt == "yaml":
            text = yaml.safe_dump(data, allow_unicode=True)
        else:
            text = json.dumps(data, ensure_ascii=fmt == "json-ascii")
    except (ValueError, yaml.YAMLError, UnicodeEncodeError):
        return  # not writable as that format (e.g. NaN in strict writers); nothing to read
    # Damage it a little: cut it, or put a character in.
    cut = draw.draw(st.integers(min_value=0, max_value=len(text)))
    mutation = draw.draw(st.sampled_from(["none", "cut", "insert"]))
    if mutation == "cut":
        text = text[:cut]
    elif mutation == "insert":
        junk = draw.draw(st.sampled_from(["{", "[", "&a", "*a", "!!binary", "\\ud83c", ":"]))
        text = text[:cut] + junk + text[cut:]
    try:
        doc = parse_plan_text(text)
    except PlanValidationError:
        return
    _stored_or_refused(doc)


drafts = st.lists(
    st.fixed_dictionaries(
        {"id": st.sampled_from(["a", "b", "🎉"]), "tool": tools},
        optional={
            "args": st.dictionaries(st.sampled_from(["path", "content", "value"]), values),
            "args_json": st.one_of(texts, values.map(json.dumps), st.just('{"value": "\\ud83c"}')),
            "depends_on": st.lists(st.sampled_from(["a", "b"]), max_size=2),
            "output": st.sampled_from(["a", "résultat_🎉", "out"]),
        },
    ),
    max_size=4,
)


@FUZZ
@given(drafts)
def test_any_model_draft_is_a_valid_plan_or_problems(raw: list[dict[str, Any]]) -> None:
    try:
        draft = PlanDraft(steps=[DraftStep.model_validate(d) for d in raw])
    except ValueError:
        return  # the schema refused it: sent back to the model as it is
    plan, problems = normalise(draft, default_registry, Path("."))  # no for_each: no files
    if not problems:
        problems = plan_problems(plan, default_registry)
    if not problems:
        json.dumps(RunState(plan=plan).model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
