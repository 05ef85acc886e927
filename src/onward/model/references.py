"""Artifact references in step args: a string value ``${name}`` or ``${name.field[0]}``.

A reference is replaced by the named artifact's value (or a part of it) just
before the step runs, after the artifact body's sha256 has been verified.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from onward.model.checks import _MISSING, lookup

_REF = re.compile(r"^\$\{([A-Za-z_][\w-]*)((?:\.[^.\[\]]+|\[-?\d+\])*)\}$")


def parse(value: Any) -> tuple[str, str] | None:
    """``(artifact name, dotted path)`` when ``value`` is a reference, else None."""
    if isinstance(value, str) and (m := _REF.match(value.strip())):
        return m.group(1), m.group(2).lstrip(".")
    return None


def walk(args: Any, where: str = "args") -> Iterator[tuple[str, str, str]]:
    """Every reference in (nested) args as ``(location, name, path)``."""
    if isinstance(args, dict):
        for k, v in args.items():
            yield from walk(v, f"{where}.{k}")
    elif isinstance(args, list):
        for i, v in enumerate(args):
            yield from walk(v, f"{where}[{i}]")
    elif (ref := parse(args)) is not None:
        yield where, ref[0], ref[1]


def names(args: Any) -> set[str]:
    return {name for _, name, _ in walk(args)}


def resolve(args: Any, value_of: Callable[[str], Any]) -> Any:
    """Replace every reference with the artifact's value; KeyError names a missing field."""
    if isinstance(args, dict):
        return {k: resolve(v, value_of) for k, v in args.items()}
    if isinstance(args, list):
        return [resolve(v, value_of) for v in args]
    ref = parse(args)
    if ref is None:
        return args
    name, path = ref
    value = lookup(value_of(name), path)
    if value is _MISSING:
        raise KeyError(f"artifact {name!r} has no field {path!r} (referenced as {args})")
    return value
