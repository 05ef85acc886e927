"""Run state: the step transition table, the DeltaChannel reducers (batching-invariant,
replay-deterministic), and checkpoints that load under LangGraph's strict msgpack mode."""

from __future__ import annotations

import random
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from onward import Onward, Plan, PlanStep, StepRecord, StepStatus
from onward.api import superstep_limit
from onward.checkpointing.serde import checkpoint_serde
from onward.graph.schedule import Scheduler
from onward.model import budget
from onward.model.state import (
    ArtifactRef,
    Budget,
    FailureClass,
    IllegalTransitionError,
    PlanSteps,
    RunState,
    RunStatus,
    StepFailure,
    StepRecords,
    append_messages,
    merge_artifacts,
    merge_steps,
    transition,
)
from onward.nodes.deps import NodeDeps
from onward.policies.retry import RetryPolicy
from onward.store.artifacts import ArtifactStore
from onward.store.database import sqlite_path
from onward.tools import default_registry
from onward.verification.checks import Equals, FileExists
from tests.support.common import cli_env

P, R, D, F, S = (
    StepStatus.PENDING,
    StepStatus.RUNNING,
    StepStatus.DONE,
    StepStatus.FAILED,
    StepStatus.SKIPPED,
)
V = StepStatus.PRODUCED
ALLOWED = {
    (P, R),
    (R, V),
    (V, D),
    (V, F),
    (R, F),
    (R, S),
    (V, S),
    (F, R),
    (F, V),
    (P, S),
    (F, S),
    (R, P),
    (D, P),
    (P, F),
    (F, P),
}
"""pending→running→produced→done/failed (only verify decides; never running→done),
running→failed (the tool failed), failed→running (a retry), failed→produced (a person did
the step and gave its result), any non-terminal status → skipped, and two
human/consistency decisions: running→pending (retry an effect whose outcome was unknown)
and done→pending (re-open a pure step whose output artifact is gone). Never done→running;
nothing leaves skipped."""
FORBIDDEN = sorted({(a, b) for a in StepStatus for b in StepStatus} - ALLOWED)


# -- the transition table ------------------------------------------------------------


@pytest.mark.parametrize(("src", "dst"), sorted(ALLOWED), ids=lambda s: str(s))
def test_allowed_transition_changes_status_and_fields(src: StepStatus, dst: StepStatus) -> None:
    record = StepRecord(id="a", status=src, attempts=1)

    moved = transition(record, dst, attempts=2, findings=["note"])

    assert moved.status is dst
    assert moved.attempts == 2
    assert moved.findings == ["note"]
    assert record.status is src, "the old record is not changed"


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN, ids=lambda s: str(s))
def test_forbidden_transition_raises(src: StepStatus, dst: StepStatus) -> None:
    with pytest.raises(IllegalTransitionError, match=f"step 'a': {src} → {dst} is not allowed"):
        transition(StepRecord(id="a", status=src), dst)


@pytest.mark.parametrize(
    ("src", "dst"), [(D, R), (D, F), (S, R), (P, D), (R, D)], ids=lambda s: str(s)
)
def test_transitions_that_would_lose_or_fake_work_are_forbidden(
    src: StepStatus, dst: StepStatus
) -> None:
    assert (src, dst) in FORBIDDEN
    with pytest.raises(IllegalTransitionError):
        transition(StepRecord(id="a", status=src), dst)


@pytest.mark.parametrize("src", [P, R, F], ids=str)
def test_any_non_terminal_step_can_be_skipped(src: StepStatus) -> None:
    assert transition(StepRecord(id="a", status=src), S).status is S


def test_nothing_leaves_skipped_and_done_only_reopens_to_pending() -> None:
    for dst in StepStatus:
        with pytest.raises(IllegalTransitionError):
            transition(StepRecord(id="a", status=S), dst)
    for dst in set(StepStatus) - {P}:
        with pytest.raises(IllegalTransitionError):
            transition(StepRecord(id="a", status=D), dst)


# -- merge_steps ---------------------------------------------------------------------


