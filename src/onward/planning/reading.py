"""Reading a declared plan file (YAML, or JSON, which is YAML) within the plan limits.

JSON is read by the JSON parser when the file is JSON: it decodes the surrogate pairs
``json.dump`` writes for characters past U+FFFF (YAML's reader takes each half alone;
:mod:`onward.planning.limits` pairs them again for YAML). A plan nested too deeply for
either parser, too large, or not UTF-8 is a :class:`~onward.errors.PlanValidationError`
that says so: never a parser's recursion error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from onward.errors import PlanProblem, PlanValidationError, UsageError
from onward.planning.limits import MAX_DEPTH, MAX_PLAN_BYTES


def read_plan_file(path: str | Path) -> Any:
    """The parsed document of a plan file (validate it with ``parse_declared``)."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"plan file {path} not found; check the --plan path")
    source = str(path)
    size = p.stat().st_size
    if size > MAX_PLAN_BYTES:
        _refuse(
            source,
            f"{size:,} bytes; a plan file holds at most {MAX_PLAN_BYTES // 2**20} MiB: split "
            "the work into several runs",
        )
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        _refuse(source, f"not UTF-8 text ({exc}); save the plan as UTF-8")
    except OSError as exc:
        raise UsageError(f"cannot read plan file {path}: {exc}") from None
    return parse_plan_text(text, source)


def parse_plan_text(text: str, source: str = "plan") -> Any:
    """A plan document's text (YAML or JSON) → its value."""
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                pass  # YAML flow syntax, or broken: YAML's reader says where
        return yaml.safe_load(text)
    except RecursionError:
        _refuse(source, f"nested more than {MAX_DEPTH} levels deep (too deep to read); flatten it")
    except yaml.YAMLError as exc:
        _refuse(source, f"not valid YAML/JSON: {exc}")


def _refuse(source: str, message: str) -> Any:
    raise PlanValidationError([PlanProblem("(file)", message)], source=source) from None
