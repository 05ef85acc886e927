"""Tools that return values with no JSON form (and one that returns a JSON-able model), for
tests/unit/test_tool_outputs.py. Each appends to ``calls.txt`` so a test can count calls."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from onward import SideEffect, ToolContext, tool


def _count(ctx: ToolContext) -> None:
    with ctx.path("calls.txt").open("a", encoding="utf-8") as f:
        f.write(f"{ctx.step_id}\n")


class Thing:
    """An object with no JSON form (its repr differs from run to run)."""


class Quote(BaseModel):
    text: str
    at: datetime


@tool
def returns_object(ctx: ToolContext) -> Any:
    """Returns a plain object."""
    _count(ctx)
    return Thing()


@tool
def returns_set(ctx: ToolContext) -> Any:
    """Returns a dict holding a set."""
    _count(ctx)
    return {"tags": {"a", "b"}}


@tool
def returns_datetime(ctx: ToolContext) -> Any:
    """Returns a list holding a datetime."""
    _count(ctx)
    return [1, datetime(2026, 1, 2, tzinfo=UTC)]


@tool
def returns_model(ctx: ToolContext) -> Any:
    """Returns a pydantic model (converted to JSON)."""
    _count(ctx)
    return Quote(text="ship it", at=datetime(2026, 1, 2, tzinfo=UTC))


@tool(side_effect=SideEffect.IDEMPOTENT)
def stamps_and_returns_object(ctx: ToolContext) -> Any:
    """A side effect whose return value has no JSON form."""
    _count(ctx)
    return Thing()
