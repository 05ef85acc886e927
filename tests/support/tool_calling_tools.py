"""Tools the tool-calling tests offer a model: ``lookup`` (pure: reads facts.json in the
work directory), ``save_note`` (idempotent: writes a file once per idempotency key, and
with ``TC_KILL_INSIDE=save_note`` SIGKILLs its process inside its first call, after the
write and before onward records it) and ``publish`` (unsafe: it needs approval). Every
effect is a line in ``effects.jsonl``, so a test counts them."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from onward import ToolContext, tool

EFFECTS = "effects.jsonl"


def _effects(ctx: ToolContext) -> list[dict[str, Any]]:
    path = ctx.workdir / EFFECTS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _append(ctx: ToolContext, entry: dict[str, Any]) -> None:
    with (ctx.workdir / EFFECTS).open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


@tool
def lookup(key: str, ctx: ToolContext) -> dict[str, Any]:
    """Look a fact up by key."""
    facts = ctx.path("facts.json")
    values = json.loads(facts.read_text()) if facts.exists() else {}
    return {"key": key, "value": values.get(key, "unknown")}


@tool(side_effect="idempotent")
def save_note(path: str, text: str, ctx: ToolContext) -> dict[str, Any]:
    """Save a note to a file in the work directory."""
    target = ctx.path(path)
    if not any(e["key"] == ctx.idempotency_key for e in _effects(ctx)):
        target.write_text(text, encoding="utf-8")
        _append(ctx, {"tool": "save_note", "key": ctx.idempotency_key, "path": path})
    marker = ctx.workdir / "killed-inside"
    if os.environ.get("TC_KILL_INSIDE") == "save_note" and not marker.exists():
        marker.write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)
    return {"path": path, "bytes": len(text)}


@tool(side_effect="unsafe")
def publish(title: str, ctx: ToolContext) -> dict[str, Any]:
    """Publish a title (an unsafe effect: it asks a person first)."""
    _append(ctx, {"tool": "publish", "key": ctx.idempotency_key, "title": title})
    return {"published": title}
