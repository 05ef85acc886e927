"""Stable names of the types onward puts into checkpoints: the tag registry.

A checkpoint names each onward value's type by a tag, never by where the class lives
today. A tag is a ``(namespace, name)`` pair, written where LangGraph's msgpack format
puts a module and a class name; it never changes once a store holds it. The tags of the
types stored before tags existed are the module paths those types were first stored
under (``onward.model.state.StepRecord``), so every store written since the package moved
into folders is already tagged, and LangGraph's own serializer still reads it. A new type
gets a tag of its own choosing (e.g. ``onward.Ledger.v1``).

:data:`TAGS` says where each tag's class lives now. Moving a class is editing its line
there: stores keep naming the tag. Renaming one: keep the tag, point it at the new name.
:data:`LEGACY` maps the names older stores wrote (before the package moved into folders,
2026-12) to tags, so they load without aliasing modules in ``sys.modules``.

Nothing here imports a class until it is asked for: the LangGraph-free readers resolve
tags too, and :class:`~onward.model.run_state.RunState` needs LangGraph.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

Tag = tuple[str, str]
"""(namespace, name), as a checkpoint stores it."""


def _at(home: str, namespace: str, *names: str) -> dict[Tag, tuple[str, str]]:
    """Tags ``namespace.NAME`` whose classes are ``NAME`` in module ``home``."""
    return {(namespace, name): (home, name) for name in names}


_STATE = "onward.model.state"
_CHECKS = "onward.verification.checks"
_RUN = "onward.policies.run"
_RETRY = "onward.policies.retry"

TAGS: Mapping[Tag, tuple[str, str]] = {
    **_at(_STATE, _STATE, "StepStatus", "RunStatus", "FailureClass", "SideEffect"),
    **_at(_STATE, _STATE, "PlanSource", "RunFailureKind", "Goal", "PlanStep", "PlanSteps"),
    **_at(_STATE, _STATE, "Plan", "ArtifactRef", "StepRecords", "ArtifactRefs", "StepFailure"),
    **_at(_STATE, _STATE, "InnerCall", "StepRecord", "RunFailure", "Budget", "ExecuteTask"),
    **_at(_STATE, _STATE, "Waiting", "DecisionAction", "Decision", "WaitKind", "Approval"),
    **_at(_STATE, _STATE, "PlanEdit", "ApproveTask", "AskBatch", "NoteTask", "Usage"),
    **_at("onward.model.run_state", _STATE, "RunState"),
    **_at(_RUN, _RUN, "RunPolicy", "Deadline", "ExpiryAction"),
    **_at(_RETRY, _RETRY, "RetryPolicy"),
    **_at("onward.model.checks", _CHECKS, "FileExists", "NonEmpty", "RowCount"),
    **_at("onward.model.checks", _CHECKS, "ColumnsInclude", "Equals", "Matches"),
    **_at("onward.model.checks", _CHECKS, "FileCount", "JsonPath"),
}
"""Every tag, and (module, class name) of the class it names today."""

MOVED = {
    "onward.state": _STATE,
    "onward.checks": _CHECKS,
    "onward.policy": _RUN,
    "onward.retry": _RETRY,
}
"""Module names stores wrote before the package moved into folders → the tag namespaces."""
LEGACY: Mapping[Tag, Tag] = {
    (old, name): (new, name) for old, new in MOVED.items() for ns, name in TAGS if ns == new
}
"""Names stores wrote before the package moved into folders (tests/store/golden/v1 and v2) →
their tags."""


def tag_of(stored: Tag) -> Tag | None:
    """The tag a stored (module, name) pair names (itself, or a legacy name's), or None
    when it is not onward's."""
    if stored in TAGS:
        return stored
    return LEGACY.get(stored)


@cache
def resolve(tag: Tag) -> type[Any]:
    """The class of ``tag`` (``KeyError``: not a tag)."""
    module, name = TAGS[tag]
    found: type[Any] = getattr(importlib.import_module(module), name)
    return found


@cache
def tags_by_class() -> Mapping[type[Any], Tag]:
    """Each tagged class → its tag (imports every class, RunState's LangGraph too)."""
    return {resolve(tag): tag for tag in TAGS}


def stored_names() -> Iterable[Tag]:
    """Every (module, name) pair a store may name for onward's types: the tags and the
    legacy names (the serializer's allowlist)."""
    return (*TAGS, *LEGACY)


def classes(light: bool = False) -> dict[Tag, type[Any]]:
    """Every stored name (a tag or a legacy name) → its class; ``light``: without
    RunState, which needs LangGraph (the LangGraph-free readers)."""
    found = {tag: resolve(tag) for tag in TAGS if not (light and tag[1] == "RunState")}
    found.update({old: found[tag] for old, tag in LEGACY.items() if tag in found})
    return found
