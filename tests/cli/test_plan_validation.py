"""Plan validation: every problem is reported at once, each with its location and a fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from onward import (
    Goal,
    Plan,
    PlanProblem,
    PlanStep,
    PlanValidationError,
    Registry,
    UsageError,
    load_plan_file,
    tool,
)
from onward.model.state import PlanSource
from onward.planning.validate import parse_declared, plan_problems
from onward.verification.checks import CHECK_KINDS, Equals, FileExists, Matches, RowCount

KNOWN_KINDS = ", ".join(CHECK_KINDS)


@pytest.fixture
def registry() -> Registry:
    """A private registry, so the tests do not depend on (or change) the built-in tools."""
    reg = Registry()

    @tool(registry=reg)
    def copy(src: str, dst: str, times: int = 1) -> dict[str, Any]:
        return {"src": src, "dst": dst, "times": times}

    @tool(registry=reg)
    def emit(value: int = 0) -> dict[str, Any]:
        return {"value": value}

    return reg


def problems_of(data: Any, registry: Registry) -> list[PlanProblem]:
    with pytest.raises(PlanValidationError) as info:
        parse_declared(data, registry, source="plan.yaml")
    return info.value.problems


def only_problem(data: Any, registry: Registry) -> PlanProblem:
    problems = problems_of(data, registry)
    assert len(problems) == 1, problems
    return problems[0]


def step(step_id: str, tool_name: str = "emit", **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": tool_name, **fields}


# -- tools and their args ---------------------------------------------------------------------


def test_unknown_tool_is_reported_with_registered_names(registry: Registry) -> None:
    problem = only_problem({"goal": "g", "steps": [step("a", "teleport")]}, registry)

    assert problem.location == "steps[0] (a).tool"
    assert problem.message == (
        "unknown tool 'teleport'; registered tools: copy, emit. "
        "Register your own with @onward.tool and pass --tools (or ONWARD_TOOLS)"
    )


def test_arg_of_wrong_type_is_reported_at_the_arg(registry: Registry) -> None:
    bad = step("a", "copy", args={"src": "in.txt", "dst": "out.txt", "times": "twice"})

    problem = only_problem({"steps": [bad]}, registry)

    assert problem.location == "steps[0] (a).args.times"
    assert "valid integer" in problem.message


def test_missing_required_arg_is_reported_at_the_arg(registry: Registry) -> None:
    problem = only_problem({"steps": [step("a", "copy", args={"src": "in.txt"})]}, registry)

    assert problem == PlanProblem("steps[0] (a).args.dst", "required field is missing")


def test_unknown_extra_arg_is_reported_with_a_spelling_hint(registry: Registry) -> None:
    args = {"src": "in.txt", "dst": "out.txt", "tims": 2}

    problem = only_problem({"steps": [step("a", "copy", args=args)]}, registry)

    assert problem == PlanProblem(
        "steps[0] (a).args.tims", "unknown field; remove it or check its spelling"
    )


def test_arg_holding_a_reference_is_not_type_checked_before_the_run(registry: Registry) -> None:
    plan = {
        "steps": [
            step("a", output="num"),
            step(
                "b",
                "copy",
                args={"src": "${num}", "dst": "x", "times": "${num.value}"},
                depends_on=["a"],
            ),
        ]
    }

    _goal, parsed, _ = parse_declared(plan, registry)

    assert [s.id for s in parsed.steps] == ["a", "b"]


# -- ids and dependencies ---------------------------------------------------------------------


def test_duplicate_step_id_points_at_the_first_use(registry: Registry) -> None:
    problem = only_problem({"steps": [step("a"), step("b"), step("a")]}, registry)

    assert problem == PlanProblem(
        "steps[2] (a).id", "duplicate step id 'a' (first used by steps[0])"
    )


def test_unknown_dependency_is_reported_with_known_steps(registry: Registry) -> None:
    plan = {"steps": [step("load"), step("report", depends_on=["lod"])]}

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps[1] (report).depends_on", "unknown step 'lod'; known steps: load, report"
    )


def test_dependency_cycle_shows_the_cycle_path(registry: Registry) -> None:
    plan = {
        "steps": [
            step("a", depends_on=["c"]),
            step("b", depends_on=["a"]),
            step("c", depends_on=["b"]),
            step("d", depends_on=["a"]),
        ]
    }

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps", "dependency cycle: a → c → b → a; remove one of these depends_on"
    )


def test_step_depending_on_itself_is_a_cycle(registry: Registry) -> None:
    problem = only_problem({"steps": [step("a", depends_on=["a"])]}, registry)

    assert problem.message.startswith("dependency cycle: a → a;")


# -- artifact references ----------------------------------------------------------------------


def test_reference_to_an_output_no_step_produces_lists_known_outputs(registry: Registry) -> None:
    plan = {
        "steps": [
            step("a", output="table"),
            step("b", "copy", args={"src": "${tabel.path}", "dst": "x"}, depends_on=["a"]),
        ]
    }

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps[1] (b).args.src",
        "references artifact 'tabel', which no step produces (known outputs: table)",
    )


def test_reference_when_no_step_has_outputs_says_none(registry: Registry) -> None:
    plan = {"steps": [step("a", "copy", args={"src": "${table}", "dst": "x"})]}

    problem = only_problem(plan, registry)

    assert problem.message == (
        "references artifact 'table', which no step produces (known outputs: (none))"
    )


def test_reference_to_an_output_not_upstream_says_to_add_depends_on(registry: Registry) -> None:
    plan = {
        "steps": [
            step("a", output="table"),
            step("b", "copy", args={"src": "${table}", "dst": "x"}),
        ]
    }

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps[1] (b).args.src",
        "references artifact 'table' from step 'a', which is not upstream; add 'a' to depends_on",
    )


def test_reference_through_a_transitive_dependency_is_upstream(registry: Registry) -> None:
    plan = {
        "steps": [
            step("a", output="table"),
            step("b", depends_on=["a"]),
            step("c", "copy", args={"src": "${table}", "dst": "x"}, depends_on=["b"]),
        ]
    }

    _goal, parsed, _ = parse_declared(plan, registry)

    assert len(parsed.steps) == 3


def test_check_reading_an_artifact_not_upstream_is_reported(registry: Registry) -> None:
    plan = {
        "steps": [
            step("a", checks=[{"check": "equals", "field": "value", "artifact": "later"}]),
            step("b", output="later"),
        ]
    }

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps[0] (a).checks[0]",
        "references artifact 'later' from step 'b', which is not upstream; add 'b' to depends_on",
    )


def test_acceptance_reading_an_unproduced_artifact_is_reported(registry: Registry) -> None:
    plan = {
        "goal": "g",
        "acceptance": [{"check": "equals", "artifact": "totals", "value": 1}],
        "steps": [step("a", output="table")],
    }

    problem = only_problem(plan, registry)

    assert problem == PlanProblem("acceptance[0]", "artifact 'totals' is not produced by any step")


def test_two_steps_producing_the_same_output_are_reported(registry: Registry) -> None:
    plan = {"steps": [step("a", output="t"), step("b", output="t", depends_on=["a"])]}

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps[1] (b).output", "artifact 't' is already produced by step 'a'"
    )


# -- checks -----------------------------------------------------------------------------------


def test_unknown_check_kind_lists_the_known_kinds(registry: Registry) -> None:
    plan = {"steps": [step("a", checks=[{"check": "file_exist", "path": "x"}])]}

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps[0] (a).checks[0]", f"unknown check kind 'file_exist'; known kinds: {KNOWN_KINDS}"
    )


def test_check_without_a_kind_lists_the_known_kinds(registry: Registry) -> None:
    plan = {"steps": [step("a", checks=[{"kind": "file_exists", "path": "x"}])]}

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps[0] (a).checks[0]", f"a check needs a 'check' kind, one of: {KNOWN_KINDS}"
    )


def test_check_missing_a_required_field_is_reported_at_the_field(registry: Registry) -> None:
    plan = {"steps": [step("a", checks=[{"check": "matches", "path": "out.md"}])]}

    problem = only_problem(plan, registry)

    assert problem == PlanProblem("steps[0] (a).checks[0].pattern", "required field is missing")


def test_check_with_an_unknown_field_is_reported_at_the_field(registry: Registry) -> None:
    plan = {"steps": [step("a", checks=[{"check": "file_exists", "path": "x", "size": 3}])]}

    problem = only_problem(plan, registry)

    assert problem == PlanProblem(
        "steps[0] (a).checks[0].size", "unknown field; remove it or check its spelling"
    )


def test_invalid_regex_in_matches_is_reported_with_the_pattern(registry: Registry) -> None:
    plan = {"steps": [step("a", checks=[{"check": "matches", "pattern": "(total"}])]}

    problem = only_problem(plan, registry)

    assert problem.location == "steps[0] (a).checks[0]"
    assert "pattern '(total' is not a valid regex: missing )" in problem.message


def test_row_count_without_any_bound_is_reported(registry: Registry) -> None:
    plan = {"steps": [step("a", checks=[{"check": "row_count", "field": "rows"}])]}

    problem = only_problem(plan, registry)

    assert problem.location == "steps[0] (a).checks[0]"
    assert "give at least one of min, max, equals" in problem.message


def test_check_validator_messages_have_no_pydantic_prefix(registry: Registry) -> None:
    plan = {"steps": [step("a", checks=[{"check": "matches", "pattern": "(total"}])]}

    problem = only_problem(plan, registry)

    assert problem.message.startswith("pattern '(total' is not a valid regex")


# -- top level --------------------------------------------------------------------------------


def test_plan_that_is_not_a_mapping_is_reported(registry: Registry) -> None:
    problem = only_problem(["a", "b"], registry)

    assert problem == PlanProblem("(top)", "a plan must be a mapping with 'goal' and 'steps'")


def test_unknown_top_level_key_and_missing_steps_are_both_reported(registry: Registry) -> None:
    problems = problems_of({"goal": "g", "stepz": [step("a")]}, registry)

    assert problems == [
        PlanProblem(
            "stepz",
            "unknown top-level key; expected one of: "
            "acceptance, constraints, goal, inputs, max_concurrency, steps",
        ),
        PlanProblem("steps", "a plan needs a non-empty list of steps"),
    ]


def test_non_positive_max_concurrency_is_reported(registry: Registry) -> None:
    problem = only_problem({"max_concurrency": 0, "steps": [step("a")]}, registry)

    assert problem == PlanProblem("max_concurrency", "must be a positive integer")


def test_goal_level_problems_are_located_at_their_own_key(registry: Registry) -> None:
    plan = {
        "acceptance": [{"check": "row_count"}],
        "constraints": {"team": ["a", "b"]},
        "steps": [step("a")],
    }

    locations = [p.location for p in problems_of(plan, registry)]

    assert locations == ["acceptance[0]", "constraints.team"]


def test_step_without_id_is_not_labelled_none(registry: Registry) -> None:
    problem = only_problem({"steps": [{"tool": "emit"}]}, registry)

    assert problem == PlanProblem("steps[0].id", "required field is missing")


# -- all problems at once ---------------------------------------------------------------------


def test_every_problem_of_a_plan_is_reported_in_one_error(registry: Registry) -> None:
    plan = {
        "goal": "g",
        "steps": [
            step("load", output="table"),
            step("load"),
            step("copy", "copy", args={"src": "${table}"}, depends_on=["load"]),
            step("ship", "teleport", depends_on=["pack"]),
            step("sum", "copy", args={"src": "${totals}", "dst": "x"}, depends_on=["copy"]),
        ],
        "max_concurrency": -1,
    }

    with pytest.raises(PlanValidationError) as info:
        parse_declared(plan, registry, source="plan.yaml")

    assert [str(p) for p in info.value.problems] == [
        "max_concurrency: must be a positive integer",
        "steps[1] (load).id: duplicate step id 'load' (first used by steps[0])",
        "steps[2] (copy).args.dst: required field is missing",
        "steps[3] (ship).depends_on: unknown step 'pack'; known steps: load, copy, ship, sum",
        "steps[3] (ship).tool: unknown tool 'teleport'; registered tools: copy, emit. "
        "Register your own with @onward.tool and pass --tools (or ONWARD_TOOLS)",
        "steps[4] (sum).args.src: references artifact 'totals', which no step produces "
        "(known outputs: table)",
    ]
    message = str(info.value)
    assert message.startswith("plan.yaml is invalid (6 problems); fix them and run again:\n")
    assert all(f"  - {p}" in message for p in info.value.problems)


def test_step_with_an_invalid_check_does_not_cause_spurious_problems(
    registry: Registry,
) -> None:
    plan = {
        "steps": [
            step("a", output="x", checks=[{"check": "nope"}]),
            step("b", "copy", args={"src": "${x}", "dst": "y"}, depends_on=["a"]),
        ]
    }

    problems = problems_of(plan, registry)

    assert problems == [
        PlanProblem(
            "steps[0] (a).checks[0]", f"unknown check kind 'nope'; known kinds: {KNOWN_KINDS}"
        )
    ]


def test_plan_problems_returns_problems_of_an_already_built_plan(registry: Registry) -> None:
    plan = Plan(steps=[PlanStep(id="a", tool="emit", depends_on=["zz"])])

    assert plan_problems(plan, registry) == [
        PlanProblem("steps[0] (a).depends_on", "unknown step 'zz'; known steps: a")
    ]


def test_problem_count_is_singular_for_one_problem(registry: Registry) -> None:
    with pytest.raises(PlanValidationError) as info:
        parse_declared({"steps": [step("a", "teleport")]}, registry, source="p.yaml")

    assert str(info.value).startswith("p.yaml is invalid (1 problem); fix them and run again:")


# -- declared plan files ----------------------------------------------------------------------

VALID_YAML = """\
goal: archive the inbox
acceptance:
  - check: file_exists
    path: archive/a.txt
