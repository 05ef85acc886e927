"""What a running run is doing now, beyond its last commit.

A step's record reaches the store once, when the step ends (one durable commit a step).
While a step runs, or after its driver died mid-step, the record still says ``pending``.
Two facts written at once say more, and a reader of a running run applies them:

* a ``step_running`` event, written when a step is still running LONG seconds after it
  started (nodes/execute.py: the previous step's verdict is committed then, too);
* the effect ledger's ``started`` claim, committed before any side effect is attempted.

Neither is a transition of the record: the view shows the step ``running`` with a note
saying what is known (running since when; an effect started, its outcome not yet recorded,
or unknown when the driver stopped), and the record itself changes only through the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from onward.effects.ledger import Effect, EffectStatus
from onward.model.state import StepRecord, StepRecords, StepStatus
from onward.observe.events import Event
from onward.observe.kinds import EventKind

SETTLED = (StepStatus.DONE, StepStatus.PRODUCED, StepStatus.SKIPPED)
"""Records whose step is past running: nothing newer can be said of them here."""


@dataclass(frozen=True, slots=True)
class Running:
    """A step running now (or when its driver stopped), as the facts written at once say."""

    step_id: str
    attempt: int
    since: datetime
    effect_started: datetime | None = None
    """When its side effect was claimed in the ledger, if it has one."""

    def note(self, stalled: bool) -> str:
        """What a person reads beside the step."""
        if self.effect_started is not None:
            at = f"{self.effect_started:%Y-%m-%d %H:%M:%S}"
            if stalled:
                return (
                    f"its effect was started at {at} by a driver that stopped: the outcome "
                    "is unknown; `onward resume` settles it (reconcile probe or a question)"
                )
            return f"its effect was started at {at}; the outcome is recorded when it ends"
        since = f"{self.since:%Y-%m-%d %H:%M:%S}"
        if stalled:
            return f"was running (attempt {self.attempt}, since {since}) when its driver stopped"
        return f"running since {since} (attempt {self.attempt})"


class EventSource(Protocol):
    def list(self, thread_id: str, kinds: list[EventKind] | None = None) -> list[Event]: ...


class EffectSource(Protocol):
    def for_thread(self, thread_id: str) -> list[Effect]: ...


def running_steps(
    events: EventSource, ledger: EffectSource, thread_id: str, records: StepRecords
) -> dict[str, Running]:
    """The steps of a running run that run now, though their records do not say so yet."""
    found: dict[str, Running] = {}
    for e in events.list(thread_id, [EventKind.STEP_RUNNING]):
        sid, attempt = e.detail.get("step_id"), e.detail.get("attempt")
        if not isinstance(sid, str) or not isinstance(attempt, int):
            continue
        rec = records.get(sid)
        if rec is not None and (rec.status in SETTLED or rec.attempts >= attempt):
            continue  # the step's own write has landed since
        found[sid] = Running(sid, attempt, e.at)
    for effect in ledger.for_thread(thread_id):
        rec = records.get(effect.step_id)
        if effect.status is not EffectStatus.STARTED or not _in_flight(effect, rec):
            continue
        seen = found.get(effect.step_id)
        attempt = seen.attempt if seen else (rec.attempts + 1 if rec else 1)
        since = seen.since if seen else effect.started_at
        found[effect.step_id] = Running(effect.step_id, attempt, since, effect.started_at)
    return found


def _in_flight(effect: Effect, rec: StepRecord | None) -> bool:
    """The claim belongs to an attempt the record has not recorded (not to one that
    failed and said the effect may have happened)."""
    if rec is None:
        return True
    if rec.status in SETTLED or rec.status is StepStatus.RUNNING:
        return False  # a running record is already shown as running (an open question)
    return rec.ended_at is None or effect.started_at > rec.ended_at
