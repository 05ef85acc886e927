"""Workers: real ``onward worker`` processes claim submitted runs from one store.

The fleet test submits 30 runs with side effects (write_file, notify) to a Postgres store,
starts 3 workers, SIGKILLs one while it holds a run's lease, and checks that every run
finishes, every effect happened exactly once, and the lease events never show two live
drivers of one run. The drain test sends SIGTERM mid-run and checks that the worker stops
on a saved superstep, releases its lease, and that another worker finishes the run without
repeating a step.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from onward import Onward
from onward.model.state import Plan, PlanStep, RunStatus, StepStatus
from onward.policies.run import Deadline, RunPolicy
from onward.store.database import Store
from tests.support import zygote
from tests.support.common import cli_env, onward_cmd, postgres_schema
from tests.support.fleet import SHORT_LEASE, effect_plan, journal, start_worker
from tests.support.paths import SUPPORT

FAILURE_TOOLS = str(SUPPORT / "failure_tools.py")
HITL_TOOLS = str(SUPPORT / "hitl_tools.py")

pytestmark = pytest.mark.crash


def open_calls(workdir: Path, pid: int) -> set[tuple[str, str]]:
    """(thread, step) of the tool calls ``pid`` has started and not finished."""
    started: set[tuple[str, str]] = set()
    for line in journal(workdir):
        if line["pid"] == pid:
            key = (line["thread"], line["step"])
            (started.add if line["phase"] == "start" else started.discard)(key)
    return started


def assert_one_driver_at_a_time(events: list[tuple[Any, str, str]]) -> int:
    """Replay a run's lease events; returns how many takeovers there were. A new driver
    only acquires after the previous one released, or takes over an expired lease."""
    holder: str | None = None
    takeovers = 0
    for _at, kind, detail in events:
        if kind == "lease_acquired":
            assert holder is None, f"{detail} acquired while {holder} held the lease"
            holder = detail
        elif kind == "lease_released":
            assert holder == detail, f"{detail} released a lease held by {holder}"
            holder = None
        elif kind == "lease_taken_over":
            previous = detail.split("from ", 1)[1].split(" (expired", 1)[0]
            assert holder == previous, f"took over from {previous}, but {holder} held it"
            holder = None
            takeovers += 1
    return takeovers


def test_fleet_of_three_workers_survives_a_killed_worker(workdir: Path) -> None:
    with postgres_schema() as db:
        thread_ids = []
        with Onward(db, model=None) as ow:
            for n in range(29):
                effect_plan(workdir / f"plan{n}.yaml", n)
                thread_ids.append(ow.submit(plan=workdir / f"plan{n}.yaml"))
        # The 30th through the CLI: `onward submit` prints the thread id.
        effect_plan(workdir / "plan29.yaml", 29)
        out = subprocess.run(
            onward_cmd("submit", "--plan", "plan29.yaml", "--db", db),
            cwd=workdir,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        thread_ids.append(out.stdout.strip())

        env = {"ONWARD_EXECUTION_LOG": str(workdir / "journal.jsonl")}
        workers = [
            start_worker(workdir, db, "--concurrency", "2", "--exit-when-idle", **env)
            for _ in range(3)
        ]
        victim = workers[0]
        with Store(db) as store:
            # Kill the victim in the middle of a tool call (its journal has a start and no
            # end), after some runs finished: it holds that run's lease then.
            deadline = time.monotonic() + 60
            killed = False
            while time.monotonic() < deadline and not killed:
                done = sum(1 for r in store.list_runs() if r.status is RunStatus.DONE)
                if done >= 3 and open_calls(workdir, victim.pid):
                    victim.send_signal(signal.SIGKILL)
                    killed = True
                time.sleep(0.01)
            assert killed, "the victim never made a tool call"
            victim.wait(10)
            # The victim is dead: the leases it still owns are the runs it was driving.
            orphaned = [
                tid for tid, lease in store.leases.all().items() if f":{victim.pid}:" in lease.owner
            ]
            assert orphaned, "the victim held no lease when it was killed"
            for w in workers[1:]:
                w.wait(180)
                assert w.returncode == 0, w.stderr.read() if w.stderr else ""

            # Every run finished; effects once each.
            for tid in thread_ids:
                row = store.get_run(tid)
                assert row is not None
                assert row.status is RunStatus.DONE, (tid, row.status)
            outbox = [
                json.loads(x)["message"]
                for x in (workdir / "outbox.jsonl").read_text().splitlines()
            ]
            assert Counter(outbox) == Counter(f"run {n} done" for n in range(30))
            for n in range(30):
                assert (workdir / f"out/run-{n}.txt").read_text() == str(n)
            for tid in thread_ids:
                effects = store.ledger.for_thread(tid)
                assert sorted(e.step_id for e in effects) == ["notify", "write"]
                assert all(e.status.value == "completed" for e in effects)
            assert store.queue() == []

            # No run had two live drivers; the killed worker's run was taken over.
            takeovers = {
                tid: assert_one_driver_at_a_time(store.leases.events(tid)) for tid in thread_ids
            }
            assert all(takeovers[tid] >= 1 for tid in orphaned), (orphaned, takeovers)

        # The journal agrees: a run's tool calls never overlap across processes.
        calls: dict[str, list[dict[str, Any]]] = {}
        for line in journal(workdir):
            calls.setdefault(line["thread"], []).append(line)
        for tid, lines in calls.items():
            open_by: dict[tuple[str, int], int] = {}
            for line in lines:
                if line["phase"] == "start":
                    others = {p for (_, p) in open_by if p != line["pid"]}
                    alive = others - {victim.pid}
                    assert not alive, f"{tid}: {line['pid']} started while {alive} were calling"
                    open_by[(line["step"], line["pid"])] = 1
                else:
                    open_by.pop((line["step"], line["pid"]), None)
        # The survivors drove more than one run each (the queue spread the work).
        assert len({line["pid"] for line in journal(workdir)}) >= 2


def test_sigterm_drains_then_another_worker_finishes(db_url: str, workdir: Path) -> None:
    steps = [
        {"id": f"s{i}", "tool": "write_file", "args": {"path": f"s{i}.txt", "content": str(i)}}
        for i in range(6)
    ]
    for i in range(1, 6):
        steps[i]["depends_on"] = [f"s{i - 1}"]
    (workdir / "plan.yaml").write_text(yaml.safe_dump({"goal": "six", "steps": steps}))
    with Onward(db_url, model=None) as ow:
        tid = ow.submit(plan=workdir / "plan.yaml")
    env = {
        "ONWARD_EXECUTION_LOG": str(workdir / "journal.jsonl"),
        "ONWARD_FAULT_TOOL_DELAY": "0.5",  # every tool call takes half a second
    }
    first = start_worker(workdir, db_url, **env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        started = [x for x in journal(workdir) if x["phase"] == "start"]
        if len(started) >= 2:
            break
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)
    first.wait(30)
    assert first.returncode == 0
    lines = journal(workdir)
    started_then = [x["step"] for x in lines if x["phase"] == "start"]
    ended_then = [x["step"] for x in lines if x["phase"] == "end"]
    # The step in flight finished; nothing started after it.
    assert started_then == ended_then
    assert 2 <= len(started_then) < 6
    with Store(db_url) as store:
        assert store.leases.get(tid) is None  # released
        kinds = [k for _, k, _ in store.leases.events(tid)]
        assert kinds[-1] == "lease_released"
        assert [e.kind for e in store.events.list(tid, ["drained"])] == ["drained"]
        (queued,) = store.queue()
        assert queued.ready_at is not None
        assert queued.ready_at <= time.time()

    second = start_worker(workdir, db_url, "--exit-when-idle", **env)
    second.wait(60)
    assert second.returncode == 0
    with Onward(db_url, model=None) as ow:
        assert ow.get(tid).status is RunStatus.DONE
    starts = Counter(x["step"] for x in journal(workdir) if x["phase"] == "start")
    assert starts == Counter(f"s{i}" for i in range(6))  # no step ran twice
    assert next(x["pid"] for x in journal(workdir)) == first.pid
    assert {x["pid"] for x in journal(workdir)} == {first.pid, second.pid}


def test_several_workers_share_a_store_and_honour_delayed_retries(
    db_url: str, workdir: Path
) -> None:
    """Two workers on one machine (SQLite or Postgres), 8 runs; a run whose step must wait
    (a flaky tool's backoff) is requeued for then instead of holding a slot."""
    for n in range(8):
        effect_plan(workdir / f"plan{n}.yaml", n, pause=0.05)
    plan = yaml.safe_load((workdir / "plan0.yaml").read_text())
    backoff = {"max_attempts": 4, "initial_delay": 0.4, "max_delay": 0.4, "jitter": False}
    plan["steps"].append({"id": "flaky", "tool": "flaky", "args": {"times": 2}, "retry": backoff})
    (workdir / "plan0.yaml").write_text(yaml.safe_dump(plan))
    with Onward(db_url, model=None, tool_modules=[FAILURE_TOOLS]) as ow:
        tids = [ow.submit(plan=workdir / f"plan{n}.yaml") for n in range(8)]
    log = {"ONWARD_EXECUTION_LOG": str(workdir / "journal.jsonl")}
    workers = [start_worker(workdir, db_url, "--exit-when-idle", **log) for _ in range(2)]
    for w in workers:
        w.wait(120)
        assert w.returncode == 0, w.stderr.read() if w.stderr else ""
    drives = [
        json.loads(line)
        for w in workers
        for line in (w.stdout.read() if w.stdout else "").splitlines()
        if "outcome" in line
    ]
    assert {d["thread_id"] for d in drives} == set(tids)
    first_run = [d["outcome"] for d in drives if d["thread_id"] == tids[0]]
    # Each failure's retry waits its 0.4 s backoff, and a drive that reaches the wait while
    # it is still ahead gives the slot back ("suspended until"); on a loaded machine the
    # second backoff may be over by the time the drive gets there, so it runs at once.
    assert 1 <= sum(o.startswith("suspended until") for o in first_run) <= 2
    assert first_run.count("done") == 1  # (two workers: their logs are not in time order)
    flaky = sorted(
        x["t"] for x in journal(workdir) if x["phase"] == "start" and x["step"] == "flaky"
    )
    assert len(flaky) == 3  # two failures, then the success
    assert all(b - a >= 0.4 for a, b in itertools.pairwise(flaky))  # no retry before its time
    assert all([d["outcome"] for d in drives if d["thread_id"] == t] == ["done"] for t in tids[1:])
    with Onward(db_url, model=None) as ow:
        assert all(ow.get(t).status is RunStatus.DONE for t in tids)
    outbox = (workdir / "outbox.jsonl").read_text().splitlines()
    assert len(outbox) == 8


def test_worker_adopts_a_run_whose_driver_died(db_url: str, workdir: Path) -> None:
    """A run started by `onward run` (not submitted) is SIGKILLed mid-way; a worker finds
    the expired lease, queues the run and finishes it, repeating no step."""
    steps = [
        {"id": f"s{i}", "tool": "write_file", "args": {"path": f"s{i}.txt", "content": str(i)}}
        for i in range(4)
    ]
    (workdir / "plan.yaml").write_text(yaml.safe_dump({"goal": "four", "steps": steps}))
    env = {
        **SHORT_LEASE,
        "ONWARD_EXECUTION_LOG": str(workdir / "journal.jsonl"),
        "ONWARD_FAULT_TOOL_DELAY": "0.3",
    }
    driver = zygote.spawn(
        ["run", "--plan", "plan.yaml", "--db", db_url, "--json", "--max-concurrency", "1"],
        cwd=workdir,
        env=cli_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(journal(workdir)) < 3:
        time.sleep(0.02)
    driver.send_signal(signal.SIGKILL)
    driver.wait(10)
    with Onward(db_url, model=None) as ow:
        # An idle worker exits at once: start it once the dead driver's lease has expired
        # (a worker that starts in under the TTL would find nothing to adopt yet).
        (run,) = ow.list_runs()
        lease = ow.store.leases.get(run.thread_id)
        assert lease is not None
        while lease.expires_at > ow.store.leases.clock():
            time.sleep(0.05)
    worker = start_worker(workdir, db_url, "--exit-when-idle", **env)
    worker.wait(60)
    assert worker.returncode == 0
    with Onward(db_url, model=None) as ow:
        (run,) = ow.list_runs()
        assert ow.get(run.thread_id).status is RunStatus.DONE
        assert [e.kind for e in ow.store.events.list(run.thread_id, ["adopted"])] == ["adopted"]
        ends = Counter(x["step"] for x in journal(workdir) if x["phase"] == "end")
        assert set(ends) == {f"s{i}" for i in range(4)}
        assert max(ends.values()) == 1  # a step whose end was recorded never ran again


def test_worker_applies_an_approval_deadline_while_the_run_waits(
    db_url: str, workdir: Path
) -> None:
    """A queued run waits for an approval that expires after 1 s: the worker parks it until
    the deadline, then the sweep rejects the step and the worker finishes the run."""
    plan = Plan(
        steps=[
            PlanStep(id="pay", tool="pay", args={"amount": 3, "to": "al"}),
            PlanStep(id="after", tool="slow", args={"value": 1}),
        ]
    )
    policy = RunPolicy(deadline=Deadline(expire_after=timedelta(seconds=1)))
    with Onward(db_url, model=None, tool_modules=[HITL_TOOLS]) as ow:
        tid = ow.submit(plan=plan, policy=policy)
    # Not --exit-when-idle: a run that waits for a person is not work a batch worker
    # waits for. This worker stays up, parks the run, and comes back at the deadline.
    worker = start_worker(workdir, db_url)
    with Onward(db_url, model=None, tool_modules=[HITL_TOOLS]) as ow:
        deadline = time.monotonic() + 120
        while ow.get(tid).status is not RunStatus.DONE and time.monotonic() < deadline:
            time.sleep(0.1)
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    outcomes = [json.loads(x)["outcome"] for x in out.splitlines() if "outcome" in x]
    assert outcomes[0] == "waiting for a person"
    assert outcomes[-1] == "done", (outcomes, err[-3000:])
    with Onward(db_url, model=None, tool_modules=[HITL_TOOLS]) as ow:
        view = ow.get(tid)
        assert view.status is RunStatus.DONE
        steps = {s.id: s.status for s in view.steps}
        assert steps == {"pay": StepStatus.SKIPPED, "after": StepStatus.DONE}
        assert ow.store.events.list(tid, ["approval_expired"])
    assert not (workdir / "payments.jsonl").exists()


def test_an_answer_during_a_workers_drive_is_not_parked_again(db_url: str, workdir: Path) -> None:
    """A worker claimed a run and found it waiting; a person answers before the worker
    requeues it: the answer's wake-up wins, the run stays ready."""
    with Onward(db_url, model=None) as ow:
        (workdir / "plan.yaml").write_text(
            yaml.safe_dump({"goal": "g", "steps": [{"id": "a", "tool": "noop"}]})
        )
        tid = ow.submit(plan=workdir / "plan.yaml")
        assert ow.store.claim("worker-a", hold=30) == tid
        ow.store.wake(tid)  # the answer
        assert not ow.store.requeue(tid, None, "worker-a", for_person=True)
        (row,) = ow.store.queue()
        assert row.ready_at is not None
        assert row.ready_at <= time.time()
        assert ow.store.pending_work()


def test_a_run_that_finishes_as_a_drain_comes_in_is_done_not_requeued(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM right as a drive's last superstep ends: the run is finished, so the worker
    reports it done and dequeues it, instead of calling it drained and queueing it again."""
    from onward.client.worker import Worker, WorkerPolicy

    with Onward(db_url, model=None) as ow:
        tid = ow.submit(plan=Plan(steps=[PlanStep(id="a", tool="noop")]), workdir=workdir)
    outcomes: list[str] = []
    worker = Worker(
        db_url,
        policy=WorkerPolicy(exit_when_idle=True, poll=0.05),
        model=None,
        on_drive=lambda _tid, outcome: outcomes.append(outcome),
    )
    drive = Onward.drive

    def drive_then_drain(self: Onward, *args: Any, **kwargs: Any) -> Any:
        view = drive(self, *args, **kwargs)
        worker.drain()  # the signal lands after the run's last superstep
        return view

    monkeypatch.setattr(Onward, "drive", drive_then_drain)
    report = worker.run()
    assert outcomes == ["done"]
    assert report.finished == [tid]
    with Onward(db_url, model=None) as ow:
        assert ow.get(tid).status is RunStatus.DONE
        assert ow.store.queue() == []


def test_a_deadline_that_passes_during_the_drive_is_applied_not_parked_behind_the_reminder(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine the drive that asks the question can end after the question's
    expiry: the worker must still come back for the expiry (applied by the next drive's
    sweep), not park the run until its next future deadline, the reminder hours later."""
    from onward.client.worker import Worker, WorkerPolicy

    plan = Plan(
        steps=[
            PlanStep(id="pay", tool="pay", args={"amount": 3, "to": "al"}),
            PlanStep(id="after", tool="slow", args={"value": 1}),
        ]
    )
    policy = RunPolicy(deadline=Deadline(expire_after=timedelta(seconds=0.2)))
    with Onward(db_url, model=None, tool_modules=[HITL_TOOLS]) as ow:
        tid = ow.submit(plan=plan, policy=policy, workdir=workdir)
    outcomes: list[str] = []

    def on_drive(_tid: str, outcome: str) -> None:
        outcomes.append(outcome)
        if outcome == "done":
            worker.drain()

    worker = Worker(
        db_url,
        policy=WorkerPolicy(poll=0.05),
        model=None,
        tool_modules=[HITL_TOOLS],
        on_drive=on_drive,
    )
    drive = Onward.drive

    def slow_drive(self: Onward, *args: Any, **kwargs: Any) -> Any:
        view = drive(self, *args, **kwargs)
        time.sleep(0.5)  # the machine is busy: the expiry passes before the worker looks
        return view

    monkeypatch.setattr(Onward, "drive", slow_drive)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    runner.join(30)
    worker.drain()  # (a no-op once the run is done)
    runner.join(30)
    assert not runner.is_alive()
    assert outcomes == ["waiting for a person", "done"]
    with Onward(db_url, model=None, tool_modules=[HITL_TOOLS]) as ow:
        steps = {s.id: s.status for s in ow.get(tid).steps}
        assert steps == {"pay": StepStatus.SKIPPED, "after": StepStatus.DONE}
        assert ow.store.events.list(tid, ["approval_expired"])


@pytest.mark.parametrize("after", ["no lease", "an expired lease"])
def test_a_claim_holds_from_its_drives_lease_when_the_drive_is_slow_to_take_it(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """A worker's claim lasts its hold from when its drive takes the run's lease, not only
    from the claim: a drive slow to start (a loaded host) past the hold still keeps the
    run from a second worker, who would else find it busy and requeue it behind the
    first's back (clean-clone CI of c695631). Both ways a lease is taken: where there is
    none, and taken over from a driver whose lease expired."""
    monkeypatch.setenv("ONWARD_LEASE_TTL", "0.2")
    plan = Plan(steps=[PlanStep(id="a", tool="noop")])
    with Onward(db_url, model=None) as ow:
        tid = ow.submit(plan=plan, workdir=workdir)
        if after == "an expired lease":
            ow.store.leases.acquire(tid, "gone-driver")
            ow.store.leases.fences.drop(tid, "gone-driver")
            time.sleep(0.3)
        assert ow.store.claim("first", hold=1.0) == tid
        time.sleep(1.2)  # the drive starts after the claim's hold has passed
        ow.store.leases.acquire(tid, "first-driver")
        assert ow.store.claim("second", hold=30) is None
        (row,) = ow.store.queue()
        assert row.claimed_by == "first"


def test_a_claim_held_through_a_step_longer_than_the_lease_ttl_is_not_stolen(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's queue claim is renewed with its lease heartbeat: while one worker drives
    a step that outlasts the claim's hold (the lease TTL), a second worker polling the
    queue never claims the run, so it never finds it busy and requeues it behind the
    first worker's back. One drive, one lease holder, no takeover."""
    from onward.client.worker import Worker, WorkerPolicy

    monkeypatch.setenv("ONWARD_LEASE_TTL", "0.6")
    monkeypatch.setenv("ONWARD_HEARTBEAT", "0.1")
    # The step lasts four holds: without the renewal the claim lapses three times over.
    plan = Plan(steps=[PlanStep(id="long", tool="wait", args={"seconds": 2.4})])
    with Onward(db_url, model=None) as ow:
        tid = ow.submit(plan=plan, workdir=workdir)
    outcomes: list[tuple[str, str]] = []
    workers = [
        Worker(
            db_url,
            policy=WorkerPolicy(exit_when_idle=True, poll=0.02),
            model=None,
            on_drive=lambda t, outcome, name=name: outcomes.append((name, outcome)),
        )
        for name in ("first", "second")
    ]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    threads[0].start()
    with Onward(db_url, model=None) as ow:  # the first worker holds the run: now the second
        while not any(e[1] == "lease_acquired" for e in ow.store.leases.events(tid)):
            time.sleep(0.01)
    threads[1].start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert [o for _, o in outcomes] == ["done"], outcomes
    with Onward(db_url, model=None) as ow:
        events = ow.store.leases.events(tid)
        assert ow.get(tid).status is RunStatus.DONE
        assert ow.store.queue() == []
    assert assert_one_driver_at_a_time(events) == 0
    assert [k for _, k, _ in events].count("lease_acquired") == 1
