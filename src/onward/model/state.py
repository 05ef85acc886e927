"""Typed run state: enums, plan and step records, the one transition table, migrations.

Checkpoint size matters: LangGraph's SQLite saver stores every channel value in
every checkpoint, so anything that grows with the run (the plan, the step
records, the artifact refs) lives in ``DeltaChannel``s, which store only the
writes of each superstep plus a periodic snapshot. Artifact *bodies* never live
here, only their refs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from onward.errors import IllegalTransitionError as IllegalTransitionError
from onward.model.checks import Check
from onward.model.clock import utcnow as utcnow
from onward.model.lazy import LazyList, LazyMap
from onward.policies.retry import RetryPolicy
from onward.policies.run import Deadline, RunPolicy

if TYPE_CHECKING:
    from onward.model.run_state import RunState as RunState
    from onward.model.run_state import RunUpdate as RunUpdate
    from onward.model.run_state import append_messages as append_messages

SCHEMA_VERSION = 1
SNAPSHOT_EVERY = 1000
HISTORY_KEPT = 5
"""Updates between full snapshots of a growing dict channel. A snapshot costs O(steps), so
a small cadence makes storage quadratic; a load replays at most this many small writes."""


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PRODUCED = "produced"
    """Executed, its output saved, not yet verified: only the verify node moves it on."""
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


class RunStatus(StrEnum):
    PLANNING = "planning"
    RUNNING = "running"
    WAITING_FOR_HUMAN = "waiting_for_human"
    SUSPENDED = "suspended"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED)

    @property
    def waiting(self) -> bool:
        return self in (RunStatus.WAITING_FOR_HUMAN, RunStatus.SUSPENDED)


class FailureClass(StrEnum):
    TRANSIENT = "transient"
    DETERMINISTIC = "deterministic"
    VALIDATION = "validation"
    NON_CONVERGENT = "non_convergent"


class SideEffect(StrEnum):
    PURE = "pure"
    IDEMPOTENT = "idempotent"
    UNSAFE = "unsafe"


class PlanSource(StrEnum):
    DECLARED = "declared"
    TEMPLATE = "template"
    LLM = "llm"


class RunFailureKind(StrEnum):
    """Why a run failed: planning failures are the user's input (exit code 2)."""

    PLANNING = "planning"
    STEP = "step"
    ACCEPTANCE = "acceptance"
    CANCELLED = "cancelled"
    """Cancelled by a person (``onward cancel``, a rejected plan, an abort)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Goal(_Frozen):
    objective: str
    acceptance: list[Check] = Field(default_factory=list)
    """Goal-level checks, run by finalize after every step is done."""
    constraints: dict[str, str] = Field(default_factory=dict)
    inputs: list[str] = Field(default_factory=list)
    """Input files named by the user (``--input``), relative to the work directory."""
    judge: bool = False
    """A model reviews every step's output against the goal (if a model is configured)."""


class PlanStep(_Frozen):
    id: str
    tool: str = ""
    """The registered tool the step calls ("" only for a milestone)."""
    args: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    output: str | None = None
    """Artifact name for this step's output; later args reference it as ``${name}``."""
    checks: list[Check] = Field(default_factory=list)
    description: str = ""
    retry: RetryPolicy | None = None
    """Backoff for this step's transient failures (wins over the tool's)."""
    judge: bool = False
    """A model reviews this step's output after its checks pass (it can fail the step,
    never pass one that the checks failed)."""
    milestone: str | None = None
    """A coarse step (no tool, no args): what the model is to expand into concrete steps
    once the steps it depends on are done (onward.planning.milestones)."""


class PlanSteps(LazyList[PlanStep]):
    """A plan's steps (a sequence of :class:`PlanStep`): loaded from a checkpoint, a step
    decodes when first read, while every step's id is at hand for the scheduler. Also the
    plan's index (``ids``, ``position``, ``children``, ``by_id``)."""

    model = PlanStep