def random_writes(rng: random.Random, n: int) -> list[dict[str, StepRecord]]:
    keys = [f"s{i}" for i in range(6)]
    return [
        {
            k: StepRecord(id=k, status=rng.choice(list(StepStatus)), attempts=rng.randint(0, 9))
            for k in rng.sample(keys, rng.randint(0, len(keys)))
        }
        for _ in range(n)
    ]


def summary(records: StepRecords) -> tuple[dict[str, StepStatus], int, set[str]]:
    return (
        {k: records.status_of(k) for k in records},
        records.attempts_total,
        records.open_ids,
    )


@pytest.mark.parametrize("seed", range(25))
def test_merge_steps_gives_the_same_result_however_writes_are_batched(seed: int) -> None:
    rng = random.Random(seed)
    start = random_writes(rng, 1)[0]
    writes = random_writes(rng, rng.randint(0, 8))
    cut = rng.randint(0, len(writes))
    xs, ys = writes[:cut], writes[cut:]

    batched = merge_steps(merge_steps(start, xs), ys)
    assert batched == merge_steps(start, xs + ys)
    one_by_one: Any = merge_steps(start, [])
    for w in writes:
        one_by_one = merge_steps(one_by_one, [w])
    assert one_by_one == merge_steps(start, writes)
    # The summaries kept beside the records agree with the records themselves.
    plain = {k: r for k, r in batched.items()}
    assert summary(batched) == (
        {k: r.status for k, r in plain.items()},
        sum(r.attempts for r in plain.values()),
        {k for k, r in plain.items() if r.status not in (D, StepStatus.SKIPPED)},
    )
    assert summary(one_by_one) == summary(batched)


def random_dag(rng: random.Random, n: int) -> PlanSteps:
    """n steps, each depending on up to three earlier ones."""
    return PlanSteps(
        PlanStep(
            id=f"s{i}",
            tool="noop",
            depends_on=rng.sample([f"s{j}" for j in range(i)], min(i, rng.randint(0, 3))),
        )
        for i in range(n)
    )


def ready_by_scan(records: StepRecords, index: PlanSteps) -> set[int]:
    """The never-started steps whose dependencies are all done or skipped, by a full scan."""
    settled = {D, StepStatus.SKIPPED}
    return {
        i
        for i, step in enumerate(index)
        if step.id not in records and all(records.status_of(d) in settled for d in step.depends_on)
    }


@pytest.mark.parametrize("seed", range(40))
def test_ready_steps_kept_by_the_writes_agree_with_a_full_scan(seed: int) -> None:
    """The frontier each write keeps up to date (what the scheduler reads instead of
    scanning a long plan's waiting steps) equals a scan of the whole plan after every
    write, along branches that share a parent, when a settled step is reopened, and when
    the plan changes."""
    rng = random.Random(seed)
    index = random_dag(rng, 12)
    records: StepRecords = merge_steps({}, [])
    assert records.ready_positions(index) == ready_by_scan(records, index)
    for _ in range(30):
        branch = records  # a second child of the same parent must not see this one's writes
        ids = rng.sample([f"s{i}" for i in range(12)], rng.randint(1, 3))
        write = {k: StepRecord(id=k, status=rng.choice(list(StepStatus))) for k in ids}
        records = merge_steps(records, [write])
        assert records.ready_positions(index) == ready_by_scan(records, index)
        assert branch.ready_positions(index) == ready_by_scan(branch, index)
        if rng.random() < 0.1:  # a replan: another plan over the same records
            index = random_dag(rng, 12)
            assert records.ready_positions(index) == ready_by_scan(records, index)


def test_a_long_chain_schedules_only_its_next_step() -> None:
    index = PlanSteps(
        PlanStep(id=f"s{i}", tool="noop", depends_on=[f"s{i - 1}"] if i else [])
        for i in range(2000)
    )
    state = RunState(plan=Plan(steps=index))
    assert state.schedulable_positions() == [0]
    done = {f"s{i}": StepRecord(id=f"s{i}", status=D) for i in range(700)}
    state = state.model_copy(update={"steps": merge_steps(state.steps, [done])})
    assert state.schedulable_positions() == [700]
    running = {"s700": StepRecord(id="s700", status=StepStatus.RUNNING)}
    state = state.model_copy(update={"steps": merge_steps(state.steps, [running])})
    assert state.schedulable_positions() == [700]
    finished = {"s700": StepRecord(id="s700", status=D)}
    state = state.model_copy(update={"steps": merge_steps(state.steps, [finished])})
    assert state.schedulable_positions() == [701]


