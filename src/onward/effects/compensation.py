"""Compensation (saga): undo a cancelled run's completed side effects, newest first.

Each completed effect whose tool has a ``compensate`` function is undone through the
same ledger as the effect itself, under its own key: a compensation that completed is
never run again, and one interrupted by a crash is called again with the same key
(compensations must be idempotent, as idempotent tools are). Running it again after
a crash therefore finishes the job without repeating any finished undo.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from onward import faults
from onward.effects.ledger import Effect, EffectStatus, Ledger
from onward.observe.events import EventLog
from onward.observe.kinds import EventKind
from onward.tools.registry import Registry


class CompensationStatus(StrEnum):
    DONE = "done"
    """Compensated now."""
    ALREADY = "already"
    """Compensated by an earlier cancel (not run again)."""
    FAILED = "failed"
    """The compensate function raised; run the cancel again to retry it."""
    UNKNOWN = "unknown"
    """The effect's own outcome is unknown (started, never recorded): check it by hand."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Compensation:
    step_id: str
    tool: str
    effect_key: str
    status: CompensationStatus
    error: str | None = None


def compensation_key(effect_key: str) -> str:
    return hashlib.sha256(f"compensate:{effect_key}".encode()).hexdigest()


def compensable_effects(ledger: Ledger, thread_id: str) -> list[Effect]:
    """Completed effects with an undo, in the order to undo them (last completed first)."""
    done = [
        e
        for e in ledger.for_thread(thread_id)
        if e.compensable and e.status is EffectStatus.COMPLETED
    ]
    return sorted(done, key=lambda e: (e.completed_at or e.started_at, e.started_at), reverse=True)


def compensate_run(
    thread_id: str, ledger: Ledger, registry: Registry, events: EventLog
) -> list[Compensation]:
    out: list[Compensation] = [
        _result(
            e,
            CompensationStatus.UNKNOWN,
            "the effect was started but its outcome is unknown; check by hand whether it "
            "happened, and undo it by hand if it did",
        )
        for e in ledger.for_thread(thread_id)
        if e.compensable and e.status is EffectStatus.STARTED
    ]
    for effect in compensable_effects(ledger, thread_id):
        ckey = compensation_key(effect.key)
        existing = ledger.claim(
            ckey,
            thread_id=thread_id,
            step_id=effect.step_id,
            tool=f"{effect.tool}.compensate",
            args={"compensates": effect.key},
            compensable=False,
        )
        if existing is not None and existing.status is EffectStatus.COMPLETED:
            out.append(_result(effect, CompensationStatus.ALREADY))
            continue
        if existing is not None:
            ledger.again(ckey)  # a crash (or a failure) stopped it mid-way: call it again
        spec = registry.get(effect.tool)
        try:
            if spec is None or spec.compensate is None:
                raise LookupError(
                    f"tool {effect.tool!r} (with its compensate function) is not loaded in this "
                    "process; pass its --tools module"
                )
            result: Any = spec.compensate(
                effect.key, spec.args_model.model_validate(effect.args), effect.result
            )
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            events.record(
                thread_id,
                EventKind.COMPENSATION_FAILED,
                {"step_id": effect.step_id, "tool": effect.tool, "key": effect.key, "error": error},
            )
            out.append(_result(effect, CompensationStatus.FAILED, error))
            continue
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json")
        faults.reach(faults.Fault.AFTER_COMPENSATE, effect.step_id)
        ledger.complete(ckey, result)
        events.record(
            thread_id,
            EventKind.COMPENSATED,
            {"step_id": effect.step_id, "tool": effect.tool, "key": effect.key},
        )
        faults.reach(faults.Fault.AFTER_COMPENSATION_RECORD, effect.step_id)
        out.append(_result(effect, CompensationStatus.DONE))
    return out


def _result(effect: Effect, status: CompensationStatus, error: str | None = None) -> Compensation:
    return Compensation(
        step_id=effect.step_id, tool=effect.tool, effect_key=effect.key, status=status, error=error
    )