class Plan(_Frozen):
    version: int = 1
    source: PlanSource = PlanSource.DECLARED
    steps: PlanSteps = Field(default_factory=PlanSteps)
    """Empty until the plan node has run (or a declared plan was given). A list of
    :class:`PlanStep` is accepted wherever a plan is built."""

    def step(self, step_id: str) -> PlanStep:
        return self.index().by_id(step_id)

    def index(self) -> PlanSteps:
        """Lookups the scheduler makes after every step, built once per plan."""
        steps: PlanSteps = PlanSteps.of(self.steps)
        return steps

    def with_step(self, step: PlanStep) -> Plan:
        """This plan with the step of ``step``'s id replaced by it (the others not read)."""
        return self.model_copy(update={"steps": self.index().replaced(step)})

    def with_steps(self, steps: Iterable[PlanStep], **changes: Any) -> Plan:
        """This plan with other steps (and other fields in ``changes``)."""
        return self.model_copy(update={"steps": PlanSteps(steps), **changes})


class ArtifactRef(_Frozen):
    name: str
    uri: str
    sha256: str
    size: int
    summary: str = ""
    body: str | None = None
    """The value's canonical JSON itself when it is small (see ``artifacts.INLINE_LIMIT``):
    it rides in the checkpoint with the ref instead of costing a write to the artifact
    store per step. Checked against ``sha256`` when read, like a stored body."""


class StepFailure(_Frozen):
    failure_class: FailureClass
    message: str
    error_type: str = ""
    hint: str | None = None
    signature: str = ""
    """Class + tool + normalised message: the same signature in a row means no progress."""
    attempt: int | None = None
    at: datetime | None = None


class InnerCall(_Frozen):
    """A tool call a tool-calling step made (onward.tools.tool_calling), as the chat shows
    it: an AI tool call and its result."""

    id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    result: str = ""
    """What the call returned (or why it did not run), bounded."""
    ok: bool = True


class StepRecord(_Frozen):
    id: str
    status: StepStatus = StepStatus.PENDING
    attempts: int = 0
    effect_key: str | None = None
    """Idempotency key of the step's side effect in the ledger (non-pure tools)."""
    output: ArtifactRef | None = None
    failure: StepFailure | None = None
    findings: list[str] = Field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    note: str | None = None
    """Why a person's decision settled the step (e.g. why it was skipped)."""
    not_before: datetime | None = None
    """A pending step is not started before this time (retry backoff, open breaker)."""
    replans: int = 0
    """How often the replanner changed this step."""
    streak: int = 0
    """How many failures in a row had the same signature as ``failure``."""
    attempt_floor: int = 0
    """Attempts before the last human "retry": the retry policy counts from here."""
    history: list[StepFailure] = Field(default_factory=list)
    """The step's earlier failures, newest last (at most HISTORY_KEPT)."""
    unjudged: str | None = None
    """Why the judge's review the step asked for is missing: the judge could not run, and
    the run's policy (``judge_failure: pass``) or a person passed the step without it."""
    calls: list[InnerCall] = Field(default_factory=list)
    """The tool calls a tool-calling step made in its last execution, in order."""


_OPEN = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.PRODUCED, StepStatus.FAILED})
SETTLED = frozenset({StepStatus.DONE, StepStatus.SKIPPED})
"""A step in one of these lets the steps that depend on it run, and is not scheduled again."""
_Frontier = tuple["PlanSteps", set[int], Mapping[str, list[int]]]
"""(plan index, positions of never-started steps that can run, step id → positions of
never-started steps waiting for it)."""
_CODE_OF = {s: "v" if s is StepStatus.PRODUCED else s.value[0] for s in StepStatus}
"""One letter per status (p, r, v, d, f, s): a checkpoint holds a run's statuses as one string
(``v``: produced, waiting for verification)."""
_STATUS_OF_CODE = {code: s for s, code in _CODE_OF.items()}