def test_merge_steps_later_write_wins_and_current_is_not_changed() -> None:
    a, b, c = (StepRecord(id=k) for k in "abc")
    a2, a3 = StepRecord(id="a", attempts=2), StepRecord(id="a", attempts=3)
    current = merge_steps({}, [{"a": a, "b": b}])

    merged = merge_steps(current, [{"a": a2}, {"c": c}, {"a": a3}])

    assert merged == {"a": a3, "b": b, "c": c}
    assert merged.attempts_total == 3
    assert current == {"a": a, "b": b}
    assert current.attempts_total == 0
    assert merge_steps(current, []) == current


def test_records_read_from_a_checkpoint_decode_only_when_read() -> None:
    serde = checkpoint_serde(None)
    done = StepRecord(id="a", status=D, attempts=2)
    records = merge_steps({}, [{"a": done, "b": StepRecord(id="b", status=StepStatus.FAILED)}])

    loaded = serde.loads_typed(serde.dumps_typed(records))

    assert isinstance(loaded, StepRecords)
    assert loaded.decoded() == 0
    assert loaded.status_of("a") is D
    assert loaded.status_of("zz") is StepStatus.PENDING
    assert loaded.attempts_total == 2
    assert loaded.open_ids == {"b"}
    assert loaded["a"] == done
    assert loaded.decoded() == 1  # reading "a" decoded only "a"
    assert loaded == records


def test_plan_steps_read_from_a_checkpoint_decode_only_when_read() -> None:
    serde = checkpoint_serde(None)
    steps = [
        PlanStep(id=f"s{i}", tool="noop", depends_on=[f"s{i - 1}"] if i else []) for i in range(5)
    ]
    plan = Plan(steps=steps, version=3)

    loaded = serde.loads_typed(serde.dumps_typed(plan))

    assert isinstance(loaded.steps, PlanSteps)
    assert loaded.index().ids == [s.id for s in steps]
    assert loaded.steps.decoded() == 0
    assert loaded.step("s3") == steps[3]
    assert loaded.steps.decoded() == 1
    assert loaded.index().children == {f"s{i}": [f"s{i + 1}"] for i in range(4)}
    assert loaded == plan
    assert loaded.version == 3
    assert Plan.model_validate(loaded.model_dump()) == plan


# -- append_messages -----------------------------------------------------------------


def message_writes() -> list[Any]:
    """Fresh messages without ids, as nodes write them (a new list per replay)."""
    return [
        [HumanMessage("copy the files")],
        [AIMessage("Plan v1 (declared), 2 steps"), AIMessage("step a done")],
        AIMessage("Run done"),
        [{"role": "user", "content": "thanks"}],
    ]


def test_append_messages_gives_the_same_ids_when_replayed_twice() -> None:
    first = append_messages([], message_writes())
    second = append_messages([], message_writes())

    assert [m.id for m in first] == ["m0", "m1", "m2", "m3", "m4"]
    assert [(m.id, m.type, m.text) for m in first] == [(m.id, m.type, m.text) for m in second]


def test_append_messages_ids_do_not_depend_on_batching() -> None:
    writes = message_writes()
    for cut in range(len(writes) + 1):
        batched = append_messages(append_messages([], writes[:cut]), writes[cut:])
        assert [m.id for m in batched] == [m.id for m in append_messages([], writes)]


def test_append_messages_keeps_given_ids_and_replaces_by_id() -> None:
    writes: list[Any] = [[HumanMessage("v1", id="goal")], [AIMessage("x")]]
    first = append_messages([], writes)
    again = append_messages(first, [[HumanMessage("v2", id="goal")]])

    assert [m.id for m in first] == ["goal", "m1"]
    assert [(m.id, m.text) for m in again] == [("goal", "v2"), ("m1", "x")]


