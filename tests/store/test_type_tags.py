"""Checkpoints name onward's types by stable tags (onward.checkpointing.tags), not by the
modules their classes live in: a class can move without a data migration, and stores that
named the old module paths still load, without aliasing modules in sys.modules."""

from __future__ import annotations

import sys
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_PYDANTIC_V2,
)
from langgraph.types import Interrupt, Send
from pydantic import BaseModel, ConfigDict

from onward.checkpointing import tags
from onward.checkpointing.format import stored_name
from onward.checkpointing.serde import checkpoint_serde, checkpoint_types
from onward.model.checks import Equals
from onward.model.run_state import RunState
from onward.model.state import Budget, ExecuteTask, PlanStep, StepStatus

TAGGED_BEFORE_TAGS = {
    "onward.model.state": 30,
    "onward.verification.checks": 8,
    "onward.policies.run": 3,
    "onward.policies.retry": 1,
}
"""How many tags each namespace held when tags were introduced: a stored tag is never
removed or renamed (a store may hold it)."""


def ext(code: int, *items: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(list(items)))


def load(value: Any) -> Any:
    return checkpoint_serde(None).loads_typed(("msgpack", ormsgpack.packb(value)))


def test_every_checkpointed_class_has_one_tag_and_every_tag_a_class() -> None:
    by_class = tags.tags_by_class()
    assert len(by_class) == len(tags.TAGS)  # no class under two tags
    assert set(by_class) == set(checkpoint_types())
    counts: dict[str, int] = {}
    for namespace, _ in tags.TAGS:
        counts[namespace] = counts.get(namespace, 0) + 1
    assert counts == TAGGED_BEFORE_TAGS


def test_a_value_names_its_tag_not_the_module_its_class_lives_in() -> None:
    serde = checkpoint_serde(None)
    step = PlanStep(id="s", tool="t", checks=[Equals(field="n", value=1)])
    kind, blob = serde.dumps_typed({"step": step, "state": RunState()})
    assert kind == "msgpack"
    assert Equals.__module__ == "onward.model.checks"
    assert b"onward.model.checks" not in blob
    assert b"onward.verification.checks" in blob
    assert b"onward.model.run_state" not in blob
    assert serde.loads_typed((kind, blob)) == {"step": step, "state": RunState()}


class MovedBudget(BaseModel):
    """Budget, as if its class had moved here (the same fields)."""

    model_config = ConfigDict(frozen=True)
    max_steps: int | None = None


def test_a_moved_class_reads_what_was_stored_before_the_move() -> None:
    serde = checkpoint_serde(None)
    stored = serde.dumps_typed({"budget": Budget(max_steps=3)})
    with _moved():
        loaded = serde.loads_typed(stored)["budget"]
    assert type(loaded) is MovedBudget
    assert loaded.max_steps == 3


class _moved:
    """The registry's line for Budget's tag pointing at MovedBudget: a move."""

    def __enter__(self) -> None:
        self._patch = pytest.MonkeyPatch()
        self._patch.setitem(tags.TAGS, ("onward.model.state", "Budget"), (__name__, "MovedBudget"))  # type: ignore[arg-type]
        tags.resolve.cache_clear()

    def __exit__(self, *exc: object) -> None:
        self._patch.undo()
        tags.resolve.cache_clear()


@pytest.mark.parametrize("old", ["onward.state", "onward.model.state"])
def test_names_older_stores_wrote_still_load_without_module_aliases(old: str) -> None:
    task = ext(
        EXT_PYDANTIC_V2,
        old,
        "ExecuteTask",
        {
            "step": {"id": "s", "tool": "t"},
            "record": {"id": "s", "status": ext(0, old, "StepStatus", "done")},
            "workdir": ".",
        },
        "model_validate_json",
    )
    check = ext(EXT_PYDANTIC_V2, "onward.checks", "Equals", {"value": 1}, "model_validate_json")
    value = {
        "send": ext(EXT_CONSTRUCTOR_POS_ARGS, "langgraph.types", "Send", ["execute", task]),
        "status": ext(EXT_CONSTRUCTOR_SINGLE_ARG, old, "StepStatus", "running"),
        "check": check,
        "question": ext(
            EXT_CONSTRUCTOR_KW_ARGS,
            "langgraph.types",
            "Interrupt",
            {"value": {"status": ext(0, old, "StepStatus", "done")}, "id": "i1"},
        ),
    }
    loaded = load(value)
    assert loaded["question"] == Interrupt(value={"status": StepStatus.DONE}, id="i1")
    assert isinstance(loaded["send"], Send)
    assert isinstance(loaded["send"].arg, ExecuteTask)
    assert loaded["send"].arg.step.id == "s"
    assert loaded["send"].arg.record.status is StepStatus.DONE
    assert loaded["status"] is StepStatus.RUNNING
    assert loaded["check"] == Equals(value=1)
    assert "onward.state" not in sys.modules
    assert "onward.checks" not in sys.modules


def test_a_type_outside_the_registry_is_left_to_langgraph() -> None:
    # Not onward's: LangGraph's strict allowlist blocks it (its fields come back).
    blocked = ext(EXT_PYDANTIC_V2, "os", "system", {"command": "true"}, "model_validate_json")
    assert load({"v": blocked}) == {"v": {"command": "true"}}


@pytest.mark.parametrize(
    ("payload", "name"),
    [
        (ormsgpack.packb(["onward.model.state", "Budget", {}]), ("onward.model.state", "Budget")),
        (ormsgpack.packb(["x" * 40, "y" * 300, 1]), ("x" * 40, "y" * 300)),
        (ormsgpack.packb({"module": "x"}), None),
        (ormsgpack.packb([1, "Budget"]), None),
        (ormsgpack.packb(["onward"]), None),
        (b"\x92\xa3\xff\xfe\xfd\xa1x", None),
        (b"", None),
    ],
)
def test_the_stored_name_is_read_from_the_payload_head_or_not_at_all(
    payload: bytes, name: tuple[str, str] | None
) -> None:
    assert stored_name(payload) == name


def test_the_public_extension_hook_reads_what_the_private_one_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Off the tested langgraph-checkpoint releases the serializer reads through the public
    # loads_typed: the same values, tags, legacy names and allowlist included.
    from onward._compat import langgraph_checkpoint

    value = {
        "budget": Budget(max_steps=3),
        "status": ext(EXT_CONSTRUCTOR_SINGLE_ARG, "onward.state", "StepStatus", "done"),
        "blocked": ext(EXT_PYDANTIC_V2, "os", "system", {"command": "true"}, "x"),
        "send": Send("execute", {"n": 1}),
    }
    blob = checkpoint_serde(None).dumps_typed(value)
    private = checkpoint_serde(None).loads_typed(blob)
    monkeypatch.setattr(langgraph_checkpoint, "TESTED", False)
    public = checkpoint_serde(None).loads_typed(blob)
    assert public == private
    assert public["status"] is StepStatus.DONE
    assert public["blocked"] == {"command": "true"}
