"""Tools that run until the test lets them go, for tests/crash/test_live_status.py: a step the
test can watch while it runs, and a side effect that is sent before it waits."""

from __future__ import annotations

import time
from typing import Any

from onward import SideEffect, ToolContext, tool


def _hold(ctx: ToolContext, step: str) -> None:
    """Wait (at most 60 s) until the test writes ``go-STEP`` in the work directory."""
    ctx.path(f"started-{step}").write_text(str(ctx.attempt))
    until = time.monotonic() + 60
    while not ctx.path(f"go-{step}").exists() and time.monotonic() < until:
        time.sleep(0.02)


@tool(timeout=120)
def held(ctx: ToolContext) -> dict[str, Any]:
    """Runs until released."""
    _hold(ctx, ctx.step_id)
    return {"released": True}


@tool(side_effect=SideEffect.IDEMPOTENT, timeout=120)
def deliver(message: str, ctx: ToolContext) -> dict[str, Any]:
    """Puts ``message`` in the outbox (the effect), then runs until released."""
    with ctx.path("outbox.txt").open("a", encoding="utf-8") as f:
        f.write(message + "\n")
    _hold(ctx, ctx.step_id)
    return {"delivered": message}
