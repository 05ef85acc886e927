"""Prices per million tokens, to turn usage into cost (``ONWARD_PRICES`` overrides:
``{"my-model": [input_per_million, output_per_million]}``; in Python, :func:`add_price`).

A model missing from the table costs 0, so a cost budget cannot stop it: a run started
with ``max_cost`` and such a model is warned about (:func:`unpriced_warning`)."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

from onward.errors import UnpricedModelWarning, UsageError
from onward.observe.kinds import EventKind
from onward.settings import settings

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from onward.observe.events import EventLog

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


def add_price(model: str, input_per_million: float, output_per_million: float) -> None:
    """Price ``model`` in this process (what an ONWARD_PRICES entry does, from Python):
    ``add_price("llama3", 0, 0)`` says a local model is free, so a cost budget knows."""
    for value in (input_per_million, output_per_million):
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"a price is a number of dollars per million tokens >= 0, not {value}")
    PRICES[model] = (float(input_per_million), float(output_per_million))


def price_of(model: str) -> tuple[float, float] | None:
    """(input, output) per million tokens; a dated model name (``gpt-4o-mini-2024-07-18``)
    is priced as its base name; None when the table has no entry."""
    table = prices()
    name = model
    while name not in table and "-" in name:
        name = name.rsplit("-", 1)[0]
    return table.get(name)


def cost_of(model: str, input_tokens: int, output_tokens: int) -> float:
    """Cost in the table's currency; a model missing from the table costs 0 (add it to
    ONWARD_PRICES)."""
    per_in, per_out = price_of(model) or (0.0, 0.0)
    return (input_tokens * per_in + output_tokens * per_out) / 1_000_000


def unpriced_warning(model: str, max_cost: float | None) -> str | None:
    """What to tell a user who set a cost budget for a model without a price, or None."""
    if max_cost is None or price_of(model) is not None:
        return None
    return (
        f"the model {model!r} has no price, so its calls cost 0 and the cost budget "
        f"(max_cost {max_cost:g}) cannot stop the run; price it with "
        f"ONWARD_PRICES='{{\"{model}\": [in_per_million, out_per_million]}}' "
        "(or onward.llm.usage.add_price), or budget tokens (--max-tokens) instead"
    )


def warn_unpriced(
    model: BaseChatModel | None, max_cost: float | None, events: EventLog, thread_id: str
) -> None:
    """At a run's start: an :class:`UnpricedModelWarning` and a ``budget_warning`` event
    (marker ``unpriced_model``) when its cost budget cannot count this model's calls."""
    from onward.llm.models import model_name

    text = None if model is None else unpriced_warning(model_name(model), max_cost)
    if text is None:
        return
    events.record(thread_id, EventKind.BUDGET_WARNING, {"marker": "unpriced_model", "text": text})
    warnings.warn(text, UnpricedModelWarning, stacklevel=3)