def test_message_ids_are_stable_across_separate_loads_of_a_run(db_url: str, workdir: Path) -> None:
    plan = Plan(steps=[PlanStep(id="a", tool="noop"), PlanStep(id="b", tool="noop")])
    with Onward(db_url) as ow:
        tid = ow.run(plan=plan).thread_id
        first = [(m.id, m.text) for m in ow.state(tid).messages]
    with Onward(db_url) as reopened:
        second = [(m.id, m.text) for m in reopened.state(tid).messages]

    assert first == second
    ids = [i for i, _ in first]
    assert None not in ids
    assert len(set(ids)) == len(ids) >= 3  # goal, plan, report


# -- strict msgpack deserialization ----------------------------------------------------

STRICT = {"LANGGRAPH_STRICT_MSGPACK": "true"}
SERDE_WARNINGS = (
    # langgraph/checkpoint/serde/jsonplus.py, the texts it logs for types it will not
    # (or may soon not) rebuild from a checkpoint.
    "Blocked deserialization of",
    "not in allowed_msgpack_modules",
    "Deserializing unregistered type",
    "not in the deserialization allowlist",
    "Could not reconstruct",
    "Failed to revive",
)

DONE_PLAN = """\
goal: strict round trip
acceptance:
  - {check: file_exists, path: out.txt}
  - {check: matches, path: out.txt, pattern: "^hello"}
steps:
  - id: write
    tool: write_file
    args: {path: out.txt, content: "hello strict\\n"}
    output: written
  - id: echo
    tool: noop
    args: {value: "${written.bytes}"}
    depends_on: [write]
    output: echoed
    checks:
      - {check: json_path, path: value, equals: 13}
      - {check: equals, field: value, artifact: written, artifact_field: bytes}
"""
FAILED_PLAN = """\
goal: strict round trip of a failure
steps:
  - id: ok
    tool: noop
    args: {value: 1}
  - id: bad
    tool: noop
    args: {value: 2}
    depends_on: [ok]
    checks:
      - {check: json_path, path: value, equals: 3}
"""


def serde_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if any(w in line for w in SERDE_WARNINGS)]


@pytest.mark.parametrize(
    ("plan", "code", "status", "steps"),
    [
        pytest.param(DONE_PLAN, 0, "done", {"write": "done", "echo": "done"}, id="done"),
        pytest.param(FAILED_PLAN, 1, "failed", {"ok": "done", "bad": "failed"}, id="failed"),
    ],
)
def test_run_state_round_trips_under_strict_msgpack_without_warnings(
    run_cli: Any, workdir: Path, plan: str, code: int, status: str, steps: dict[str, str]
) -> None:
    (workdir / "p.yaml").write_text(plan, encoding="utf-8")

    ran = run_cli("run", "--plan", "p.yaml", "--json", "--no-escalate", env=STRICT)
    assert ran.code == code, ran.stderr
    assert serde_warnings(ran.stderr) == []
    tid = ran.json()["thread_id"]

    shown = run_cli("status", tid, "--json", env=STRICT)
    assert shown.code == 0, shown.stderr
    assert serde_warnings(shown.stderr) == []
    assert shown.stdout == ran.stdout, "a new process reads back exactly what the run saw"
    view = shown.json()
    assert view["status"] == status
    assert {s["id"]: s["status"] for s in view["steps"]} == steps
    if status == "failed":
        assert view["failure"]["step_id"] == "bad"
        assert view["steps"][1]["failure_class"] == "validation"
    else:
        assert set(view["artifacts"]) == {"written", "echoed"}


READ_WITHOUT_ALLOWLIST = """
import sqlite3, sys
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from onward.checkpointing.format import COMPRESSED, inflate
row = sqlite3.connect(sys.argv[1]).execute(
    "SELECT type, checkpoint FROM checkpoints WHERE thread_id = ?"
    " ORDER BY checkpoint_id DESC LIMIT 1", (sys.argv[2],)
).fetchone()
type_, blob = row
if type_ == COMPRESSED:  # deflated by onward's serializer: inflate, then decode as LangGraph
    type_, blob = "msgpack", inflate(blob, COMPRESSED)
JsonPlusSerializer().loads_typed((type_, blob))
"""