constraints:
  owner: ops
inputs: [inbox/a.txt]
max_concurrency: 2
steps:
  - id: load
    tool: emit
    args: {value: 3}
    output: loaded
    checks:
      - {check: row_count, field: rows, min: 1}
  - id: copy
    tool: copy
    description: copy one file
    args:
      src: inbox/a.txt
      dst: archive/a.txt
    depends_on: [load]
    checks:
      - {check: equals, field: times, artifact: loaded, artifact_field: value}
      - {check: matches, field: dst, pattern: '^archive/'}
"""


def expected_plan() -> tuple[Goal, Plan, int | None]:
    goal = Goal(
        objective="archive the inbox",
        acceptance=[FileExists(path="archive/a.txt")],
        constraints={"owner": "ops"},
        inputs=["inbox/a.txt"],
    )
    plan = Plan(
        source=PlanSource.DECLARED,
        steps=[
            PlanStep(
                id="load",
                tool="emit",
                args={"value": 3},
                output="loaded",
                checks=[RowCount(field="rows", min=1)],
            ),
            PlanStep(
                id="copy",
                tool="copy",
                description="copy one file",
                args={"src": "inbox/a.txt", "dst": "archive/a.txt"},
                depends_on=["load"],
                checks=[
                    Equals(field="times", artifact="loaded", artifact_field="value"),
                    Matches(field="dst", pattern="^archive/"),
                ],
            ),
        ],
    )
    return goal, plan, 2


def test_valid_yaml_plan_file_loads_to_goal_and_plan(tmp_path: Path, registry: Registry) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(VALID_YAML, encoding="utf-8")

    assert load_plan_file(path, registry) == expected_plan()


def test_valid_json_plan_file_loads_to_goal_and_plan(tmp_path: Path, registry: Registry) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(yaml.safe_load(VALID_YAML), indent=2), encoding="utf-8")

    assert load_plan_file(str(path), registry) == expected_plan()


def test_minimal_plan_file_gets_a_default_objective(tmp_path: Path, registry: Registry) -> None:
    path = tmp_path / "tiny.json"
    path.write_text('{"steps": [{"id": "a", "tool": "emit"}]}', encoding="utf-8")

    goal, plan, max_concurrency = load_plan_file(path, registry)

    assert goal == Goal(objective=f"run {path}")
    assert plan.steps == [PlanStep(id="a", tool="emit")]
    assert max_concurrency is None


def test_plan_file_problems_name_the_file(tmp_path: Path, registry: Registry) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("steps:\n  - {id: a, tool: teleport}\n", encoding="utf-8")

    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path, registry)

    assert info.value.source == str(path)
    assert str(info.value).startswith(f"{path} is invalid (1 problem)")
    assert info.value.problems[0].location == "steps[0] (a).tool"


def test_malformed_yaml_is_a_validation_error_not_a_crash(
    tmp_path: Path, registry: Registry
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("goal: g\nsteps: [\n  - id: a\n", encoding="utf-8")

    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path, registry)

    [problem] = info.value.problems
    assert problem.location == "(file)"
    assert problem.message.startswith("not valid YAML/JSON: ")
    assert "line 3" in problem.message


def test_malformed_json_is_a_validation_error_not_a_crash(
    tmp_path: Path, registry: Registry
) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"goal": "g", "steps": [{"id": "a",, }]}', encoding="utf-8")

    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path, registry)

    assert info.value.problems[0].location == "(file)"
    assert info.value.problems[0].message.startswith("not valid YAML/JSON: ")


def test_empty_plan_file_is_a_validation_error(tmp_path: Path, registry: Registry) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")

    with pytest.raises(PlanValidationError) as info:
        load_plan_file(path, registry)

    assert info.value.problems == [
        PlanProblem("(top)", "a plan must be a mapping with 'goal' and 'steps'")
    ]


def test_plan_file_that_is_not_text_is_a_validation_error(
    tmp_path: Path, registry: Registry
) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00goal")

    with pytest.raises(PlanValidationError):
        load_plan_file(path, registry)


def test_missing_plan_file_is_a_usage_error(tmp_path: Path, registry: Registry) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(UsageError) as info:
        load_plan_file(missing, registry)

    assert not isinstance(info.value, PlanValidationError)
    assert str(info.value) == f"plan file {missing} not found; check the --plan path"


# -- the CLI ----------------------------------------------------------------------------------

BAD_PLAN = """\
goal: broken plan
steps:
  - id: load
    tool: teleport
  - id: load
    tool: noop
    depends_on: [nowhere]
