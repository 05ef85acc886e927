"""Deterministic checks: the verifier's library.

A check is data (onward.model.checks: it lives in plans and checkpoints; its kinds are
re-exported here) plus one pure evaluation function here. Each check returns a list of
findings; an empty list is a pass. A check targets the step's output value by default
(``field`` picks a part of it with a dotted path such as ``rules[0].count``) or a file
under the run's work directory (``path``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from onward.errors import DeterministicToolError
from onward.model.checks import _MISSING as _MISSING
from onward.model.checks import (
    CHECK_KINDS,
    Check,
    ColumnsInclude,
    Equals,
    FileCount,
    FileExists,
    JsonPath,
    Matches,
    NonEmpty,
    RowCount,
    check_adapter,
    lookup,
)
from onward.model.checks import _Bounds as _Bounds
from onward.model.checks import _Check as _Check
from onward.policies import confine
from onward.store import chunks


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

__all__ = [
    "CHECK_KINDS",
    "Check",
    "CheckContext",
    "ColumnsInclude",
    "Equals",
    "FileCount",
    "FileExists",
    "JsonPath",
    "Matches",
    "NonEmpty",
    "RowCount",
    "arg_names",
    "artifact_names",
    "check_adapter",
    "evaluate",
    "following",
    "lookup",
    "same_value",
    "with_args",
]
