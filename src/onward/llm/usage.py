"""Prices per million tokens, to turn usage into cost (``ONWARD_PRICES`` overrides:
``{"my-model": [input_per_million, output_per_million]}``)."""

from __future__ import annotations

import json
import os

from onward.errors import UsageError

PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "scripted": (0.0, 0.0),
}


def prices() -> dict[str, tuple[float, float]]:
    """The price table; a malformed ONWARD_PRICES is a UsageError saying how to write it."""
    table = dict(PRICES)
    raw = os.environ.get("ONWARD_PRICES")
    if raw:
        try:
            for name, pair in json.loads(raw).items():
                table[str(name)] = (float(pair[0]), float(pair[1]))
        except (ValueError, TypeError, AttributeError, IndexError, KeyError):
            raise UsageError(
                f"ONWARD_PRICES={raw!r} is not valid: write a JSON object of model → "
                '[input_per_million, output_per_million], e.g. {"my-model": [0.5, 1.5]}'
            ) from None
    return table


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
