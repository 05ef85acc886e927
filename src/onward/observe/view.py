"""What users see of a run: the :class:`RunView` (``onward status --json``) and its steps.

Apart from onward.client.views, which reads a run through LangGraph, so that the
LangGraph-free read path (onward.observe.latest) builds the same view from the same
values; :func:`run_view` is where both turn a state into a view.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, overload

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import core_schema

from onward.model.lazy import wrapper_schema
from onward.model.state import (
    ArtifactRef,
    ArtifactRefs,
    Budget,
    Decision,
    Goal,
    Plan,
    PlanStep,
    PlanSteps,
    RunFailure,
    RunStatus,
    StepFailure,
    StepRecord,
    StepRecords,
    StepStatus,
    Usage,
    Waiting,
)
from onward.observe.live import Running
from onward.people.inbox import PendingDecision

if TYPE_CHECKING:
    from onward.client.facade import Onward
    from onward.store.leases import Leases


class StepView(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    tool: str
    status: StepStatus
    attempts: int
    findings: list[str] = []
    error: str | None = None
    failure_class: str | None = None
    output: ArtifactRef | None = None
    failures: list[StepFailure] = []
    """Every failure the step had, oldest first (class, message, evidence, attempt)."""
    not_before: datetime | None = None
    replans: int = 0
    note: str | None = None

    def _repr_html_(self) -> str:
        """How Jupyter shows a step (its fields, failures and findings; escaped)."""
        from onward.notebook.html import step_html

        return step_html(self)


class StepViews(Sequence[StepView]):
    """A view's steps, each built from the plan and its record the first time it is read:
    a view of a 10,000-step run costs nothing for the steps nobody reads (every drive and
    every answer returns a view). Immutable; serialised as a list."""

    __slots__ = ("_built", "_live", "_plan", "_records")

    def __init__(self, items: Iterable[StepView] = ()) -> None:
        self._built: list[StepView | None] = list(items)
        self._plan: PlanSteps | None = None
        self._records: StepRecords | None = None
        self._live: dict[str, StepStatus] = {}
        """Steps shown otherwise than their records say: id → the record's status."""

    @classmethod
    def of(cls, plan: PlanSteps, records: StepRecords) -> StepViews:
        new = cls()
        new._plan, new._records, new._built = plan, records, [None] * len(plan)
        return new

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return wrapper_schema(cls, list[StepView], handler)

    @staticmethod
    def _plain(value: Iterable[StepView]) -> list[StepView]:
        return list(value)

    def showing(self, running: Mapping[str, Running], stalled: bool) -> StepViews:
        """These steps, with the ones in ``running`` shown running (see observe/live.py)."""
        plan, records = self._plan, self._records
        if not running or plan is None or records is None:
            return self
        new = StepViews.of(plan, records)
        for sid, now in running.items():
            i = plan.position.get(sid)
            if i is None:
                continue
            was = step_view(plan[i], records)
            new._live[sid] = was.status
            new._built[i] = was.model_copy(
                update={
                    "status": StepStatus.RUNNING,
                    "attempts": now.attempt,
                    "note": now.note(stalled),
                }
            )
        return new

    def _at(self, i: int) -> StepView:
        built = self._built[i]
        if built is None:
            assert self._plan is not None
            assert self._records is not None
            built = self._built[i] = step_view(self._plan[i], self._records)
        return built

    @overload
    def __getitem__(self, i: int) -> StepView: ...
    @overload
    def __getitem__(self, i: slice) -> list[StepView]: ...
    def __getitem__(self, i: int | slice) -> StepView | list[StepView]:
        if isinstance(i, slice):
            return [self._at(j) for j in range(len(self._built))[i]]
        return self._at(range(len(self._built))[i])  # negative and out of range as a list

    def __len__(self) -> int:
        return len(self._built)

    def counts(self) -> dict[str, int]:
        """Steps per status (in :class:`StepStatus` order), without building a view of
        each (a record's status is read without decoding it)."""
        if self._plan is not None and self._records is not None:
            records = self._records
            found = Counter(records.status_of(i) for i in self._plan.ids)
            for was in self._live.values():
                found[was] -= 1
                found[StepStatus.RUNNING] += 1
        else:
            found = Counter(s.status for s in self)
        return {s.value: found[s] for s in StepStatus if found[s]}

    def __iter__(self) -> Iterator[StepView]:
        return (self._at(i) for i in range(len(self._built)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepViews | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))

    def __copy__(self) -> StepViews:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> StepViews:
        return self

    def __reduce__(self) -> Any:
        return (type(self), (list(self),))


def step_view(step: PlanStep, records: StepRecords) -> StepView:
    rec = records.get(step.id) or StepRecord(id=step.id)
    return StepView(
        id=step.id,
        tool=step.tool,
        status=rec.status,
        attempts=rec.attempts,
        findings=rec.findings,
        output=rec.output,
        error=rec.failure.message if rec.failure else None,
        failure_class=rec.failure.failure_class if rec.failure else None,
        failures=[*rec.history, *([rec.failure] if rec.failure else [])],
        not_before=rec.not_before,
        replans=rec.replans,
        note=rec.note,
    )


