"""``onward status`` (its text) without LangGraph and without pydantic.

The table ``status`` prints needs a few fields of the latest state: the status, the
goal's objective, the plan's step ids and tools, each step's record (status, attempts,
failure message, note, output summary), the artifacts' names, the run's failure, its
usage, ``resume_at`` and the questions. Those are read here as plain values from the
same checkpoint rows onward.observe.latest reads (same rules, same :class:`FullRead`
cases), onward's models kept as their stored fields (a field at its default is not
stored: onward.observe.shape has those defaults, generated from the models).
``--json`` prints every field of the view, so it is built with the models (latest.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from onward.checkpointing.format import stored_items
from onward.observe.checkpoint import (
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_PYDANTIC_V2,
    STDLIB,
    Decoder,
    FullRead,
    Seed,
    Unread,
    check_reduced,
    delta_history,
    interrupts,
    latest_checkpoint,
    stopped,
)
from onward.observe.kinds import EventKind
from onward.observe.questions import Question, of_interrupt
from onward.observe.shape import DEFAULTS as DEFAULTS
from onward.store.tables import FINISHED, Tables

READ = ("status", "goal", "plan", "steps", "artifacts", "failure", "resume_at", "usage")
"""The channels read here."""
DELTAS = ("plan", "steps", "artifacts")


@dataclass(frozen=True, slots=True)
class Model:
    """One of onward's models as stored: its class name and the fields not at defaults."""

    name: str
    fields: Mapping[str, Any]

    def get(self, name: str) -> Any:
        if name in self.fields:
            return self.fields[name]
        defaults = DEFAULTS.get(self.name, {})
        if name not in defaults:
            raise FullRead(f"{self.name}.{name} is not read here")
        return defaults[name]


@dataclass(frozen=True, slots=True)
class PlainPlan:
    version: int
    steps: list[Mapping[str, Any]]
    """Each step's stored fields (``id``, ``tool``...)."""


def _model(value: Any, name: str) -> Model:
    """A JSON item of a lazy collection (its fields without defaults), or a model."""
    if isinstance(value, Model):
        return value
    if isinstance(value, dict):
        return Model(name, value)
    raise FullRead(f"a {name} of another shape")


class PlainDecoder(Decoder):
    """The checkpoint decoder that keeps onward's models as their stored fields."""

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables.cipher, STDLIB, self._collection)

    def _ext(self, code: int, data: bytes) -> Any:
        if code in (EXT_CONSTRUCTOR_SINGLE_ARG, EXT_PYDANTIC_V2):
            tup = self._inner(data)
            module, name = tup[0], tup[1]
            if module.startswith("onward."):
                if code == EXT_CONSTRUCTOR_SINGLE_ARG:
                    return tup[2]  # an enum of onward's: its value
                if name == "RunState":
                    return Unread((tup[2],))  # a run's input (``__start__``)
                return Model(name, tup[2])
        return super()._ext(code, data)

    def _collection(self, kind: str, packed: Any, item: Any) -> Any:
        """A lazy collection (model/lazy.py's packed form) as plain items."""
        if kind == "plan":
            version, _source, steps = packed
            return PlainPlan(version, list(self._items(steps).values()))
        if kind in ("steps", "artifacts"):
            return {
                k: _model(v, "StepRecord" if kind == "steps" else "ArtifactRef")
                for k, v in self._items(packed).items()
            }
        raise ValueError(f"an onward collection of unknown kind {kind!r}")

    def _items(self, packed: Sequence[Any]) -> dict[str, Any]:
        ids, (body, offsets) = packed[0], stored_items(packed[1], packed[2])
        ends = memoryview(offsets).cast("Q")
        if len(ends) != len(ids) + 1:
            raise ValueError("a packed collection whose ids and items differ in number")
        out: dict[str, Any] = {}
        for i, key in enumerate(ids):
            found = self._inner(body[ends[i] : ends[i + 1]])
            out[key] = found
        return out


def _replace_plan(current: Any, writes: Sequence[Any]) -> Any:
    """state.replace_value on plain plans: a plan replaces it, an edit one of its steps."""
    value = current
    for w in [x for write in writes for x in (write if isinstance(write, list) else [write])]:
        if isinstance(w, Model) and w.name == "PlanEdit":
            step = w.fields["step"]
            step = step.fields if isinstance(step, Model) else step
            steps = [step if s.get("id") == step.get("id") else s for s in value.steps]
            value = PlainPlan(value.version + 1, steps)
        elif isinstance(w, PlainPlan):
            value = w
        else:
            raise FullRead("a plan write of another shape")
    return value


def _merge(current: Mapping[str, Any], writes: Sequence[Any], name: str) -> dict[str, Any]:
    merged = dict(current)
    for write in writes:
        if not isinstance(write, dict):
            raise FullRead(f"a {name} write of another shape")
        merged.update({k: _model(v, name) for k, v in write.items()})
    return merged


