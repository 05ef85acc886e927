"""The deterministic check library: each kind passing, failing with its finding, and validating."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from onward.verification.checks import (
    CheckContext,
    ColumnsInclude,
    Equals,
    FileCount,
    FileExists,
    JsonPath,
    Matches,
    NonEmpty,
    RowCount,
    artifact_names,
    check_adapter,
    evaluate,
    lookup,
)

ANOMALIES: dict[str, Any] = {
    "title": "Order anomalies",
    "columns": ["Order_ID", "amount", "created_at"],
    "rows": [{"id": 1}, {"id": 2}, {"id": 3}],
    "rules": [
        {"name": "negative_amount", "count": 2, "examples": [{"line": 4}, {"line": 9}]},
        {"name": "duplicate_id", "count": 0, "examples": []},
    ],
    "totals": {"orders": 3, "currency": "EUR"},
}

ARTIFACTS: dict[str, Any] = {
    "summary": {"totals": {"orders": 3, "lines": [10, 20]}, "status": "ok"},
    "count": 3,
}


@pytest.fixture
def ctx(tmp_path: Path) -> CheckContext:
    return CheckContext(tmp_path, ARTIFACTS.__getitem__)


def check(**data: Any) -> Any:
    """Build a check from plan data, the way a declared plan does."""
    return check_adapter.validate_python(data)


# -- dotted paths -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (None, ANOMALIES),
        ("$", ANOMALIES),
        ("title", "Order anomalies"),
        ("rules[0].count", 2),
        ("rules[-1].name", "duplicate_id"),
        ("rules[0].examples[1].line", 9),
        ("$.totals.currency", "EUR"),
    ],
)
def test_lookup_follows_dotted_paths_into_dicts_and_lists(path: str | None, expected: Any) -> None:
    assert lookup(ANOMALIES, path) == expected


# -- file_exists ------------------------------------------------------------------------------


def test_file_exists_passes_for_a_file_under_the_workdir(ctx: CheckContext) -> None:
    (ctx.workdir / "out").mkdir()
    (ctx.workdir / "out" / "report.md").write_text("# hi", encoding="utf-8")

    assert evaluate(FileExists(path="out/report.md"), None, ctx) == []


def test_file_exists_fails_for_a_missing_file(ctx: CheckContext) -> None:
    assert evaluate(FileExists(path="out/report.md"), None, ctx) == [
        "file_exists: out/report.md does not exist"
    ]


def test_file_exists_accepts_an_absolute_path(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("x", encoding="utf-8")

    other_workdir = CheckContext(tmp_path / "other", ARTIFACTS.__getitem__)

    assert evaluate(FileExists(path=str(elsewhere)), None, other_workdir) == []


# -- non_empty --------------------------------------------------------------------------------


def test_non_empty_passes_for_a_file_with_bytes(ctx: CheckContext) -> None:
    (ctx.workdir / "a.csv").write_text("id\n1\n", encoding="utf-8")

    assert evaluate(NonEmpty(path="a.csv"), None, ctx) == []


def test_non_empty_fails_for_an_empty_file(ctx: CheckContext) -> None:
    (ctx.workdir / "a.csv").write_bytes(b"")

    assert evaluate(NonEmpty(path="a.csv"), None, ctx) == ["non_empty: a.csv is empty"]


def test_non_empty_fails_for_a_missing_file(ctx: CheckContext) -> None:
    assert evaluate(NonEmpty(path="a.csv"), None, ctx) == ["non_empty: a.csv does not exist"]


def test_non_empty_passes_for_a_non_empty_field(ctx: CheckContext) -> None:
    assert evaluate(NonEmpty(field="rules[0].examples"), ANOMALIES, ctx) == []


@pytest.mark.parametrize("falsy_but_present", [0, False])
def test_non_empty_treats_zero_and_false_as_values(
    ctx: CheckContext, falsy_but_present: Any
) -> None:
    assert evaluate(NonEmpty(field="n"), {"n": falsy_but_present}, ctx) == []


def test_non_empty_fails_for_an_empty_field(ctx: CheckContext) -> None:
    assert evaluate(NonEmpty(field="rules[1].examples"), ANOMALIES, ctx) == [
        "non_empty: rules[1].examples is empty"
    ]


@pytest.mark.parametrize("empty", [None, "", [], {}])
def test_non_empty_fails_for_an_empty_output(ctx: CheckContext, empty: Any) -> None:
    assert evaluate(NonEmpty(), empty, ctx) == ["non_empty: output is empty"]


def test_non_empty_reports_a_missing_field(ctx: CheckContext) -> None:
    assert evaluate(NonEmpty(field="rules[5]"), ANOMALIES, ctx) == [
        "non_empty: output has no field 'rules[5]'"
    ]


# -- row_count --------------------------------------------------------------------------------


@pytest.mark.parametrize("bounds", [{"min": 3}, {"max": 3}, {"equals": 3}, {"min": 1, "max": 5}])
def test_row_count_passes_within_bounds(ctx: CheckContext, bounds: dict[str, int]) -> None:
    assert evaluate(check(check="row_count", **bounds), ANOMALIES, ctx) == []


@pytest.mark.parametrize(
    ("bounds", "finding"),
    [
        ({"min": 4}, "row_count of rows: expected at least 4, got 3"),
        ({"max": 2}, "row_count of rows: expected at most 2, got 3"),
        ({"equals": 5}, "row_count of rows: expected exactly 5, got 3"),
        ({"min": 4, "max": 9}, "row_count of rows: expected at least 4, got 3"),
    ],
)
def test_row_count_fails_outside_bounds_with_the_count(
    ctx: CheckContext, bounds: dict[str, int], finding: str
) -> None:
    assert evaluate(check(check="row_count", **bounds), ANOMALIES, ctx) == [finding]


def test_row_count_follows_a_dotted_field(ctx: CheckContext) -> None:
    c = RowCount(field="rules[0].examples", equals=1)

    assert evaluate(c, ANOMALIES, ctx) == [
        "row_count of rules[0].examples: expected exactly 1, got 2"
    ]


def test_row_count_of_a_field_that_is_not_a_list_is_a_finding(ctx: CheckContext) -> None:
    assert evaluate(RowCount(field="title", min=1), ANOMALIES, ctx) == [
        "row_count: title is not a list of rows"
    ]


def test_row_count_of_a_missing_field_is_a_finding(ctx: CheckContext) -> None:
    assert evaluate(RowCount(min=1), {"lines": []}, ctx) == [
        "row_count: output has no field 'rows'"
    ]


# -- bounds validation ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [{"check": "row_count"}, {"check": "file_count", "path": "out"}])
def test_bounded_check_without_any_bound_is_rejected(kind: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="give at least one of min, max, equals"):
        check(**kind)


def test_row_count_without_any_bound_is_rejected_when_built_in_python() -> None:
    with pytest.raises(ValidationError, match="give at least one of min, max, equals"):
        RowCount(field="rows")


def test_bound_of_the_wrong_type_is_rejected() -> None:
    with pytest.raises(ValidationError, match="valid integer"):
        check(check="row_count", min="a few")


def test_contradictory_bounds_are_rejected() -> None:
    with pytest.raises(ValidationError):
        check(check="row_count", min=5, max=1)


# -- columns_include --------------------------------------------------------------------------


def test_columns_include_passes_case_insensitively(ctx: CheckContext) -> None:
    c = ColumnsInclude(columns=["order_id", "AMOUNT"])

    assert evaluate(c, ANOMALIES, ctx) == []


def test_columns_include_lists_every_missing_column(ctx: CheckContext) -> None:
    c = ColumnsInclude(columns=["order_id", "customer", "region"])

    assert evaluate(c, ANOMALIES, ctx) == ["columns_include: missing column(s) customer, region"]


def test_columns_include_reads_another_field(ctx: CheckContext) -> None:
    c = ColumnsInclude(columns=["count"], field="header")

    assert evaluate(c, {"header": ["name", "count"]}, ctx) == []
    assert evaluate(c, {"columns": ["count"]}, ctx) == [
        "columns_include: output has no field 'header'"
    ]


def test_columns_include_on_a_string_field_is_a_finding(ctx: CheckContext) -> None:
    c = ColumnsInclude(columns=["i"], field="header")

    assert evaluate(c, {"header": "id,name"}, ctx) != []


# -- equals -----------------------------------------------------------------------------------


def test_equals_passes_for_a_dotted_field_with_the_value(ctx: CheckContext) -> None:
    assert evaluate(Equals(field="rules[0].count", value=2), ANOMALIES, ctx) == []


def test_equals_fails_with_actual_and_expected(ctx: CheckContext) -> None:
    assert evaluate(Equals(field="rules[0].count", value=0), ANOMALIES, ctx) == [
        "equals: rules[0].count is 2, expected 0"
    ]


def test_equals_compares_the_whole_output_without_a_field(ctx: CheckContext) -> None:
    assert evaluate(Equals(value={"a": 1}), {"a": 1}, ctx) == []
    assert evaluate(Equals(value="done"), "failed", ctx) == [
        "equals: output is 'failed', expected 'done'"
    ]


def test_equals_against_another_artifacts_field_passes(ctx: CheckContext) -> None:
    c = Equals(field="totals.orders", artifact="summary", artifact_field="totals.orders")

    assert evaluate(c, ANOMALIES, ctx) == []


def test_equals_against_another_artifacts_field_fails_with_both_values(
    ctx: CheckContext,
) -> None:
    c = Equals(field="rules[0].count", artifact="summary", artifact_field="totals.lines[1]")

    assert evaluate(c, ANOMALIES, ctx) == ["equals: rules[0].count is 2, expected 20"]


def test_equals_against_a_whole_artifact(ctx: CheckContext) -> None:
    assert evaluate(Equals(field="totals.orders", artifact="count"), ANOMALIES, ctx) == []


def test_equals_against_a_missing_artifact_field_is_a_finding(ctx: CheckContext) -> None:
    c = Equals(field="totals.orders", artifact="summary", artifact_field="totals.rows")

    assert evaluate(c, ANOMALIES, ctx) == ["equals: artifact 'summary' has no field 'totals.rows'"]


def test_equals_on_a_missing_output_field_is_a_finding(ctx: CheckContext) -> None:
    assert evaluate(Equals(field="totals.rows", value=1), ANOMALIES, ctx) == [
        "equals: output has no field 'totals.rows'"
    ]


def test_equals_names_the_artifact_it_reads() -> None:
    assert artifact_names(Equals(field="x", artifact="summary")) == ["summary"]
    assert artifact_names(Equals(field="x", value=1)) == []
    assert artifact_names(FileExists(path="x")) == []


# -- matches ----------------------------------------------------------------------------------


def test_matches_passes_when_the_pattern_is_in_a_file(ctx: CheckContext) -> None:
    (ctx.workdir / "report.md").write_text("# Report\n## Counts per rule\n", encoding="utf-8")

    assert evaluate(Matches(path="report.md", pattern=r"## Counts per \w+"), None, ctx) == []


def test_matches_fails_when_the_pattern_is_not_in_a_file(ctx: CheckContext) -> None:
    (ctx.workdir / "report.md").write_text("# Report\n", encoding="utf-8")

    assert evaluate(Matches(path="report.md", pattern="Totals"), None, ctx) == [
        "matches: 'Totals' not found in report.md"
    ]


def test_matches_on_a_missing_file_is_a_finding(ctx: CheckContext) -> None:
    assert evaluate(Matches(path="report.md", pattern="x"), None, ctx) == [
        "matches: report.md does not exist"
    ]


def test_matches_searches_a_dotted_field(ctx: CheckContext) -> None:
    assert evaluate(Matches(field="rules[1].name", pattern=r"^dup"), ANOMALIES, ctx) == []
    assert evaluate(Matches(field="rules[1].name", pattern=r"^neg"), ANOMALIES, ctx) == [
        "matches: '^neg' not found in rules[1].name"
    ]


def test_matches_searches_non_text_values_as_json(ctx: CheckContext) -> None:
    assert evaluate(Matches(field="totals", pattern=r'"orders": 3'), ANOMALIES, ctx) == []
    assert evaluate(Matches(pattern="Order anomalies"), ANOMALIES, ctx) == []


def test_matches_with_an_invalid_regex_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"pattern '\[a-' is not a valid regex"):
        check(check="matches", pattern="[a-", field="title")


# -- file_count -------------------------------------------------------------------------------


@pytest.fixture
def outbox(ctx: CheckContext) -> Path:
    out = ctx.workdir / "outbox"
    (out / "nested").mkdir(parents=True)
    for name in ("a.csv", "b.csv", "c.txt", "nested/d.csv"):
        (out / name).write_text("x", encoding="utf-8")
    return out


def test_file_count_counts_files_matching_the_glob(ctx: CheckContext, outbox: Path) -> None:
    assert evaluate(FileCount(path="outbox", glob="*.csv", equals=2), None, ctx) == []


def test_file_count_counts_every_file_but_not_directories_by_default(
    ctx: CheckContext, outbox: Path
) -> None:
    assert evaluate(FileCount(path="outbox", equals=3), None, ctx) == []


def test_file_count_follows_a_recursive_glob(ctx: CheckContext, outbox: Path) -> None:
    assert evaluate(FileCount(path="outbox", glob="**/*.csv", equals=3), None, ctx) == []


def test_file_count_fails_with_the_glob_and_the_count(ctx: CheckContext, outbox: Path) -> None:
    c = check(check="file_count", path="outbox", glob="*.csv", min=5)

    assert evaluate(c, None, ctx) == ["file_count of outbox/*.csv: expected at least 5, got 2"]


def test_file_count_of_a_missing_directory_is_a_finding(ctx: CheckContext) -> None:
    assert evaluate(FileCount(path="outbox", min=1), None, ctx) == [
        "file_count: outbox is not a directory"
    ]


# -- json_path --------------------------------------------------------------------------------


@pytest.fixture
def result_json(ctx: CheckContext) -> str:
    (ctx.workdir / "result.json").write_text(json.dumps(ANOMALIES), encoding="utf-8")
    return "result.json"


def test_json_path_finds_a_value_in_a_file(ctx: CheckContext, result_json: str) -> None:
    assert evaluate(JsonPath(file=result_json, path="$.rules[0].count"), None, ctx) == []
    assert evaluate(JsonPath(file=result_json, path="rules[0].count", equals=2), None, ctx) == []


def test_json_path_fails_when_the_file_value_differs(ctx: CheckContext, result_json: str) -> None:
    c = JsonPath(file=result_json, path="$.totals.currency", equals="USD")

    assert evaluate(c, None, ctx) == ["json_path: $.totals.currency is 'EUR', expected 'USD'"]


def test_json_path_fails_when_the_path_is_absent(ctx: CheckContext, result_json: str) -> None:
    assert evaluate(JsonPath(file=result_json, path="$.rules[2].count"), None, ctx) == [
        "json_path: $.rules[2].count not found"
    ]


def test_json_path_can_require_a_path_to_be_absent(ctx: CheckContext, result_json: str) -> None:
    assert evaluate(JsonPath(file=result_json, path="errors", exists=False), None, ctx) == []
    assert evaluate(JsonPath(file=result_json, path="title", exists=False), None, ctx) == [
        "json_path: title exists but should not"
    ]


def test_json_path_on_a_missing_file_is_a_finding(ctx: CheckContext) -> None:
    assert evaluate(JsonPath(file="result.json", path="a"), None, ctx) == [
        "json_path: result.json does not exist"
    ]


def test_json_path_on_invalid_json_is_a_finding_not_an_exception(ctx: CheckContext) -> None:
    (ctx.workdir / "result.json").write_text("{not json", encoding="utf-8")

    [finding] = evaluate(JsonPath(file="result.json", path="a"), None, ctx)

    assert finding.startswith("json_path: could not evaluate (JSONDecodeError: ")


def test_json_path_reads_the_output_without_a_file(ctx: CheckContext) -> None:
    assert evaluate(JsonPath(path="rules[1].count", equals=0), ANOMALIES, ctx) == []
    assert evaluate(JsonPath(path="rules[1].count", equals=1), ANOMALIES, ctx) == [
        "json_path: rules[1].count is 0, expected 1"
    ]


# -- evaluation never raises ------------------------------------------------------------------


def test_failing_artifact_lookup_becomes_a_finding(tmp_path: Path) -> None:
    ctx = CheckContext(tmp_path, ARTIFACTS.__getitem__)

    findings = evaluate(Equals(field="title", artifact="nope"), ANOMALIES, ctx)

    assert findings == ["equals: could not evaluate (KeyError: 'nope')"]


def test_unknown_check_kind_is_rejected_with_the_discriminator() -> None:
    with pytest.raises(ValidationError, match="union_tag_invalid"):
        check(check="file_exist", path="x")


def test_checks_round_trip_through_plan_data() -> None:
    original = [
        FileExists(path="a"),
        NonEmpty(field="rows"),
        RowCount(min=1, max=3),
        ColumnsInclude(columns=["id"]),
        Equals(field="n", artifact="summary", artifact_field="totals.orders"),
        Matches(path="r.md", pattern=r"\d+"),
        FileCount(path="out", glob="*.csv", equals=2),
        JsonPath(path="$.a", file="x.json", equals=1),
    ]

    assert [check(**c.model_dump()) for c in original] == original


def test_equals_needs_an_expected_value_or_an_artifact() -> None:
    with pytest.raises(ValidationError, match="give the expected `value`"):
        Equals(field="x")
    assert Equals(field="x", value=None).value is None  # an explicit null is fine


# ----------------------------------------------------------------------------- ${args.x}


def test_a_check_refers_to_the_args_the_step_ran_with() -> None:
    from onward.verification.checks import arg_names, with_args

    check = Matches(path="${args.dir}/${args.name}.md", pattern="x")
    assert arg_names(check) == {"dir", "name"}
    assert with_args(check, {"dir": "out", "name": "r"}) == Matches(path="out/r.md", pattern="x")
    assert with_args(FileExists(path="${args.dst}"), {"dst": "b.txt"}) == FileExists(path="b.txt")


def test_a_check_on_an_arg_the_step_lacks_is_refused_at_validation() -> None:
    from onward.model.state import PlanStep
    from onward.planning.validate import step_problems
    from onward.tools.registry import default_registry

    step = PlanStep(
        id="c",
        tool="copy_file",
        args={"src": "a.txt", "dst": "b.txt"},
        checks=[FileExists(path="${args.target}")],
    )
    [problem] = step_problems(step, "steps[0] (c)", default_registry)
    assert "steps[0] (c).checks[0]" in str(problem)
    assert "no arg 'target'" in str(problem)
    assert "dst, src" in str(problem)


def test_editing_dst_of_a_copy_at_approval_is_verified_at_the_new_path(
    db_url: str, workdir: Path
) -> None:
    from onward import Onward
    from onward.policies.run import RunPolicy

    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")
    with Onward(db_url) as ow:
        tid = ow.start(
            "copy every file in inbox/ to archive/",
            workdir=workdir,
            policy=RunPolicy(approve_tools=frozenset({"copy_file"})),
        )
        [question] = ow.drive(tid).pending
        assert ow.state(tid).plan.step(question.step_id).checks == [FileExists(path="${args.dst}")]
        moved = {**question.args, "dst": "elsewhere/a.txt"}
        view = ow.approve(tid, question.step_id, args=moved)
        step = next(s for s in view.steps if s.id == question.step_id)
        assert step.status == "done", step
    assert (workdir / "elsewhere" / "a.txt").read_text() == "A"
    assert not (workdir / "archive" / "a.txt").exists()