class RunView(BaseModel):
    """A run as users see it: what ``onward status --json`` prints."""

    model_config = ConfigDict(frozen=True)

    thread_id: str
    status: RunStatus
    objective: str
    workdir: str
    plan_version: int | None = None
    plan_source: str | None = None
    steps: StepViews = Field(default_factory=StepViews)
    """A sequence of :class:`StepView`, built as they are read (a list is accepted)."""
    artifacts: ArtifactRefs = Field(default_factory=ArtifactRefs)
    """A mapping of name → :class:`ArtifactRef`, decoded as read (a dict is accepted)."""
    failure: RunFailure | None = None
    report: str = ""
    driver: str | None = None
    """Owner of the live or last lease (host:pid:random), if any."""
    heartbeat_at: datetime | None = None
    stalled: bool = False
    """Unfinished, and its driver's heartbeat is stale: the driver died or hangs."""
    resume_at: datetime | None = None
    """A suspended run goes on at this time (a retry backoff or an open breaker)."""
    usage: Usage = Usage()
    """Model calls, tokens and cost so far."""
    budget: Budget = Budget()
    waiting: list[Waiting] = []
    """Effects whose outcome is unknown (each is also a pending escalation)."""
    pending: list[PendingDecision] = []
    """Questions the run waits on: approvals, the plan, escalations."""
    decisions: list[Decision] = []
    """The decision log: who decided what, when, on which args hash."""
    paused_before: list[str] = []
    """The nodes a drive paused before (``interrupt_before``); a resume goes on."""

    @property
    def finished(self) -> bool:
        return self.status.finished

    def artifact_value(self, ow: Onward, name: str) -> Any:
        return ow.store.artifacts.get(self.artifacts[name])

    def step_counts(self) -> dict[str, int]:
        """Steps per status, e.g. ``{"done": 3, "failed": 1}``."""
        return self.steps.counts()

    def _repr_html_(self) -> str:
        """How Jupyter shows a run: status, steps (the first 50), questions, the report.
        Every value is escaped (run data is untrusted)."""
        from onward.notebook.html import run_html

        return run_html(self)


class ViewedState(Protocol):
    """What a view reads of a run's state: a :class:`RunState`, or the values the
    LangGraph-free read path decoded (onward.observe.latest)."""

    @property
    def status(self) -> RunStatus: ...
    @property
    def goal(self) -> Goal | None: ...
    @property
    def workdir(self) -> str: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def steps(self) -> StepRecords: ...
    @property
    def artifacts(self) -> ArtifactRefs: ...
    @property
    def failure(self) -> RunFailure | None: ...
    @property
    def resume_at(self) -> datetime | None: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def budget(self) -> Budget: ...
    @property
    def waiting(self) -> dict[str, Waiting | None]: ...
    @property
    def decisions(self) -> list[Decision]: ...


def run_view(
    leases: Leases,
    thread_id: str,
    state: ViewedState,
    *,
    report: str,
    pending: list[PendingDecision],
    paused_before: list[str],
    live: Callable[[], Mapping[str, Running]] | None = None,
) -> RunView:
    """The view of a state whose status is already corrected by its questions;
    ``report`` is the final chat message's text (a finished run's). ``live``: for a running
    run, the steps that run now though their records do not say so yet (observe/live.py)."""
    # Steps and artifacts are read as they are used: the state's collections are immutable.
    steps = StepViews.of(state.plan.index(), state.steps) if state.plan.steps else StepViews()
    lease = None if state.status.finished else leases.get(thread_id)  # (never stalled)
    stalled = lease is not None and leases.stopped(lease)
    if live is not None and state.status is RunStatus.RUNNING:
        steps = steps.showing(live(), stalled)
    return RunView(
        thread_id=thread_id,
        status=state.status,
        objective=state.goal.objective if state.goal else "",
        workdir=state.workdir,
        plan_version=state.plan.version if state.plan.steps else None,
        plan_source=state.plan.source if state.plan.steps else None,
        steps=steps,
        artifacts=ArtifactRefs.of(state.artifacts),
        failure=state.failure,
        report=report,
        resume_at=state.resume_at,
        usage=state.usage,
        budget=state.budget,
        waiting=[w for w in state.waiting.values() if w is not None],
        pending=pending,
        decisions=list(state.decisions),
        paused_before=paused_before,
        driver=lease.owner if lease else None,
        heartbeat_at=lease.heartbeat_at if lease else None,
        stalled=stalled,
    )


def waiting_status(
    interrupts: Sequence[Any], suspended_ids: Callable[[], Iterable[Any]]
) -> RunStatus:
    """What an unfinished run with these questions (``.id``, ``.value``) is: waiting for a
    person, or suspended (a budget stop, or a question whose id a sweep suspended:
    ``suspended_ids``, read only when no budget stop settles it)."""
    asked = {i.id for i in interrupts}
    budget_stop = any(
        isinstance(i.value, dict) and i.value.get("onward", {}).get("kind") == "budget"
        for i in interrupts
    )
    suspended = budget_stop or any(i in asked for i in suspended_ids())
    return RunStatus.SUSPENDED if suspended else RunStatus.WAITING_FOR_HUMAN
