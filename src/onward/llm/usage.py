"""Prices per million tokens, to turn usage into cost (``ONWARD_PRICES`` overrides:
``{"my-model": [input_per_million, output_per_million]}``)."""

from __future__ import annotations

import json
import os

PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "scripted": (0.0, 0.0),
}


def prices() -> dict[str, tuple[float, float]]:
    table = dict(PRICES)
    raw = os.environ.get("ONWARD_PRICES")
    if raw:
        for name, pair in json.loads(raw).items():
            table[name] = (float(pair[0]), float(pair[1]))
    return table


def cost_of(model: str, input_tokens: int, output_tokens: int) -> float:
    """Cost in the table's currency; a model missing from the table costs 0 (say so by
    adding it to ONWARD_PRICES)."""
    per_in, per_out = prices().get(model, (0.0, 0.0))
    return (input_tokens * per_in + output_tokens * per_out) / 1_000_000
