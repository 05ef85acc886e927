"""Tools for the human-in-the-loop tests: every effect and every compensation call is
counted in a JSON-lines file of the run's work directory."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from onward import SideEffect, ToolContext, tool
from onward.policies.run import Deadline


def _append(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def rows(workdir: Path, name: str) -> list[dict[str, Any]]:
    path = workdir / name
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _refund(key: str, args: Any, result: Any) -> dict[str, Any]:
    """Idempotent by the effect's key: a repeated call finds its refund and does nothing."""
    workdir = Path(result["workdir"])
    _append(workdir / "refund_calls.jsonl", {"key": key, "to": args.to})
    if not any(r["key"] == key for r in rows(workdir, "refunds.jsonl")):
        _append(workdir / "refunds.jsonl", {"key": key, "to": args.to, "amount": args.amount})
    return {"refunded": args.amount}


@tool(side_effect=SideEffect.UNSAFE, compensate=_refund)
def pay(amount: int, to: str, ctx: ToolContext) -> dict[str, Any]:
    """Pay someone (unsafe: needs approval by default)."""
    _append(ctx.path("payments.jsonl"), {"key": ctx.idempotency_key, "to": to, "amount": amount})
    return {"paid": amount, "to": to, "workdir": str(ctx.workdir)}


@tool(
    side_effect=SideEffect.IDEMPOTENT,
    tags=["send"],
    deadline=Deadline(expire_after=timedelta(minutes=30)),
)
def send(to: str, text: str, ctx: ToolContext) -> dict[str, Any]:
    """Send a message (tagged send: needs approval; its approvals expire after 30 minutes)."""
    _append(ctx.path("sent.jsonl"), {"key": ctx.idempotency_key, "to": to, "text": text})
    return {"sent": True}


@tool
def slow(seconds: float = 0.0, value: int = 0) -> dict[str, int]:
    """A pure step that takes a while."""
    time.sleep(seconds)
    return {"value": value}


@tool(side_effect=SideEffect.IDEMPOTENT)
def record(label: str, ctx: ToolContext, seconds: float = 0.0) -> dict[str, Any]:
    """An idempotent effect: every call is counted in ``calls.jsonl``; the effect itself
    (one line in ``effects.jsonl``) happens once per idempotency key."""
    _append(ctx.path("calls.jsonl"), {"key": ctx.idempotency_key, "label": label})
    if not any(r["key"] == ctx.idempotency_key for r in rows(ctx.workdir, "effects.jsonl")):
        _append(ctx.path("effects.jsonl"), {"key": ctx.idempotency_key, "label": label})
    time.sleep(seconds)
    return {"label": label}


@tool(side_effect=SideEffect.IDEMPOTENT)
def deliver(label: str, ctx: ToolContext) -> dict[str, Any]:
    """Fails (a deterministic error: a person is asked) on the first call for its label;
    later calls deliver, once per idempotency key (counted in ``deliveries.jsonl``)."""
    tried = rows(ctx.workdir, "deliver_calls.jsonl")
    _append(ctx.path("deliver_calls.jsonl"), {"key": ctx.idempotency_key, "label": label})
    if not any(r["label"] == label for r in tried):
        raise ValueError(f"the address for {label!r} is unknown")
    if not any(r["key"] == ctx.idempotency_key for r in rows(ctx.workdir, "deliveries.jsonl")):
        _append(ctx.path("deliveries.jsonl"), {"key": ctx.idempotency_key, "label": label})
    return {"delivered": label}
