"""Deterministic checks: the verifier's library.

A check is data (it lives in plans and checkpoints) plus one pure evaluation
function. Each check returns a list of findings; an empty list is a pass. A
check targets the step's output value by default (``field`` picks a part of
it with a dotted path such as ``rules[0].count``) or a file under the run's
work directory (``path``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from onward.errors import DeterministicToolError
from onward.policies import confine
from onward.store import chunks

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


class CheckContext:
    """What checks may look at besides the output: files and other artifacts.

    ``confined`` (the run's policy ``confine_paths``): every path a check names must stay
    inside ``workdir`` (onward.policies.confine); a path that leaves it fails the check with a
    finding that says so and nothing about the file.
    """

    def __init__(
        self, workdir: Path, artifact_value: Callable[[str], Any], *, confined: bool = False
    ) -> None:
        self.workdir = workdir
        self.artifact_value = artifact_value
        self.confined = confined

    def file(self, path: str) -> Path:
        return confine.locate(self.workdir, path, confined=self.confined)

    def glob(self, directory: Path, pattern: str) -> list[Path]:
        return confine.glob(self.workdir, directory, pattern, confined=self.confined)


_ARG = re.compile(r"\$\{args\.([A-Za-z_][\w-]*)\}")
"""``${args.NAME}`` in a check's text: the value of the step's arg NAME as it ran."""


def arg_names(check: Check) -> set[str]:
    """The step args a check refers to (``${args.NAME}``), so validation can make sure the
    step has them."""
    return {m for v in _strings(check.model_dump()) for m in _ARG.findall(v)}


def with_args(check: Check, args: dict[str, Any]) -> Check:
    """The check with every ``${args.NAME}`` replaced by that arg's value in ``args`` (the
    args that ran, an approved edit included), so a check follows an edited path. A
    reference to an arg the args lack stays as written (validation refuses such plans)."""
    if not arg_names(check):
        return check

    def sub(value: Any) -> Any:
        if isinstance(value, str):
            whole = _ARG.fullmatch(value)
            if whole and whole.group(1) in args:
                return args[whole.group(1)]
            return _ARG.sub(lambda m: str(args.get(m.group(1), m.group(0))), value)
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return value

    return type(check).model_validate(sub(check.model_dump()))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def artifact_names(check: Check) -> list[str]:
    """Artifacts a check reads, so plan validation can make sure they are produced upstream."""
    return [check.artifact] if isinstance(check, Equals) and check.artifact else []


def following(check: Check, skipped: Collection[str]) -> Check | None:
    """``check`` as it applies once the steps in ``skipped`` were skipped by decision (see
    ``steps``); None when there is nothing left for it to check."""
    gone = sum(1 for s in check.steps if s in skipped)
    if not gone:
        return check
    if isinstance(check, _Bounds):
        fewer = {
            bound: max(value - gone, 0)
            for bound in ("min", "equals")
            if (value := getattr(check, bound)) is not None
        }
        return check.model_copy(update=fewer)
    return None if gone == len(check.steps) else check


def evaluate(check: Check, output: Any, ctx: CheckContext) -> list[str]:
    """Run one check; return its findings (empty when it passes)."""
    try:
        return _EVALUATORS[type(check)](check, output, ctx)
    except DeterministicToolError as exc:  # a path that leaves a confined run's workdir
        return [f"{check.check}: {exc}"]
    except Exception as exc:  # a broken check must fail the step, not the run
        return [f"{check.check}: could not evaluate ({type(exc).__name__}: {exc})"]


def _field(output: Any, field: str | None, kind: str) -> tuple[Any, list[str]]:
    value = lookup(output, field)
    if value is _MISSING:
        return None, [f"{kind}: output has no field {field!r}"]
    return value, []


def _file_exists(c: FileExists, _out: Any, ctx: CheckContext) -> list[str]:
    return [] if ctx.file(c.path).is_file() else [f"file_exists: {c.path} does not exist"]


def _non_empty(c: NonEmpty, out: Any, ctx: CheckContext) -> list[str]:
    if c.path is not None:
        f = ctx.file(c.path)
        if not f.is_file():
            return [f"non_empty: {c.path} does not exist"]
        return [] if f.stat().st_size > 0 else [f"non_empty: {c.path} is empty"]
    value, missing = _field(out, c.field, "non_empty")
    if missing:
        return missing
    return [] if value not in (None, "", [], {}) else [f"non_empty: {c.field or 'output'} is empty"]


def _row_count(c: RowCount, out: Any, _ctx: CheckContext) -> list[str]:
    value, missing = _field(out, c.field, "row_count")
    if missing:
        return missing
    count = chunks.row_count(value)  # a list, or rows an artifact stores in chunks
    if count is None:
        return [f"row_count: {c.field} is not a list of rows"]
    return c.bound_findings(f"row_count of {c.field}", count)


def _columns_include(c: ColumnsInclude, out: Any, _ctx: CheckContext) -> list[str]:
    value, missing = _field(out, c.field, "columns_include")
    if missing:
        return missing
    if not isinstance(value, list):
        return [f"columns_include: {c.field} is not a list of column names"]
    have = {str(v).lower() for v in value}
    absent = [col for col in c.columns if col.lower() not in have]
    return [f"columns_include: missing column(s) {', '.join(absent)}"] if absent else []


def _equals(c: Equals, out: Any, ctx: CheckContext) -> list[str]:
    value, missing = _field(out, c.field, "equals")
    if missing:
        return missing
    expected = c.value
    if c.artifact:
        expected = lookup(ctx.artifact_value(c.artifact), c.artifact_field)
        if expected is _MISSING:
            return [f"equals: artifact {c.artifact!r} has no field {c.artifact_field!r}"]
    if not same_value(value, expected):
        return [f"equals: {c.field or 'output'} is {value!r}, expected {expected!r}"]
    return []


def same_value(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1`` (Python's ``==`` says it is); 3 still equals 3.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return bool(a == b)


def _matches(c: Matches, out: Any, ctx: CheckContext) -> list[str]:
    if c.path is not None:
        f = ctx.file(c.path)
        if not f.is_file():
            return [f"matches: {c.path} does not exist"]
        text, where = f.read_text(encoding="utf-8", errors="replace"), c.path
    else:
        value, missing = _field(out, c.field, "matches")
        if missing:
            return missing
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        where = c.field or "output"
    return [] if re.search(c.pattern, text) else [f"matches: {c.pattern!r} not found in {where}"]


def _file_count(c: FileCount, _out: Any, ctx: CheckContext) -> list[str]:
    d = ctx.file(c.path)
    if not d.is_dir():
        return [f"file_count: {c.path} is not a directory"]
    n = sum(1 for p in ctx.glob(d, c.glob) if p.is_file())
    return c.bound_findings(f"file_count of {c.path}/{c.glob}", n)


def _json_path(c: JsonPath, out: Any, ctx: CheckContext) -> list[str]:
    doc = out
    if c.file is not None:
        f = ctx.file(c.file)
        if not f.is_file():
            return [f"json_path: {c.file} does not exist"]
        doc = json.loads(f.read_text(encoding="utf-8"))
    value = lookup(doc, c.path)
    if value is _MISSING:
        return [f"json_path: {c.path} not found"] if c.exists else []
    if not c.exists:
        return [f"json_path: {c.path} exists but should not"]
    if c.equals is not None and not same_value(value, c.equals):
        return [f"json_path: {c.path} is {value!r}, expected {c.equals!r}"]
    return []


_EVALUATORS: dict[type[Any], Callable[[Any, Any, CheckContext], list[str]]] = {
    FileExists: _file_exists,
    NonEmpty: _non_empty,
    RowCount: _row_count,
    ColumnsInclude: _columns_include,
    Equals: _equals,
    Matches: _matches,
    FileCount: _file_count,
    JsonPath: _json_path,
}