class StepRecords(LazyMap[StepRecord]):
    """Step records by step id (a mapping of :class:`StepRecord`): loaded from a checkpoint,
    a record decodes when first read, while every record's status and the total of attempts
    are at hand (the scheduler and the budget read them after every step)."""

    __slots__ = ("_attempts_total", "_open", "_ready", "_status", "_unrecorded")
    model = StepRecord
    dump: ClassVar[Mapping[str, Any]] = {"mode": "json", "exclude_defaults": True}
    """JSON values without defaults: a record holds no ``Any`` and no union, so it reads
    back the same, in about a third of the bytes of LangGraph's encoding."""

    def _start(self) -> None:
        self._status: dict[str, StepStatus] = {}
        self._attempts_total = 0
        self._open: set[str] = set()
        self._unrecorded: tuple[PlanSteps, frozenset[str]] | None = None
        self._ready: _Frontier | None = None

    def _copy(self) -> StepRecords:
        new: StepRecords = super()._copy()
        new._status = dict(self._status)
        new._attempts_total = self._attempts_total
        new._open = set(self._open)
        new._unrecorded = self._unrecorded  # valid until a write records one of them
        ready = self._ready  # kept up to date by the writes (_note); its waits are shared
        new._ready = None if ready is None else (ready[0], set(ready[1]), ready[2])
        return new

    @classmethod
    def _settled(cls, value: Any) -> bool:
        return value.status in SETTLED

    def _note(self, key: str, value: Any) -> None:
        old = self.get(key)
        self._attempts_total += value.attempts - (old.attempts if old is not None else 0)
        was = self._status.get(key)
        self._status[key] = value.status
        if self._unrecorded is not None and key in self._unrecorded[1]:
            self._unrecorded = None
        if value.status in _OPEN:
            self._open.add(key)
        else:
            self._open.discard(key)
        if self._ready is not None:
            self._advance(self._ready, key, was in SETTLED, value.status in SETTLED)

    def _advance(self, frontier: _Frontier, key: str, was: bool, now: bool) -> None:
        """The frontier after ``key``'s record was written (settled ``was`` → ``now``)."""
        index, ready, waits = frontier
        position = index.position.get(key)
        if position is not None:
            ready.discard(position)  # it has a record now: an open step, found by its id
        if was and not now:  # settled no more (a decision undone): worked out again
            self._ready = None
        elif now and not was:
            status = self._status.get
            for p in waits.get(key, ()):
                if index.ids[p] not in self._status and all(
                    status(d) in SETTLED for d in index[p].depends_on
                ):
                    ready.add(p)

    def _summary(self) -> list[Any]:
        codes = "".join(_CODE_OF[s] for s in self._status.values())
        return [codes, self._attempts_total, sorted(self._open)]

    def _load_summary(self, ids: list[str], summary: list[Any]) -> None:
        codes, self._attempts_total, open_ids = summary
        self._status = dict(zip(ids, map(_STATUS_OF_CODE.__getitem__, codes), strict=True))
        self._open = set(open_ids)
        self._unrecorded = None
        self._ready = None

    def status_of(self, step_id: str) -> StepStatus:
        """A step's status without decoding its record (pending if it has none)."""
        return self._status.get(step_id, StepStatus.PENDING)

    @property
    def statuses(self) -> Mapping[str, StepStatus]:
        """Every recorded step's status, by step id (read-only)."""
        return self._status

    @property
    def attempts_total(self) -> int:
        """Attempts of every step together (the budget's ``max_steps`` counts these)."""
        return self._attempts_total

    def unrecorded(self, index: PlanSteps) -> frozenset[str]:
        """The ids of a plan's steps (``index``) without a record. Remembered for that plan,
        and by the versions merged from this one until a write records one of them: the
        scheduler asks after every step, and once a long run's steps have records the
        answer stays the same (a scan of every id was most of an idle resume's bookkeeping)."""
        memo = self._unrecorded
        if memo is None or memo[0] is not index:
            memo = self._unrecorded = (index, index.id_set.difference(self._values))
        return memo[1]

    def ready_positions(self, index: PlanSteps) -> set[int]:
        """Where the plan's (``index``) steps without a record whose dependencies are all
        done or skipped are: the never-started steps that can run now. Worked out once
        for a plan (decoding the steps that have no record), then kept up to date by
        every write, so the scheduler does not scan a long plan's waiting steps after
        each step (at 5,000 steps that scan was most of a step). Read-only."""
        frontier = self._ready
        if frontier is None or frontier[0] is not index:
            frontier = self._ready = self._frontier(index)
        return frontier[1]

    def _frontier(self, index: PlanSteps) -> _Frontier:
        status = self._status.get
        ready: set[int] = set()
        waits: dict[str, list[int]] = {}
        position = index.position
        for sid in self.unrecorded(index):
            p = position[sid]
            unsettled = [d for d in index[p].depends_on if status(d) not in SETTLED]
            if not unsettled:
                ready.add(p)
            for d in unsettled:
                waits.setdefault(d, []).append(p)
        return index, ready, waits

    @property
    def open_ids(self) -> set[str]:
        """Steps with a record that is pending, running, produced or failed (a new set)."""
        return set(self._open)