def test_strict_mode_warning_is_visible_when_onward_types_are_not_allowlisted(
    run_cli: Any, workdir: Path, sqlite_url: str
) -> None:
    """The control for the test above: the same checkpoint read by a saver *without*
    onward's allowlist makes LangGraph log the warning on stderr, so its absence there
    means the allowlist did its job, not that warnings were hidden."""
    (workdir / "p.yaml").write_text(FAILED_PLAN, encoding="utf-8")
    tid = run_cli(
        "run", "--plan", "p.yaml", "--json", "--no-escalate", env=STRICT, db=sqlite_url
    ).json()["thread_id"]

    proc = subprocess.run(
        [sys.executable, "-c", READ_WITHOUT_ALLOWLIST, str(sqlite_path(sqlite_url)), tid],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=cli_env(**STRICT),
        timeout=60,
    )

    assert proc.returncode == 0, proc.stderr
    assert any(
        "Blocked deserialization of onward.model.state." in w for w in serde_warnings(proc.stderr)
    )


def test_every_kind_of_field_reads_back_the_same_from_a_lazy_checkpoint() -> None:
    serde = checkpoint_serde(None)
    at = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
    failure = StepFailure(
        failure_class=FailureClass.TRANSIENT, message="timeout", hint="retry", attempt=2, at=at
    )
    ref = ArtifactRef(name="out", uri="inline:", sha256="a" * 64, size=2, summary="2", body="42")
    record = StepRecord(
        id="a",
        status=StepStatus.FAILED,
        attempts=3,
        effect_key="k",
        output=ref,
        failure=failure,
        findings=["f"],
        started_at=at,
        ended_at=at,
        note="n",
        not_before=at,
        replans=1,
        streak=2,
        attempt_floor=1,
        history=[failure],
    )
    step = PlanStep(
        id="a",
        tool="write_file",
        args={"path": "x", "raw": b"\x00\xff", "when": at, "n": [1, 2.5, None]},
        checks=[FileExists(path="x"), Equals(field="k", value={"k": [1]})],
        output="out",
        retry=RetryPolicy(max_attempts=5),
        judge=True,
    )
    records = merge_steps({}, [{"a": record}])
    plan = Plan(steps=[step])
    refs = merge_artifacts({}, [{"out": ref}])

    loaded = serde.loads_typed(serde.dumps_typed([records, plan, refs]))

    assert loaded[0]["a"] == record
    assert loaded[1].step("a") == step
    assert loaded[2]["out"] == ref


def test_scheduling_a_loaded_long_run_decodes_only_its_open_steps(tmp_path: Path) -> None:
    """Resume does not grow with history: after a load, the gate, the budget and the loop
    guard read only the steps not done (here the last two of 500), never the others."""
    n = 500
    plan = Plan(
        steps=[
            PlanStep(
                id=f"s{i}", tool="noop", args={"value": i}, depends_on=[f"s{i - 1}"] if i else []
            )
            for i in range(n)
        ]
    )
    done = StepRecord(id="x", status=D, attempts=1)
    records = merge_steps(
        {}, [{f"s{i}": done.model_copy(update={"id": f"s{i}"}) for i in range(n - 2)}]
    )
    serde = checkpoint_serde(None)
    loaded_steps, loaded_plan = serde.loads_typed(serde.dumps_typed([records, plan]))
    state = RunState(
        plan=loaded_plan,
        steps=loaded_steps,
        status=RunStatus.RUNNING,
        budget=Budget(max_steps=10_000),
    )
    registry = default_registry

    sends = Scheduler(NodeDeps(registry=registry, artifacts=ArtifactStore(tmp_path)))(state)
    limit = superstep_limit(state, registry)
    uses = budget.usage(state, datetime.now(UTC))

    assert isinstance(sends, list)
    assert [s.arg.step.id for s in sends] == [f"s{n - 2}"]  # the one ready step
    assert limit >= n
    assert [u.used for u in uses] == [n - 2]  # every done step's attempt is counted
    assert state.plan.steps.decoded() <= 2  # the two open steps at most
    assert state.steps.decoded() == 0
