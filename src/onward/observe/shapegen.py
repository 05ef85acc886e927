"""Writes onward.observe.shape: the stored shape of a run, read from ``RunState``'s own metadata.

The LangGraph-free readers (observe.checkpoint, plain, latest, questions) cannot import
``RunState`` (it declares its channels with LangGraph's types, and ``onward status`` must
not load LangGraph), so they read its shape from a generated module instead of copies:
which channels are deltas (and the empty value each starts from), which fold writes with
a reducer, the defaults of the model fields a plain read meets (a field at its default is
not stored), and LangGraph's msgpack extension codes. ``python -m onward.observe.shapegen``
rewrites shape.py; tests/unit/test_reader_shape.py fails while it differs from :func:`render`,
so adding a field or a channel to ``RunState`` cannot be forgotten by the readers.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any

PLAIN_MODELS = ("StepRecord", "ArtifactRef", "Usage", "Plan")
"""The models observe.plain keeps as their stored fields (their defaults go in shape.py)."""
EXT_CODES = (
    "EXT_CONSTRUCTOR_SINGLE_ARG",
    "EXT_CONSTRUCTOR_POS_ARGS",
    "EXT_CONSTRUCTOR_KW_ARGS",
    "EXT_METHOD_SINGLE_ARG",
    "EXT_PYDANTIC_V2",
    "EXT_DELTA_SNAPSHOT",
)
"""LangGraph's msgpack extension codes the readers decode."""

HEADER = '''"""The stored shape of a run, GENERATED from the metadata of ``RunState``: do not edit.

Rewrite it with ``python -m onward.observe.shapegen`` (see that module); a test fails
while it is stale. Read by the LangGraph-free readers (observe.checkpoint, plain, latest).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
'''


def channels(state: type[Any]) -> tuple[dict[str, str], list[str]]:
    """``state``'s delta channels (name → the class of the empty value each starts from)
    and its other reducer channels, from the ``Annotated`` metadata of its fields."""
    from langgraph.channels.delta import DeltaChannel

    empty = state()
    deltas: dict[str, str] = {}
    reduced: list[str] = []
    for name, info in state.model_fields.items():
        for meta in info.metadata:
            if isinstance(meta, DeltaChannel):
                deltas[name] = type(getattr(empty, name)).__name__
            elif callable(meta):
                reduced.append(name)
    return deltas, reduced


def defaults(model: type[Any]) -> dict[str, Any]:
    """The fields of ``model`` with a plain default (an enum's by value); fields whose
    default is a factory (lists, maps, collections) are left to the full read."""
    found: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if info.default_factory is not None:
            continue
        value = info.default
        if isinstance(value, Enum):
            value = value.value
        if value is None or isinstance(value, str | int | float | bool):
            found[name] = value
    return found


def render(state: type[Any] | None = None) -> str:
    """The text of shape.py for ``state`` (``RunState`` unless given)."""
    from langgraph.checkpoint.serde import jsonplus

    from onward.model import state as models

    deltas, reduced = channels(state or models.RunState)
    lines = [HEADER]
    lines += [f"{code} = {getattr(jsonplus, code)!r}" for code in EXT_CODES]
    lines.append("")
    lines.append("DELTA_EMPTY: Mapping[str, str] = {")
    lines += [f"    {_q(name)}: {_q(cls)}," for name, cls in sorted(deltas.items())]
    lines.append("}")
    lines.append('"""The delta channels and the class of the empty value each starts from."""')
    lines.append("DELTA_CHANNELS = frozenset(DELTA_EMPTY)")
    lines.append("REDUCED = frozenset(")
    lines.append("    {")
    lines += [f"        {_q(name)}," for name in sorted(reduced)]
    lines.append("    }")
    lines.append(")")
    lines.append('"""The reducer channels that are not deltas."""')
    lines.append("DEFAULTS: Mapping[str, Mapping[str, Any]] = {")
    for model in sorted(PLAIN_MODELS):
        lines.append(f"    {_q(model)}: {{")
        for name, value in sorted(defaults(getattr(models, model)).items()):
            lines.append(f"        {_q(name)}: {_q(value)},")
        lines.append("    },")
    lines.append("}")
    lines.append('"""The plain defaults of the models observe.plain reads, by class name."""')
    return "\n".join(lines) + "\n"


def _q(value: Any) -> str:
    """``value`` as ruff formats a literal (strings in double quotes)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def main() -> None:
    """Rewrite shape.py next to this module."""
    target = Path(__file__).with_name("shape.py")
    target.write_text(render())
    print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
