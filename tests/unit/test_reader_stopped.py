"""The one rule every reader of a run applies to a cancelled run (observe.checkpoint.stopped):
saved suspended with no time to resume at and no question, its last message says why."""

from __future__ import annotations

from datetime import UTC, datetime

from onward.model.state import RunStatus
from onward.observe.checkpoint import stopped


def test_a_cancelled_run_is_suspended_with_no_time_and_no_question() -> None:
    assert stopped("suspended", None, asked=False)
    assert stopped(RunStatus.SUSPENDED, None, asked=False), "the enum reads the same"


def test_a_run_waiting_for_a_time_a_question_or_running_is_not_stopped() -> None:
    assert not stopped("suspended", datetime(2026, 1, 1, tzinfo=UTC), asked=False)
    assert not stopped("suspended", None, asked=True), "a budget stop asks a question"
    assert not stopped(RunStatus.RUNNING, None, asked=False)
    assert not stopped(RunStatus.DONE, None, asked=False)
