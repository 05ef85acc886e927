"""What a check is, as data: the kinds of check a plan step or a goal names.

A check lives in plans and checkpoints; how one is evaluated (files, artifacts, the
step's output) is onward.verification.checks. ``lookup`` follows a dotted path such as
``rules[0].count`` into a value (artifact references use it too).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

_MISSING: Any = object()
_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]")


def lookup(value: Any, dotted: str | None) -> Any:
    """Follow ``a.b[0].c`` into nested dicts and lists; ``_MISSING`` when absent."""
    if not dotted or dotted in ("$", "."):
        return value
    dotted = dotted.removeprefix("$.").removeprefix("$")
    current = value
    for key, index in _PATH_TOKEN.findall(dotted):
        if index:
            if not isinstance(current, list) or not -len(current) <= int(index) < len(current):
                return _MISSING
            current = current[int(index)]
        elif isinstance(current, dict) and key in current:
            current = current[key]
        else:
            return _MISSING
    return current


class _Check(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: list[str] = Field(default_factory=list)
    """For a goal's acceptance check: the steps whose results it checks. When a person (or
    a recorded revision) skips some of them, the check follows the decision
    (:func:`following`): a count's ``min`` and ``equals`` drop by one per skipped step, and
    a check whose steps were all skipped is not run."""


class _Bounds(_Check):
    min: int | None = None
    max: int | None = None
    equals: int | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> _Bounds:
        if self.min is None and self.max is None and self.equals is None:
            raise ValueError("give at least one of min, max, equals")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max}); no value passes")
        return self

    def bound_findings(self, what: str, n: int) -> list[str]:
        if self.equals is not None and n != self.equals:
            return [f"{what}: expected exactly {self.equals}, got {n}"]
        if self.min is not None and n < self.min:
            return [f"{what}: expected at least {self.min}, got {n}"]
        if self.max is not None and n > self.max:
            return [f"{what}: expected at most {self.max}, got {n}"]
        return []


class FileExists(_Check):
    """The file at ``path`` (relative to the work directory) exists."""

    check: Literal["file_exists"] = "file_exists"
    path: str


class NonEmpty(_Check):
    """A file (``path``) has bytes, or the output (or its ``field``) is not empty."""

    check: Literal["non_empty"] = "non_empty"
    path: str | None = None
    field: str | None = None


class RowCount(_Bounds):
    """The number of rows in the output's ``field`` (default ``rows``) is within bounds."""

    check: Literal["row_count"] = "row_count"
    field: str = "rows"


class ColumnsInclude(_Check):
    """The output's ``field`` (default ``columns``) contains every listed column."""

    check: Literal["columns_include"] = "columns_include"
    columns: list[str]
    field: str = "columns"


class Equals(_Check):
    """The output's ``field`` equals ``value``, or another artifact's field."""

    check: Literal["equals"] = "equals"
    field: str | None = None
    value: Any = None
    artifact: str | None = None
    artifact_field: str | None = None

    @model_validator(mode="after")
    def _has_expected(self) -> Equals:
        if "value" not in self.model_fields_set and self.artifact is None:
            raise ValueError("give the expected `value` (null is allowed) or an `artifact`")
        return self


class Matches(_Check):
    """A regular expression is found in a file's text (``path``) or the output's ``field``."""

    check: Literal["matches"] = "matches"
    pattern: str
    path: str | None = None
    field: str | None = None

    @model_validator(mode="after")
    def _compiles(self) -> Matches:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"pattern {self.pattern!r} is not a valid regex: {exc}") from exc
        return self


class FileCount(_Bounds):
    """The number of files matching ``glob`` in directory ``path`` is within bounds."""

    check: Literal["file_count"] = "file_count"
    path: str
    glob: str = "*"


class JsonPath(_Check):
    """A value at a JSON path in the output (or in the JSON file ``file``) exists / equals."""

    check: Literal["json_path"] = "json_path"
    path: str
    file: str | None = None
    equals: Any = None
    exists: bool = True


Check = Annotated[
    FileExists | NonEmpty | RowCount | ColumnsInclude | Equals | Matches | FileCount | JsonPath,
    Field(discriminator="check"),
]
CHECK_KINDS: tuple[str, ...] = (
    "file_exists",
    "non_empty",
    "row_count",
    "columns_include",
    "equals",
    "matches",
    "file_count",
    "json_path",
)
check_adapter: TypeAdapter[Check] = TypeAdapter(Check)
