"""RetryPolicy: how often and how patiently a transient failure is tried again."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter and a cap, per tool (``@tool(retry=...)``) or per
    step (``retry:`` in a plan). The delay before attempt ``n + 1`` is drawn uniformly from
    ``[0, min(max_delay, initial_delay * backoff ** (n - 1))]`` (AWS "full jitter")."""

    max_attempts: int = 3
    """Attempts in all (the first one included) before a transient failure is non-convergent."""
    initial_delay: float = 1.0
    """Seconds: the cap of the first backoff."""
    backoff: float = 2.0
    """Factor by which the cap grows per attempt."""
    max_delay: float = 300.0
    """Seconds: the cap never grows past this."""
    jitter: bool = True
    """Full jitter (spreads retries of many runs); False waits the cap exactly."""
    same_failure_limit: int = 3
    """The same failure signature this many times in a row is non-convergent, whatever its
    class: retrying or replanning into the same wall is not progress."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_delay < 0 or self.max_delay < 0 or self.backoff < 1:
            raise ValueError("delays must be >= 0 and backoff >= 1")
        if self.same_failure_limit < 2:
            raise ValueError("same_failure_limit must be at least 2")

    def cap(self, failed_attempts: int) -> float:
        """The largest delay after ``failed_attempts`` failures (1 = after the first)."""
        n = max(failed_attempts, 1)
        return min(self.max_delay, self.initial_delay * self.backoff ** (n - 1))

    def delay(self, failed_attempts: int, rng: random.Random) -> float:
        cap = self.cap(failed_attempts)
        return rng.uniform(0.0, cap) if self.jitter else cap


DEFAULT_RETRY = RetryPolicy()
