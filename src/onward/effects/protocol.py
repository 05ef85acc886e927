"""The side-effect protocol: how execute calls a tool so its effect happens at most once.

Pure tools are just called (re-running them is harmless). For idempotent and
unsafe tools, the effect ledger decides, by the key sha256(thread, step, args):

* no row: claim it as ``started`` (committed first), call, record ``completed``;
* ``completed``: return the recorded result, do not call;
* ``started`` without a result (a process died mid-effect, or the call failed in a
  way that may have acted, such as a timeout): idempotent tools are called again
  with the same key; unsafe tools are reconciled if they can be, else
  ``OutcomeUnknown`` stops the run for a human;
* a call that raised a ``ToolError`` saying the effect did not happen is marked
  ``retry``: the next attempt calls again straight away.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from onward import faults
from onward.effects.ledger import EffectStatus, Ledger, effect_key
from onward.errors import OutcomeUnknown, ToolError
from onward.model.state import SideEffect
from onward.tools.output import json_output
from onward.tools.registry import ToolContext, ToolSpec


def perform(
    spec: ToolSpec,
    args: BaseModel,
    ctx: ToolContext,
    ledger: Ledger | None,
    call: Callable[[ToolSpec, BaseModel, ToolContext], Any],
    key: str | None = None,
) -> tuple[Any, str | None]:
    """Run the tool under the protocol; returns (JSON result, idempotency key or None).
    ``key``: the effect's key when the caller derives it (a tool-calling step's calls: the
    step's key and the call's index), else sha256(thread, step, args)."""
    if spec.side_effect is SideEffect.PURE:
        return _called(spec, args, ctx, call), None
    if ledger is None:
        raise RuntimeError(
            f"tool {spec.name!r} has side effects but no effect ledger is configured; "
            "run it through onward's store (Onward / the CLI)"
        )
    args_json = args.model_dump(mode="json")
    key = key or effect_key(ctx.thread_id, ctx.step_id, args_json)
    ctx = dataclasses.replace(ctx, idempotency_key=key)
    existing = ledger.claim(
        key,
        thread_id=ctx.thread_id,
        step_id=ctx.step_id,
        tool=spec.name,
        args=args_json,
        compensable=spec.compensate is not None,
    )
    if existing is not None:
        if existing.status is EffectStatus.COMPLETED:
            return existing.result, key  # done before a crash: never twice
        if existing.status is EffectStatus.SKIPPED:
            raise OutcomeUnknown(key, existing.started_at, "the effect was skipped by a human")
        if spec.side_effect is SideEffect.UNSAFE and existing.status is EffectStatus.STARTED:
            if spec.reconcile is None:
                raise OutcomeUnknown(
                    key,
                    existing.started_at,
                    f"outcome unknown: {spec.name} was started at "
                    f"{existing.started_at.isoformat()} by a process that died, and the tool "
                    "has no reconcile probe. Check whether it happened, then "
                    f"`onward resolve {ctx.thread_id} --step {ctx.step_id} --as done|retry|skip`",
                )
            try:
                found = spec.reconcile(key, args)
            except Exception as exc:
                raise OutcomeUnknown(
                    key,
                    existing.started_at,
                    f"outcome unknown: {spec.name} was interrupted and its reconcile probe "
                    f"could not tell ({type(exc).__name__}: {exc}). Check, then "
                    f"`onward resolve {ctx.thread_id} --step {ctx.step_id} --as done|retry|skip`",
                ) from exc
            if found.happened:
                ledger.complete(key, found.result)
                return found.result, key
        ledger.again(key)
    try:
        result = _called(spec, args, ctx, call)
    except ToolError as exc:
        if not exc.maybe_happened:
            # The tool knows the effect did not happen (e.g. the service answered 503): the
            # next attempt may call again without a reconcile probe.
            ledger.allow_retry(key)
        raise
    faults.reach(faults.Fault.AFTER_EFFECT, ctx.step_id)
    ledger.complete(key, result)
    faults.reach(faults.Fault.AFTER_RECORD, ctx.step_id)
    return result, key


def _called(
    spec: ToolSpec,
    args: BaseModel,
    ctx: ToolContext,
    call: Callable[[ToolSpec, BaseModel, ToolContext], Any],
) -> Any:
    faults.journal("start", ctx.step_id, spec.name, ctx.attempt, ctx.thread_id)
    output = call(spec, args, ctx)
    faults.journal("end", ctx.step_id, spec.name, ctx.attempt, ctx.thread_id)
    return json_output(output, spec.name, acted=spec.side_effect is not SideEffect.PURE)
