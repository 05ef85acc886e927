"""What a tool may return: a JSON value, so its artifact is the same bytes on every run.

A step's output is stored as canonical JSON, checked by the verifier, referenced by later
steps (``${name.field}``) and recorded in the effect ledger. A pydantic model is converted
with ``model_dump(mode="json")`` and a tuple becomes a list; anything else that JSON has no
form for (an object, a set, a ``datetime``, ``bytes``, a float NaN, a dict with non-string
keys) fails the step as ``deterministic`` at that step, naming the type, where it was found
and what to return instead, instead of being stored as its ``repr()``.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

from onward.errors import DeterministicToolError

_SCALARS = (str, int, bool, type(None))
_DEPTH = 200
"""Deeper than any sensible output; deeper than this is refused, not recursed into."""

_ADVICE = {
    "datetime": "return value.isoformat()",
    "date": "return value.isoformat()",
    "set": "return sorted(value) or list(value)",
    "frozenset": "return sorted(value) or list(value)",
    "bytes": "return value.decode() (or base64 text)",
    "Decimal": "return str(value) or float(value)",
    "EgressResponse": "return response.as_json() (status, url, content type, body text)",
}


def json_output(value: Any, tool: str, *, acted: bool = False) -> Any:
    """``value`` as a JSON value (a pydantic model dumped), or DeterministicToolError
    (``acted``: the call had an effect, so the error says it may have happened)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    problem = _problem(value, "output", 0)
    if problem is None:
        return value
    where, found = problem
    advice = _ADVICE.get(found, "return a dict, list, str, number, bool or None")
    raise DeterministicToolError(
        f"{tool} returned {_article(found)} at {where}, which has no JSON form; "
        "a step's output must be JSON",
        hint=f"{advice}; a pydantic model is converted with model_dump(mode='json')",
        maybe_happened=acted,
    )


def _problem(value: Any, where: str, depth: int) -> tuple[str, str] | None:
    """(path, type name) of the first value that is not JSON, or None."""
    if depth > _DEPTH:
        return where, "value nested deeper than 200 levels"
    if isinstance(value, _SCALARS):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, f"float {value}")
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _problem(item, f"{where}[{i}]", depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} key {key!r}", f"{type(key).__name__} dict key"
            found = _problem(item, f"{where}[{key!r}]", depth + 1)
            if found is not None:
                return found
        return None
    return where, type(value).__name__


def _article(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"