@dataclass(slots=True)
class PlainView:
    """What print_view reads of a run (onward.cli.render.Shown)."""

    thread_id: str
    status: Value
    objective: str
    stalled: bool
    driver: str | None
    heartbeat_at: datetime | None
    steps: list[PlainStep]
    artifacts: list[str]
    failure: Failure | None
    usage: Used
    resume_at: datetime | None
    pending: list[Question]
    paused_before: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Value:
    """An enum member by its value."""

    value: str


@dataclass(frozen=True, slots=True)
class PlainStep:
    id: str
    tool: str
    status: Value
    attempts: int
    error: str | None
    note: str | None
    output: Output | None


@dataclass(frozen=True, slots=True)
class Failure:
    message: str


@dataclass(frozen=True, slots=True)
class Output:
    summary: str


@dataclass(frozen=True, slots=True)
class Used:
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float


def view(tables: Tables, thread_id: str) -> PlainView:
    """The run as ``onward status`` prints it (or :class:`FullRead`)."""
    run = tables.run(thread_id)
    db = tables.db
    decoder = PlainDecoder(tables)
    latest = latest_checkpoint(decoder, db, thread_id)
    values, versions = latest.values, latest.versions
    check_reduced(values, versions)
    if int(values.get("schema_version", 1)) != 1:
        raise FullRead("state of another schema")
    empty = {"plan": PlainPlan(1, []), "steps": {}, "artifacts": {}}
    replay = [ch for ch in DELTAS if ch in versions and ch not in values]
    for ch, (seed, writes) in delta_history(decoder, db, thread_id, latest, replay).items():
        values[ch] = _rebuilt(ch, seed, writes, empty[ch])
    for ch in DELTAS:
        stored = values.get(ch)
        values[ch] = stored.value if isinstance(stored, Seed) else (stored or empty[ch])
    plan, records, artifacts = values["plan"], values["steps"], values["artifacts"]
    if not isinstance(plan, PlainPlan) or not isinstance(records, dict):
        raise FullRead("a plan or records of another shape")
    if not isinstance(artifacts, dict):
        raise FullRead("artifacts of another shape")
    status = values.get("status", "planning")
    goal = values.get("goal")
    failure = values.get("failure")
    usage = values.get("usage") or Model("Usage", {})
    resume_at = values.get("resume_at")
    if not isinstance(status, str) or not isinstance(goal, Model | None):
        raise FullRead("a status or goal of another shape")
    if not isinstance(failure, Model | None) or not isinstance(usage, Model):
        raise FullRead("a failure or usage of another shape")
    if not isinstance(resume_at, datetime | None):
        raise FullRead("resume_at of another shape")
    asked = interrupts(decoder, db, thread_id, latest.id)
    if asked and status not in FINISHED:
        ids = {i.id for i in asked}
        budget_stop = any(
            isinstance(i.value, dict) and i.value.get("onward", {}).get("kind") == "budget"
            for i in asked
        )
        suspended = budget_stop or any(
            e.detail.get("interrupt_id") in ids
            for e in tables.events.list(thread_id, [EventKind.RUN_SUSPENDED])
        )
        status = "suspended" if suspended else "waiting_for_human"
    if status == "running":
        raise FullRead("a running run: what it pauses before is LangGraph's next tasks")
    if stopped(status, resume_at, bool(asked)):
        raise FullRead("a stopped run: why is in its last message")
    pending: list[Question] = []
    if status in ("waiting_for_human", "suspended"):
        found = [q for i in asked for q in of_interrupt(thread_id, i.id, i.value, run.objective)]
        pending = sorted(found, key=lambda q: q.asked_at)
    steps = []
    for s in plan.steps:
        rec = records.get(s["id"]) or Model("StepRecord", {"id": s["id"]})
        fail = rec.get("failure")
        output = rec.get("output")
        steps.append(
            PlainStep(
                id=s["id"],
                tool=s["tool"],
                status=Value(rec.get("status")),
                attempts=rec.get("attempts"),
                error=_model(fail, "StepFailure").fields["message"] if fail else None,
                note=rec.get("note"),
                output=Output(_model(output, "ArtifactRef").get("summary")) if output else None,
            )
        )
    lease = tables.leases.get(thread_id)
    return PlainView(
        thread_id=thread_id,
        status=Value(status),
        objective=goal.fields["objective"] if goal else "",
        stalled=lease is not None and status not in FINISHED and tables.leases.stopped(lease),
        driver=lease.owner if lease else None,
        heartbeat_at=lease.heartbeat_at if lease else None,
        steps=steps,
        artifacts=list(artifacts),
        failure=Failure(failure.fields["message"]) if failure else None,
        usage=Used(*(usage.get(n) for n in ("calls", "input_tokens", "output_tokens", "cost"))),
        resume_at=resume_at,
        pending=pending,
    )


def _rebuilt(ch: str, stored: Any, writes: list[Any], empty: Any) -> Any:
    """latest._rebuilt for one channel, on plain values: its snapshot, then its writes."""
    seed = stored.value if isinstance(stored, Seed) else (stored or empty)
    if not writes:
        return seed
    if ch == "plan":
        return _replace_plan(seed, writes)
    return _merge(seed, writes, "StepRecord" if ch == "steps" else "ArtifactRef")
