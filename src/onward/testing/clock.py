"""A clock the test moves: pass ``clock=fake.clock, sleep=fake.sleep`` to ``Onward``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeTime:
    """Clock and sleep in one: sleeping moves the clock, so backoff costs no real time, and
    ``advance`` stands for time that passes outside the run (a person thinking it over)."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self.now = start
        self.slept: list[float] = []

    def clock(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