"""


def test_cli_rejects_an_invalid_plan_with_exit_2_and_creates_no_run(
    workdir: Path, run_cli: Any
) -> None:
    (workdir / "bad.yaml").write_text(BAD_PLAN, encoding="utf-8")

    result = run_cli("run", "--plan", "bad.yaml")

    assert result.code == 2
    assert "bad.yaml is invalid (3 problems)" in result.stderr
    assert "steps[0] (load).tool: unknown tool 'teleport'; registered tools: " in result.stderr
    assert "pass --tools (or ONWARD_TOOLS)" in result.stderr
    assert "steps[1] (load).id: duplicate step id 'load' (first used by steps[0])" in result.stderr
    assert "steps[1] (load).depends_on: unknown step 'nowhere'; known steps: load" in result.stderr
    assert "Traceback" not in result.stderr
    assert "thread id" not in result.stderr
    listed = run_cli("list", "--json")  # no run: the failed run wrote nothing, not even a store
    assert listed.code == 2
    assert "nothing was created" in listed.json()["message"]


def test_cli_prints_brackets_in_problems_verbatim(workdir: Path, run_cli: Any) -> None:
    (workdir / "bad.yaml").write_text(
        "steps:\n  - id: a\n    tool: noop\n    checks:\n"
        "      - {check: matches, field: value, pattern: '([a-z]+'}\n",
        encoding="utf-8",
    )

    result = run_cli("run", "--plan", "bad.yaml")

    assert result.code == 2
    assert "pattern '([a-z]+' is not a valid regex" in result.stderr


def test_cli_reports_a_closing_tag_lookalike_without_crashing(workdir: Path, run_cli: Any) -> None:
    (workdir / "bad.yaml").write_text(
        "steps:\n  - id: a\n    tool: noop\n    checks:\n"
        "      - {check: matches, field: value, pattern: '([/]'}\n",
        encoding="utf-8",
    )

    result = run_cli("run", "--plan", "bad.yaml")

    assert "Traceback" not in result.stderr
    assert result.code == 2
    assert "pattern '([/]' is not a valid regex" in result.stderr


# -- a plan passed to Onward.start / Onward.run ------------------------------------------------


def test_plan_document_passed_as_a_mapping_runs_like_its_file(tmp_path: Path) -> None:
    from onward import Onward

    document = {"goal": "echo twice", "steps": [step("a", "noop"), step("b", "noop")]}
    with Onward(str(tmp_path / "o.db"), model=None) as ow:
        view = ow.run(plan=document, workdir=tmp_path)
    assert view.status == "done"
    assert [s.id for s in view.steps] == ["a", "b"]


def test_plan_document_with_problems_is_refused_before_a_run_exists(tmp_path: Path) -> None:
    from onward import Onward

    with (
        Onward(str(tmp_path / "o.db"), model=None) as ow,
        pytest.raises(PlanValidationError, match="no_such_tool"),
    ):
        ow.start(plan={"steps": [step("a", "no_such_tool")]}, workdir=tmp_path)
    assert not (tmp_path / "o.db").exists()  # no run, not even a store


@pytest.mark.parametrize("plan", [["a", "b"], 42, b"steps: []"])
def test_plan_of_an_unsupported_type_is_a_usage_error_not_ignored(
    tmp_path: Path, plan: object
) -> None:
    from onward import Onward

    with (
        Onward(str(tmp_path / "o.db"), model=None) as ow,
        pytest.raises(UsageError, match="plan must be a Plan, a plan document"),
    ):
        ow.start("do it", plan=plan, workdir=tmp_path)  # type: ignore[arg-type]