class ArtifactRefs(LazyMap[ArtifactRef]):
    """Artifact refs by name (a mapping of :class:`ArtifactRef`), decoded when first read."""

    __slots__ = ()
    model = ArtifactRef
    dump: ClassVar[Mapping[str, Any]] = {"mode": "json", "exclude_defaults": True}


class Waiting(_Frozen):
    """Why a step waits for a human: an effect whose outcome onward cannot know."""

    step_id: str
    reason: str
    key: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    started_at: datetime | None = None
    judge: bool = False
    """The judge could not review the step's output (or the goal's, for ``(plan)``): the
    output stays produced and a person decides (a ``judge`` question)."""


class DecisionAction(StrEnum):
    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    RESPOND = "respond"
    DONE = "done"
    """An effect whose outcome was unknown did happen (with this result)."""
    RETRY = "retry"
    SKIP = "skip"
    ABORT = "abort"
    CANCEL = "cancel"
    REPLAN = "replan"
    """onward's rules replanner changed a failed step (fix_args or a fallback tool)."""
    REOPEN = "reopen"
    """onward's own: a pure step re-opened because its output artifact was damaged."""
    EXPAND = "expand"
    """The model expanded a milestone into concrete steps (a plan revision: ``added``)."""


class WaitKind(StrEnum):
    """What a person is asked."""

    APPROVAL = "approval"
    """May this step run with these args?"""
    PLAN = "plan"
    """May this plan run?"""
    ESCALATION = "escalation"
    """onward cannot go on alone (an outcome is unknown, a step does not converge)."""
    BUDGET = "budget"
    """A budget is used up: raise the limit, or abort?"""
    JUDGE = "judge"
    """The judge could not review an output: retry the review, pass without it, or fail?"""


PLAN_TARGET = "(plan)"
"""The ``step_id`` of decisions about the plan as a whole."""


class Decision(_Frozen):
    """The decision log: who decided what about which step, when, on which exact args."""

    step_id: str
    action: DecisionAction
    by: str
    at: datetime
    reason: str = ""
    """The person's comment (or the rejection message, or the feedback)."""
    key: str | None = None
    """Idempotency key of the effect the decision is about, if any."""
    kind: WaitKind | None = None
    args_hash: str | None = None
    """Hash of the exact args (and input artifacts) the decision applies to."""
    interrupt_id: str | None = None
    changed: list[str] = Field(default_factory=list)
    """A plan revision (``replan``): the steps it changed."""
    added: list[str] = Field(default_factory=list)
    """A plan revision: the steps it added."""
    removed: dict[str, str] = Field(default_factory=dict)
    """A plan revision: the steps it removed, each with the reason given."""


class Approval(_Frozen):
    """A person approved this step with args of this hash; execute runs nothing else."""

    step_id: str
    tool: str
    args_hash: str
    by: str
    at: datetime
    edited: bool = False


class PlanEdit(_Frozen):
    """A write to the plan channel that replaces one step (a person edited its args)."""

    step: PlanStep


class RunFailure(_Frozen):
    kind: RunFailureKind
    message: str
    step_id: str | None = None


class Budget(_Frozen):
    """A run's limits (usage is counted from the state: attempts, replans, the clock)."""

    max_steps: int | None = None
    """Step executions (attempts included) in the whole run."""
    steps_used: int = 0
    """Unused (kept so that version-1 checkpoints load); usage is derived from the records."""
    max_replans: int = 2
    """Replans of one step before its failures are non-convergent."""
    max_run_time: timedelta | None = None
    """Wall time from the run's start."""
    max_tokens: int | None = None
    """Model tokens (input + output) in the whole run."""
    max_cost: float | None = None
    """Model cost in the run, in the price table's currency (USD by default)."""


