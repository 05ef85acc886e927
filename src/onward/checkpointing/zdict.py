"""The preset dictionary of ``msgpack-z2`` blobs: a skeleton of what onward's checkpoints
and task writes hold, in msgpack bytes as the serializer writes them.

zlib finds repeats only in the dictionary and the blob itself. A checkpoint repeats, every
time, the same channel names, model paths and 32-digit channel versions, in the same
order; given the bytes as they appear (type markers, lengths and all), not just the names
(``msgpack-z1``'s dictionary), a no-op step's checkpoint deflates to under half of its
``z1`` size. The values are placeholders: the dictionary is built from literals only, not
from onward's models, so a model that changes cannot change it (tests/store/test_serde.py pins
its hash; a change needs a new blob type). Most-used bytes come last (the nearest
matches are the cheapest).
"""

from __future__ import annotations

from typing import Any

import ormsgpack

STATE = "onward.model.state"
VALIDATE = "model_validate_json"
ISO = "2026-01-01T00:00:00.000000+00:00"
VERSION = "0" * 31 + "2"


def _ext(code: int, *items: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(list(items)))


def _model(name: str, fields: dict[str, Any], module: str = STATE) -> ormsgpack.Ext:
    """A pydantic model as LangGraph's serializer stores it (extension 5)."""
    return _ext(5, module, name, fields, VALIDATE)


def _enum(name: str, value: str) -> ormsgpack.Ext:
    return _ext(0, STATE, name, value)


def _when() -> ormsgpack.Ext:
    return _ext(3, "datetime", "datetime", ISO, "fromisoformat")


def _record(status: str) -> dict[str, Any]:
    ref = _model(
        "ArtifactRef",
        {
            "name": "step:s1",
            "uri": "artifact://sha256/" + "0" * 64,
            "sha256": "0" * 64,
            "size": 1,
            "summary": "",
            "body": "",
        },
    )
    fields = {
        "id": "s1",
        "status": _enum("StepStatus", status),
        "attempts": 1,
        "output": ref,
        "started_at": _when(),
        "ended_at": _when(),
    }
    return {"s1": _model("StepRecord", fields)}


def _task() -> ormsgpack.Ext:
    step = _model("PlanStep", {"id": "s1", "tool": "", "args": {}, "depends_on": ["s0"]})
    task = _model(
        "ExecuteTask",
        {
            "step": step,
            "record": _model("StepRecord", {"id": "s1"}),
            "workdir": "",
            "wave_in_state": True,
        },
    )
    return _ext(1, "langgraph.types", "Send", ["execute", task])


_CHANNELS = [
    "__start__",
    "schema_version",
    "messages",
    "workdir",
    "goal",
    "plan",
    "steps",
    "artifacts",
    "budget",
    "tool_modules",
    "max_concurrency",
    "wave",
    "waiting",
    "decisions",
    "approvals",
    "plan_approval",
    "policy",
    "started_at",
    "resume_at",
    "usage",
    "budget_warnings",
    "status",
    "failure",
    "branch:to:plan",
    "__pregel_tasks",
    "branch:to:verify",
]
"""The channels in the order a plan run's checkpoint lists them (LangGraph's order of
first write); the channels written more than once by then end in 3."""
_TWICE = {"messages", "usage", "status", "branch:to:plan"}


def _checkpoint(*, executing: bool) -> dict[str, Any]:
    """The checkpoint after execute (a task for verify pending) or after verify."""
    values: dict[str, Any] = {
        "schema_version": 1,
        "workdir": "",
        "goal": _model("Goal", {"objective": ""}),
        "budget": _model("Budget", {}),
        "tool_modules": [],
        "max_concurrency": 4,
        "wave": 1,
        "waiting": {},
        "plan_approval": None,
        "policy": _model("RunPolicy", {}, "onward.policies.run"),
        "started_at": _when(),
        "resume_at": None,
        "usage": _model("Usage", {}),
        "budget_warnings": [],
        "status": _enum("RunStatus", "running"),
        "failure": None,
        "__pregel_tasks": [_task()] if executing else [],
    }
    if not executing:
        values["branch:to:verify"] = None
    return {
        "v": 4,
        "ts": ISO,
        "id": "1f000000-0000-6000-8000-000000000000",
        "channel_values": values,
        "channel_versions": {
            name: VERSION[:-1] + ("3" if name in _TWICE else "2") for name in _CHANNELS
        },
        "versions_seen": {
            "__input__": {},
            "__start__": {"__start__": VERSION[:-1] + "1"},
            "plan": {"branch:to:plan": VERSION},
            "execute": {},
            "verify": {"branch:to:verify": VERSION},
        },
        "updated_channels": ["__pregel_tasks", "steps"]
        if executing
        else ["branch:to:verify", "steps"],
    }


def build(names: bytes) -> bytes:
    """``names`` (the ``z1`` dictionary: every model's field names), then a task write, the
    two step-record writes, and the checkpoints of verify and execute."""
    pieces = [
        [_task()],
        _record("produced"),
        _record("done"),
        _checkpoint(executing=False),
        _checkpoint(executing=True),
    ]
    return names + b"".join(ormsgpack.packb(p) for p in pieces)
