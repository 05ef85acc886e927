"""Durations: how onward reads them from people (``90s``, ``6h``) and holds them (``timedelta``).

Every policy field that is a length of time is a :class:`~datetime.timedelta`. A plain
number is taken as seconds where one is handed over (a plan's ``retry:`` block, a checkpoint
written by a release whose policies held floats), and turned into a timedelta once, when the
policy is made. Light on purpose: the CLI's start-up and the store's read path import it.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from onward.errors import UsageError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

MAX_DURATION = timedelta(days=36500)
"""The longest duration onward takes (100 years): a deadline past it would overflow the
dates it is added to."""


def parse_duration(text: str, *, negative_ok: bool = False) -> timedelta:
    """``90s``, ``30m``, ``6h``, ``1d``, ``2w`` (or a number of seconds), at most
    :data:`MAX_DURATION`. Infinite, NaN and (unless ``negative_ok``: a caller that says
    why itself) negative durations are a :class:`UsageError`."""
    t = str(text).strip().lower()
    try:
        number, unit = (t[:-1], _UNITS[t[-1]]) if t and t[-1] in _UNITS else (t, 1)
        seconds = float(number) * unit
    except ValueError:
        raise UsageError(f"{text!r} is not a duration; write e.g. 90s, 30m, 6h, 1d or 2w") from None
    if math.isnan(seconds) or math.isinf(seconds):
        raise UsageError(f"{text!r} is not a duration; write a finite one, e.g. 90s, 6h or 2w")
    if seconds < 0 and not negative_ok:
        raise UsageError(f"duration {text!r} is negative; write one of 0 or more, e.g. 6h")
    if abs(seconds) > MAX_DURATION.total_seconds():
        raise UsageError(
            f"duration {text!r} is too long; onward takes at most {MAX_DURATION.days}d (100 years)"
        )
    return timedelta(seconds=seconds)


def as_duration(value: Any, name: str) -> timedelta:
    """``value`` as a timedelta of 0 or more: a timedelta, a number of seconds, or a string
    :func:`parse_duration` reads. Anything else, or a negative, is a :class:`ValueError`
    naming the field (a policy's constructor raises it, as it does for its other fields)."""
    if isinstance(value, timedelta):
        out = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or abs(value) > MAX_DURATION.total_seconds():
            raise ValueError(f"{name} must be a finite duration of at most 100 years")
        out = timedelta(seconds=value)
    elif isinstance(value, str):
        try:
            out = parse_duration(value, negative_ok=True)
        except UsageError as exc:
            raise ValueError(f"{name}: {exc}") from None
    else:
        raise ValueError(f"{name} must be a duration (a timedelta, or seconds), not {value!r}")
    if out < timedelta(0):
        raise ValueError(f"{name} must be 0 or more, not {out.total_seconds():g} s")
    return out


def fix_durations(policy: object, *names: str) -> None:
    """In a frozen dataclass's ``__post_init__``: make each named field a timedelta."""
    for name in names:
        object.__setattr__(policy, name, as_duration(getattr(policy, name), name))