class ApproveTask(_Frozen):
    """The payload of one ``Send`` to approve (or escalate): what to ask, asked when."""

    kind: WaitKind
    step: PlanStep | None = None
    """The step asked about (None for the plan as a whole)."""
    plan: Plan | None = None
    """The plan, when the plan itself is asked about."""
    done: dict[str, StepRecord] = Field(default_factory=dict)
    """For plan questions mid-run: the done steps, which an edit may not change."""
    record: StepRecord | None = None
    dependants: list[StepRecord] = Field(default_factory=list)
    """Records of the steps downstream of ``step``: skipped with it on a rejection."""
    args_hash: str
    waiting: Waiting | None = None
    """For escalations: what onward could not decide alone."""
    inputs: dict[str, ArtifactRef] = Field(default_factory=dict)
    workdir: str = "."
    tool_modules: list[str] = Field(default_factory=list)
    asked_at: datetime
    """When the question was first asked (fixed in the checkpoint, so replays keep it)."""
    deadline: Deadline
    allow_tools: frozenset[str] | None = None
    confine_paths: bool = False
    """Paths must stay inside ``workdir`` (the run policy's ``confine_paths``): for the
    checks that verify a result a person gives for an escalated step."""
    budget: Budget | None = None
    """For budget questions: the limits in force."""
    max_plan_steps: int | None = None
    """For plan questions: the run policy's ``max_plan_steps`` (an edit may not pass it)."""
    spent: dict[str, float] = Field(default_factory=dict)
    """For budget questions: what ran out (metric → used)."""
    wave: int = 1


class AskBatch(_Frozen):
    """The payload of one ``Send`` to approve (or escalate) that asks about several steps at
    once: every question of one wave is ONE interrupt with N action requests (langchain's
    human-in-the-loop batched shape), answered by N decisions in order."""

    questions: list[ApproveTask]
    wave: int = 1


class Usage(_Frozen):
    """Model usage of a run: summed over every call (plan, replan, judge)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


def add_usage(current: Usage, new: Usage) -> Usage:
    return Usage(
        calls=current.calls + new.calls,
        input_tokens=current.input_tokens + new.input_tokens,
        output_tokens=current.output_tokens + new.output_tokens,
        cost=current.cost + new.cost,
    )


class NoteTask(_Frozen):
    """The payload of a ``Send`` to note: budget thresholds newly crossed."""

    markers: list[str]
    texts: list[str]
    wave: int = 1


class ExecuteTask(_Frozen):
    """The payload of one ``Send`` to execute: everything the step needs, nothing more."""

    step: PlanStep
    record: StepRecord
    inputs: dict[str, ArtifactRef] = Field(default_factory=dict)
    workdir: str
    tool_modules: list[str] = Field(default_factory=list)
    wave: int = 1
    """How many steps were sent together with this one (including it)."""
    wave_in_state: bool = False
    """The run's ``wave`` was already ``wave`` when this task was sent, so execute leaves
    it unwritten (tasks of older checkpoints write it, as they did)."""
    approval_required: bool = False
    approval: Approval | None = None
    """The approval execute checks the step's current args hash against."""
    max_replans: int = 2
    confine_paths: bool = False
    """Tool paths must stay inside ``workdir`` (the run policy's ``confine_paths``)."""
    policy: RunPolicy | None = None
    """The run's policy, for a step whose tool calls tools itself (a tool-calling step:
    its allowlist, approvals and deadlines); None for the others."""
    judge_goal: Goal | None = None
    """Unused since the verify node decides whether a model reviews (kept so that tasks in
    older checkpoints load)."""


