"""Prices per million tokens, to turn usage into cost (``ONWARD_PRICES`` overrides:
``{"my-model": [input_per_million, output_per_million]}``)."""

from __future__ import annotations

from onward.settings import settings

PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "scripted": (0.0, 0.0),
}


def prices() -> dict[str, tuple[float, float]]:
    """The price table with ONWARD_PRICES' entries (a malformed ONWARD_PRICES is a
    UsageError saying how to write it, see :mod:`onward.settings`)."""
    return {**PRICES, **settings().prices}


def cost_of(model: str, input_tokens: int, output_tokens: int) -> float:
    """Cost in the table's currency. A dated model name (``gpt-4o-mini-2024-07-18``) is
    priced as its base name; a model missing from the table costs 0 (add it to
    ONWARD_PRICES)."""
    table = prices()
    name = model
    while name not in table and "-" in name:
        name = name.rsplit("-", 1)[0]
    per_in, per_out = table.get(name, (0.0, 0.0))
    return (input_tokens * per_in + output_tokens * per_out) / 1_000_000
