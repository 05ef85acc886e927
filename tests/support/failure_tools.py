"""Fault-injecting tools for the failure-routing tests. Each counts its calls in
``calls.jsonl`` of the run's work directory, so "how often was it called" is read off
real side effects."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from onward import DeterministicToolError, ToolContext, TransientToolError, tool
from onward.model.state import StepFailure
from onward.policies.retry import RetryPolicy
from onward.store.breakers import BreakerPolicy

QUICK = RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.05)


def _count(ctx: ToolContext, tool: str) -> int:
    """Record this call; returns how many calls this step has had (this one included)."""
    path = ctx.path("calls.jsonl")
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "step": ctx.step_id, "attempt": ctx.attempt}) + "\n")
    return sum(
        1 for line in path.read_text().splitlines() if json.loads(line)["step"] == ctx.step_id
    )


def calls(workdir: Path, step: str | None = None) -> list[dict[str, Any]]:
    path = workdir / "calls.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return [r for r in rows if step is None or r["step"] == step]


@tool(retry=QUICK)
def flaky(times: int, ctx: ToolContext) -> dict[str, int]:
    """Fails (transient) the first ``times`` calls of its step, then succeeds."""
    n = _count(ctx, "flaky")
    if n <= times:
        raise TransientToolError(f"flaky: call {n} of step {ctx.step_id} failed on purpose")
    return {"calls": n}


@tool(retry=RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.02))
def always_503(ctx: ToolContext) -> dict[str, int]:
    """A service that never recovers."""
    n = _count(ctx, "always_503")
    raise TransientToolError(f"service answered 503 (call {n})")


@tool
def always_value_error(x: int, ctx: ToolContext) -> dict[str, int]:
    """A deterministic bug: retrying cannot help."""
    _count(ctx, "always_value_error")
    raise ValueError(f"cannot handle x={x}")


@tool(fallback="good_parse")
def bad_parse(text: str, ctx: ToolContext) -> dict[str, str]:
    _count(ctx, "bad_parse")
    raise DeterministicToolError("bad_parse cannot parse this", hint="use good_parse")


@tool
def good_parse(text: str, ctx: ToolContext) -> dict[str, str]:
    _count(ctx, "good_parse")
    return {"parsed": text.upper()}


@tool(fallback="right_output")
def wrong_output(n: int, ctx: ToolContext) -> dict[str, int]:
    """Returns the wrong value; the step's check catches it."""
    _count(ctx, "wrong_output")
    return {"value": -n}


@tool
def right_output(n: int, ctx: ToolContext) -> dict[str, int]:
    _count(ctx, "right_output")
    return {"value": n}


def _bump(args: dict[str, Any], failure: StepFailure) -> dict[str, Any]:
    return {**args, "n": int(args["n"]) + 1}


@tool(fix_args=_bump)
def stubborn(n: int, ctx: ToolContext) -> dict[str, int]:
    """Its fix_args rule changes the args, but the output stays wrong."""
    _count(ctx, "stubborn")
    return {"value": -1}


@tool(timeout=0.5, retry=RetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.02))
def hang(hang_calls: int, ctx: ToolContext) -> dict[str, int]:
    """Hangs (far past its timeout) on the first ``hang_calls`` calls of its step."""
    n = _count(ctx, "hang")
    if n <= hang_calls:
        time.sleep(3600)
    return {"calls": n}


@tool(
    side_effect="idempotent",
    service="svc",
    breaker=BreakerPolicy(consecutive=3, min_calls=10, failure_rate=0.3, cooldown=1.0),
    retry=RetryPolicy(max_attempts=50, initial_delay=0.01, max_delay=0.05, same_failure_limit=1000),
)
def ping(url: str, n: int, ctx: ToolContext) -> dict[str, Any]:
    """POST to the loopback service (idempotent by key); 429/5xx are transient."""
    request = urllib.request.Request(
        url,
        data=json.dumps({"n": n}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": ctx.idempotency_key or ""},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return {"status": response.status, "n": n}
    except urllib.error.HTTPError as err:
        if err.code == 429 or err.code >= 500:
            raise TransientToolError(f"POST answered {err.code}") from None
        raise


@tool
def slow(seconds: float = 0.0, value: int = 0) -> dict[str, int]:
    time.sleep(seconds)
    return {"value": value}


@tool(service="one-at-a-time", max_concurrent=1)
def exclusive(seconds: float, ctx: ToolContext) -> dict[str, float]:
    """Records when it ran, to show calls to its service never overlap."""
    start = time.monotonic()
    time.sleep(seconds)
    end = time.monotonic()
    with ctx.path("spans.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"start": start, "end": end}) + "\n")
    return {"start": start, "end": end}


@tool(fallback="rested")
def tired(n: int, ctx: ToolContext) -> dict[str, int]:
    """Returns the wrong value; its fallback calls a service that may be resting."""
    _count(ctx, "tired")
    return {"value": -n}


@tool(service="resting", breaker=BreakerPolicy(consecutive=1, cooldown=3600.0))
def rested(n: int, ctx: ToolContext) -> dict[str, int]:
    _count(ctx, "rested")
    return {"value": n}
