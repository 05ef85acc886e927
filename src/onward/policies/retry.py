"""RetryPolicy: how often and how patiently a transient failure is tried again."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator

from onward.policies.durations import as_duration, fix_durations


def _from_plan(value: Any) -> Any:
    # A plan may write ``90s`` or ``5m``; numbers (seconds) and ISO 8601 (``PT5M``) go to
    # pydantic's own timedelta parsing.
    if isinstance(value, str) and not value.strip().upper().startswith("P"):
        return as_duration(value, "delay")
    return value


Delay = Annotated[timedelta, BeforeValidator(_from_plan)]


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter and a cap, per tool (``@tool(retry=...)``) or per
    step (``retry:`` in a plan). The delay before attempt ``n + 1`` is drawn uniformly from
    ``[0, min(max_delay, initial_delay * backoff ** (n - 1))]`` (AWS "full jitter").

    Delays are timedeltas; a plan may write them as seconds (``initial_delay: 2``) or as
    ``90s`` / ``5m``, and checkpoints of releases that held seconds still load."""

    max_attempts: int = 3
    """Attempts in all (the first one included) before a transient failure is non-convergent."""
    initial_delay: Delay = timedelta(seconds=1)
    """The cap of the first backoff."""
    backoff: float = 2.0
    """Factor by which the cap grows per attempt."""
    max_delay: Delay = timedelta(minutes=5)
    """The cap never grows past this."""
    jitter: bool = True
    """Full jitter (spreads retries of many runs); False waits the cap exactly."""
    same_failure_limit: int = 3
    """The same failure signature this many times in a row is non-convergent, whatever its
    class: retrying or replanning into the same wall is not progress."""

    def __post_init__(self) -> None:
        fix_durations(self, "initial_delay", "max_delay")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.backoff < 1:
            raise ValueError("backoff must be >= 1")
        if self.same_failure_limit < 2:
            raise ValueError("same_failure_limit must be at least 2")

    def cap(self, failed_attempts: int) -> timedelta:
        """The largest delay after ``failed_attempts`` failures (1 = after the first)."""
        n = max(failed_attempts, 1)
        ceiling = self.max_delay.total_seconds()
        try:
            grown = self.initial_delay.total_seconds() * self.backoff ** (n - 1)
        except OverflowError:  # a long streak with a steep backoff: the cap is reached anyway
            grown = ceiling
        return timedelta(seconds=min(grown, ceiling))

    def delay(self, failed_attempts: int, rng: random.Random) -> timedelta:
        cap = self.cap(failed_attempts).total_seconds()
        return timedelta(seconds=rng.uniform(0.0, cap) if self.jitter else cap)


DEFAULT_RETRY = RetryPolicy()
