"""Which onward types may be rebuilt from checkpoints (LangGraph's strict msgpack allowlist)."""

from __future__ import annotations

from typing import Any

from onward import checks
from onward.state import CHECKPOINT_TYPES


def checkpoint_types() -> tuple[type[Any], ...]:
    check_types = tuple(
        t
        for t in vars(checks).values()
        if isinstance(t, type) and issubclass(t, checks._Check) and t.__module__ == checks.__name__
    )
    return CHECKPOINT_TYPES + check_types
