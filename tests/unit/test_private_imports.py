"""The boundary for dependencies' internals (``onward/_compat/``): no module outside it
imports a dependency's private module or name, and each private path it keeps gives
what its public fallback gives, so the fallback a user on an untested release gets is
the same encoding, not a guess."""

from __future__ import annotations

import ast
import sys
import uuid
from datetime import UTC, date, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import ormsgpack
import pytest

from onward import _compat
from onward._compat import langgraph_checkpoint as lgc
from tests.support.paths import ROOT

SRC = ROOT / "src"
BOUNDARY = Path("onward") / "_compat"

PENDING: dict[Path, str] = {}
"""Modules still importing a private name, each with what replaces it. A module leaves
this list when it is fixed (:func:`test_each_pending_module_still_needs_its_entry`)."""


def third_party(top: str) -> bool:
    return top not in sys.stdlib_module_names and top not in ("onward", "__future__")


def private_imports(source: str) -> list[str]:
    """Every import in ``source`` of a third-party module whose path has a component
    starting with ``_`` (``langgraph._internal``, ``typer._click``), or of a name starting
    with ``_`` from one (``from x.y import _helper``); dunders (``__version__``) are public."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            paths = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            base = node.module.split(".")
            paths = [[*base, alias.name] for alias in node.names]
        else:
            continue
        for path in paths:
            if third_party(path[0]) and any(private(part) for part in path[1:]):
                found.append(".".join(path))
    return found


def private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def offenders() -> dict[Path, list[str]]:
    out = {}
    for path in sorted((SRC / "onward").rglob("*.py")):
        rel = path.relative_to(SRC)
        if BOUNDARY in rel.parents:
            continue
        found = private_imports(path.read_text(encoding="utf-8"))
        if found:
            out[rel] = found
    return out


def test_no_module_outside_the_boundary_imports_a_dependencys_private_module() -> None:
    found = {path: names for path, names in offenders().items() if path not in PENDING}
    assert not found, f"move these behind onward/_compat/ (with a version guard): {found}"


def test_each_pending_module_still_needs_its_entry() -> None:
    assert set(PENDING) <= set(offenders()), "a fixed module is still listed in PENDING"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from typer._click import Context", ["typer._click.Context"]),
        ("import langgraph._internal._serde as s", ["langgraph._internal._serde"]),
        ("from langgraph.pregel import _executor", ["langgraph.pregel._executor"]),
        ("from x.jsonplus import _option as OPT", ["x.jsonplus._option"]),
        ("def f():\n    from psycopg import _cursor\n", ["psycopg._cursor"]),
        ("from langgraph.types import Send", []),
        ("from importlib import _bootstrap", []),  # the standard library's own
        ("from onward.model import _private", []),  # onward's own
        ("from pydantic import __version__", []),
        ("from . import _sibling", []),
    ],
)
def test_the_check_finds_private_imports_and_only_those(source: str, expected: list[str]) -> None:
    assert private_imports(source) == expected


# -- the version guard ---------------------------------------------------------------------


def test_the_guard_reads_the_installed_release() -> None:
    from importlib.metadata import version

    found = _compat.release("langgraph-checkpoint")
    assert found is not None
    assert ".".join(map(str, found)) == version("langgraph-checkpoint").split("+")[0]
    assert _compat.tested("langgraph-checkpoint", found, (*found[:-1], found[-1] + 1))
    assert not _compat.tested("langgraph-checkpoint", (0,), found)
    assert _compat.release("no-such-distribution-here") is None
    assert not _compat.tested("no-such-distribution-here", (0,), (99,))


# -- each private path against its public fallback ----------------------------------------


class Colour(Enum):
    RED = "red"


def samples() -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    from onward.model.state import StepRecord, StepStatus

    return [
        AIMessage("hi", id="m1"),
        HumanMessage("there"),
        Colour.RED,
        StepStatus.DONE,
        uuid.UUID(int=7),
        date(2026, 12, 6),
        datetime(2026, 12, 6, 9, 0, tzinfo=UTC),
        {1, 2, 3},
        frozenset({"a"}),
        lgc.DeltaSnapshot([1, {"a": Colour.RED}]),
        StepRecord(id="s", status=StepStatus.DONE),
    ]


def test_the_public_msgpack_default_writes_langgraphs_bytes() -> None:
    from langgraph.checkpoint.serde.jsonplus import _msgpack_default

    for value in samples():
        private = ormsgpack.packb([value], default=_msgpack_default, option=lgc.MSGPACK_OPTIONS)
        public = ormsgpack.packb(
            [value], default=lgc.public_msgpack_default, option=lgc.MSGPACK_OPTIONS
        )
        assert public == private, value


def test_a_checkpoint_encoded_through_the_fallback_is_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """onward's serializer with the public fallback in place of LangGraph's private hook
    (what a release outside the tested range gets) writes the same checkpoint."""
    from onward.checkpointing import serde

    value = {"records": samples(), "when": datetime(2026, 1, 1, tzinfo=UTC)}
    plain = serde.checkpoint_serde(None)
    before = plain.dumps_typed(value)
    monkeypatch.setattr(serde, "_msgpack_default", lgc.public_msgpack_default)
    assert plain.dumps_typed(value) == before
    assert plain.loads_typed(before) == plain.loads_typed(plain.dumps_typed(value))


def test_the_unencodable_is_refused_by_the_fallback_as_by_langgraph() -> None:
    with pytest.raises(TypeError):
        ormsgpack.packb(object(), default=lgc.public_msgpack_default)


def test_the_delta_snapshot_class_is_langgraphs() -> None:
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    assert lgc.DeltaSnapshot is _DeltaSnapshot


def test_the_msgpack_options_are_langgraphs() -> None:
    from langgraph.checkpoint.serde.jsonplus import _option

    assert _option == lgc.MSGPACK_OPTIONS


def test_on_the_tested_releases_the_private_paths_are_used() -> None:
    """CI installs the lowest and the newest allowed releases: both inside the guard."""
    from langgraph.checkpoint.serde.jsonplus import _msgpack_default

    assert lgc.TESTED
    assert lgc.msgpack_default is _msgpack_default
    assert lgc.TESTED_SQLITE
    assert lgc.SQLITE_DELTA is not None


def test_the_core_message_allowlist_is_the_one_langgraph_adds() -> None:
    from langgraph._internal._serde import curated_core_allowlist

    from onward.checkpointing.serde import core_message_allowlist

    assert core_message_allowlist() == curated_core_allowlist()
