"""The graph state, :class:`RunState`, and what needs LangChain or LangGraph to declare it:
its channels (``DeltaChannel``), its chat messages, and the reducer that merges them.

Apart from :mod:`onward.model.state` so that the records, enums and plan can be imported
without LangChain and LangGraph (``onward status`` and ``onward inbox`` read a run that
way: onward.observe.latest). ``onward.model.state`` still exports these names, loaded on
first use. Checkpoints name RunState by its tag (onward.checkpointing.tags), not by this
module.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage, convert_to_messages
from langgraph.channels import DeltaChannel
from langgraph.graph.message import add_messages
from pydantic import BaseModel, Field

from onward.model.state import (
    SCHEMA_VERSION,
    SNAPSHOT_EVERY,
    Approval,
    ArtifactRef,
    ArtifactRefs,
    Budget,
    Decision,
    Goal,
    Plan,
    PlanEdit,
    PlanStep,
    RunFailure,
    RunStatus,
    StepRecord,
    StepRecords,
    StepStatus,
    Usage,
    Waiting,
    add_unique,
    add_usage,
    append_items,
    merge_artifacts,
    merge_optional_records,
    merge_steps,
    merge_waiting,
    replace_value,
    take_last,
)
from onward.policies.run import RunPolicy


def append_messages(current: list[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    """``add_messages`` for a DeltaChannel: batched, and replay-deterministic because a
    message without an id gets one from its position, not a random uuid."""
    result: Any = list(current)
    for write in writes:
        batch: list[Any] = convert_to_messages(write if isinstance(write, list) else [write])
        for i, m in enumerate(batch):
            if m.id is None:
                batch[i] = m.model_copy(update={"id": f"m{len(result) + i}"})
        result = add_messages(result, batch)
    return list(result)


class RunUpdate(TypedDict, total=False):
    """What a node returns: some of :class:`RunState`'s channels, each as its reducer takes
    it (a plan edit or a list of them for ``plan``, records by id for ``steps``...)."""

    schema_version: int
    messages: Sequence[AnyMessage] | AnyMessage
    workdir: str
    goal: Goal | None
    plan: Plan | PlanEdit | list[PlanEdit]
    steps: Mapping[str, StepRecord]
    artifacts: Mapping[str, ArtifactRef]
    budget: Budget
    tool_modules: list[str]
    max_concurrency: int
    wave: int
    waiting: Mapping[str, Waiting | None]
    decisions: Sequence[Decision]
    approvals: Mapping[str, Approval | None]
    plan_approval: Approval | None
    policy: RunPolicy
    started_at: datetime | None
    resume_at: datetime | None
    usage: Usage
    budget_warnings: Sequence[str]
    status: RunStatus
    failure: RunFailure | None


class RunState(BaseModel):
    """The graph state. Small fields are plain channels; growing ones are deltas."""

    schema_version: int = SCHEMA_VERSION
    messages: Annotated[list[AnyMessage], DeltaChannel(append_messages, list)] = Field(
        default_factory=list
    )
    workdir: str = "."
    goal: Goal | None = None
    plan: Annotated[Plan, DeltaChannel(replace_value, snapshot_frequency=1)] = Field(
        default_factory=Plan
    )
    steps: Annotated[
        StepRecords, DeltaChannel(merge_steps, StepRecords, snapshot_frequency=SNAPSHOT_EVERY)
    ] = Field(default_factory=StepRecords)
    """Step records by step id (a plain dict of them is accepted)."""
    artifacts: Annotated[
        ArtifactRefs,
        DeltaChannel(merge_artifacts, ArtifactRefs, snapshot_frequency=SNAPSHOT_EVERY),
    ] = Field(default_factory=ArtifactRefs)
    """Artifact refs by name (a plain dict of them is accepted)."""
    budget: Budget = Field(default_factory=Budget)
    tool_modules: list[str] = Field(default_factory=list)
    """User tool modules the run needs; re-imported when a new process resumes it."""
    max_concurrency: int = 4
    wave: Annotated[int, take_last] = 1
    """Size of the last wave of steps sent together (routing after execute reads it)."""
    waiting: Annotated[dict[str, Waiting | None], merge_waiting] = Field(default_factory=dict)
    """Steps waiting for a human, by step id (empty almost always)."""
    decisions: Annotated[list[Decision], DeltaChannel(append_items, list)] = Field(
        default_factory=list
    )
    """The decision log (append-only)."""
    approvals: Annotated[
        dict[str, Approval | None],
        DeltaChannel(merge_optional_records, dict, snapshot_frequency=SNAPSHOT_EVERY),
    ] = Field(default_factory=dict)
    """Standing approvals by step id; execute checks each against the step's args hash."""
    plan_approval: Approval | None = None
    policy: RunPolicy = Field(default_factory=RunPolicy)
    started_at: datetime | None = None
    resume_at: datetime | None = None
    """A suspended run waits for this time (backoff, an open breaker) before going on."""
    usage: Annotated[Usage, add_usage] = Field(default_factory=Usage)
    """Model calls, tokens and cost so far (the budget's tokens and cost count these)."""
    budget_warnings: Annotated[list[str], add_unique] = Field(default_factory=list)
    """Budget thresholds already warned about, e.g. ``steps:50``."""
    status: RunStatus = RunStatus.PLANNING
    failure: RunFailure | None = None

    def record(self, step_id: str) -> StepRecord:
        return self.steps.get(step_id) or StepRecord(id=step_id)

    def status_of(self, step_id: str) -> StepStatus:
        return self.steps.status_of(step_id)

    def open_positions(self) -> list[int]:
        """Where the plan's steps that are not done or skipped are, in plan order, found
        without decoding the others (a long run's resume reads only these)."""
        index = self.plan.index()
        steps = self.steps
        candidates = steps.open_ids  # a new set: narrowed and extended in place
        candidates.intersection_update(index.id_set)
        candidates.update(steps.unrecorded(index))
        if len(candidates) * 8 < len(index):  # few: sort them; many: one pass in order
            return sorted(map(index.position.__getitem__, candidates))
        return [i for i, sid in enumerate(index.ids) if sid in candidates]

    def schedulable_positions(self) -> list[int]:
        """Where the steps the scheduler looks at are, in plan order: every step with a
        record that is not done or skipped (running, produced, failed, pending a retry),
        and the never-started steps whose dependencies are all settled. Never-started
        steps still waiting are not looked at (a long chain has thousands)."""
        index = self.plan.index()
        position = index.position
        steps = self.steps
        found = {position[s] for s in steps.open_ids if s in position}
        found.update(steps.ready_positions(index))
        return sorted(found)

    def open_steps(self) -> list[PlanStep]:
        """The plan's steps that are not done or skipped, in plan order."""
        index = self.plan.index()
        return [index[i] for i in self.open_positions()]