_ALLOWED: Mapping[StepStatus, frozenset[StepStatus]] = {
    # pending → failed: a person answered an approval with feedback instead of approving.
    StepStatus.PENDING: frozenset({StepStatus.RUNNING, StepStatus.SKIPPED, StepStatus.FAILED}),
    # running → pending: a human chose "retry" for an effect whose outcome was unknown.
    # Never running → done: only the verify node makes a step done, from produced.
    StepStatus.RUNNING: frozenset(
        {StepStatus.PRODUCED, StepStatus.FAILED, StepStatus.SKIPPED, StepStatus.PENDING}
    ),
    # produced → done | failed: the verify node's verdict; → skipped: a person's decision.
    StepStatus.PRODUCED: frozenset({StepStatus.DONE, StepStatus.FAILED, StepStatus.SKIPPED}),
    # failed → pending: a retry is scheduled, or the replanner changed the step.
    # failed → produced: a person did a failed step by hand and gave its result.
    StepStatus.FAILED: frozenset(
        {StepStatus.RUNNING, StepStatus.PRODUCED, StepStatus.SKIPPED, StepStatus.PENDING}
    ),
    # done → pending: a pure step re-opened because its output artifact is missing/changed.
    StepStatus.DONE: frozenset({StepStatus.PENDING}),
    StepStatus.SKIPPED: frozenset(),
}


def transition(record: StepRecord, to: StepStatus, **changes: Any) -> StepRecord:
    """The one place step status changes; never done → running."""
    if to not in _ALLOWED[record.status]:
        raise IllegalTransitionError(f"step {record.id!r}: {record.status} → {to} is not allowed")
    if to is StepStatus.RUNNING and record.unjudged:  # a new output is reviewed afresh
        changes.setdefault("unjudged", None)
    return record.model_copy(update={"status": to, **changes})


def merge_steps(current: Mapping[str, Any], writes: Sequence[Mapping[str, Any]]) -> StepRecords:
    """Keyed merge for DeltaChannels: later writes win per key (batching-invariant)."""
    return StepRecords.of(current).merged(writes)  # type: ignore[no-any-return]


def merge_artifacts(
    current: Mapping[str, Any], writes: Sequence[Mapping[str, Any]]
) -> ArtifactRefs:
    """Keyed merge for DeltaChannels: later writes win per key (batching-invariant)."""
    return ArtifactRefs.of(current).merged(writes)  # type: ignore[no-any-return]


def replace_value(current: Any, writes: Sequence[Any]) -> Any:
    """The plan channel: a Plan replaces the plan; a PlanEdit replaces one of its steps and
    bumps the version (deterministic, so a DeltaChannel replay gives the same plan)."""
    value = current
    for w in [x for write in writes for x in (write if isinstance(write, list) else [write])]:
        if isinstance(w, PlanEdit):
            steps = PlanSteps.of(value.steps).replaced(w.step)
            value = value.model_copy(update={"steps": steps, "version": value.version + 1})
        else:
            value = w
    return value


def merge_waiting(current: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Keyed merge where ``None`` removes a key (a decision settled that step)."""
    merged = {**current, **new}
    return {k: v for k, v in merged.items() if v is not None}


def merge_optional_records(
    current: dict[str, Any], writes: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Keyed merge for DeltaChannels where ``None`` removes a key (approvals withdrawn)."""
    merged = dict(current)
    for write in writes:
        for k, v in write.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
    return merged


def append_items(current: list[Any], writes: Sequence[Any]) -> list[Any]:
    """Append-only list for DeltaChannels (decisions)."""
    out = list(current)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


def add_unique(current: list[str], new: list[str]) -> list[str]:
    return current + [x for x in new if x not in current]


def take_last(current: int, new: int) -> int:
    """Reducer that lets every task of a wave write the same value in one superstep."""
    return new


# Migrations: schema_version N → N+1, applied to raw state values on load.
MIGRATIONS: dict[int, Any] = {}


def migrate(values: dict[str, Any]) -> dict[str, Any]:
    """Bring state values saved by an older onward up to ``SCHEMA_VERSION``."""
    version = int(values.get("schema_version", 1))
    while version < SCHEMA_VERSION:
        values = MIGRATIONS[version](values)
        version += 1
        values["schema_version"] = version
    return values


_GRAPH_STATE = frozenset({"RunState", "RunUpdate", "append_messages"})
"""Names that live in :mod:`onward.model.run_state` (LangChain and LangGraph declare them)."""


def __getattr__(name: str) -> Any:
    """The graph state's names, imported on first use: the rest of this module must not
    import LangChain and LangGraph (``onward status`` reads records without them)."""
    if name in _GRAPH_STATE:
        from onward.model import run_state

        return getattr(run_state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
