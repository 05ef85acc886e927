"""A server killed mid-run (SIGKILL, or SIGTERM: it drains): the restarted server finishes
the run, its API record agrees with the checkpoint, and every effect happened once. With
``--no-recover`` the restarted server leaves the run to another driver and only keeps the
record true."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import zygote
from tests.support.common import read_jsonl
from tests.support.security import TOKENS, auth
from tests.support.serve import HITL_TOOLS, free_port, start_server

PLAN = {
    "steps": [
        {"id": "a", "tool": "record", "args": {"label": "a"}},
        {"id": "b", "tool": "slow", "args": {"seconds": 4}, "depends_on": ["a"]},
        {"id": "c", "tool": "record", "args": {"label": "c"}, "depends_on": ["b"]},
    ]
}
ENV = {"ONWARD_API_TOKENS": TOKENS, "ONWARD_LEASE_TTL": "2", "ONWARD_HEARTBEAT": "0.5"}


def start(db_url: str, workdir: Path, port: int, *args: str) -> zygote.Process:
    return start_server(db_url, workdir, *args, port=port, **ENV)[0]


def start_recording_run(url: str, workdir: Path) -> str:
    """A background run of PLAN; returns once step a's effect happened (b is sleeping)."""
    with httpx.Client(base_url=url, headers=auth(), timeout=30) as api:
        tid = str(api.post("/threads", json={}).json()["thread_id"])
        body = {"assistant_id": "onward", "input": {"goal": "record", "plan": PLAN}}
        assert api.post(f"/threads/{tid}/runs", json=body).status_code == 200
    wait_for("step a's effect", lambda: read_jsonl(workdir / "effects.jsonl"), 60)
    return tid


def wait_for(what: str, check: object, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.crash
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_run_cut_off_by_a_server_crash_is_finished_by_the_restarted_server(
    db_url: str, workdir: Path, stop: signal.Signals
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start(db_url, workdir, port)
    try:
        tid = start_recording_run(url, workdir)
        time.sleep(0.5)  # step b is sleeping now
        os.kill(server.pid, stop)
        server.wait(30)
        assert [r["label"] for r in read_jsonl(workdir / "effects.jsonl")] == ["a"]

        server = start(db_url, workdir, port)
        with httpx.Client(base_url=url, headers=auth(), timeout=30) as api:

            def finished() -> bool:
                (run,) = api.get(f"/threads/{tid}/runs").json()
                return bool(run["status"] == "success")

            wait_for("the recovered run", finished)
            state = api.get(f"/threads/{tid}/state").json()
            assert state["values"]["status"] == "done"
            assert {s: r["status"] for s, r in state["values"]["steps"].items()} == {
                "a": "done",
                "b": "done",
                "c": "done",
            }
            assert api.get(f"/threads/{tid}").json()["status"] == "idle"
    finally:
        server.kill()
        server.wait(10)
    effects = Counter(r["label"] for r in read_jsonl(workdir / "effects.jsonl"))
    assert effects == {"a": 1, "c": 1}
    calls = Counter(r["label"] for r in read_jsonl(workdir / "calls.jsonl"))
    assert calls["a"] == 1  # finished before the kill: never called again


@pytest.mark.crash
def test_without_recovery_the_restarted_server_leaves_the_run_to_another_driver(
    db_url: str, workdir: Path, run_cli: Any
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start(db_url, workdir, port, "--no-recover")
    try:
        tid = start_recording_run(url, workdir)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)
        server = start(db_url, workdir, port, "--no-recover")
        with httpx.Client(base_url=url, headers=auth(), timeout=30) as api:

            def record() -> str:
                (run,) = api.get(f"/threads/{tid}/runs").json()
                return str(run["status"])

            time.sleep(5)  # lease TTL 2 s, sweeps every second: several sweeps pass
            assert record() == "running"
            assert [r["label"] for r in read_jsonl(workdir / "effects.jsonl")] == ["a"]
            resumed = run_cli("resume", tid, "--takeover", "--tools", HITL_TOOLS, "--json")
            assert resumed.code == 0, resumed.stderr
            wait_for("the record to agree", lambda: record() == "success", 30)
            assert api.get(f"/threads/{tid}/state").json()["values"]["status"] == "done"
    finally:
        server.kill()
        server.wait(10)
    assert Counter(r["label"] for r in read_jsonl(workdir / "effects.jsonl")) == {"a": 1, "c": 1}


def test_recovery_drives_orphans_but_waits_for_a_run_suspended_until_later(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: a sweep drives an orphaned run (no live lease) at once, leaves a run
    suspended until later for a later sweep (it would hold a pool slot asleep), and sets
    the record of a finished run from its state."""
    from datetime import timedelta

    from onward.graph.schedule import GATE
    from onward.model.state import Plan, PlanStep, RunStatus
    from onward.serve import create_app
    from onward.serve.limits import ServeLimits
    from onward.serve.recovery import Recovery
    from onward.serve.wire import ASSISTANT_ID
    from onward.store.runs import ApiRunStatus

    monkeypatch.setenv("ONWARD_LEASE_TTL", "0.1")  # records older than this are considered
    serving = create_app(
        db_url, workdir=workdir, model=None, limits=ServeLimits(run_slots=2, user_runs=1)
    ).state.serving
    clients, pool = serving.clients, serving.pool
    driven: list[str] = []
    recovery = Recovery(serving, drive=lambda active, *_a: driven.append(active.thread_id))
    plan = Plan(steps=[PlanStep(id="s", tool="noop")])
    runs = {}
    with clients.use() as ow:
        for name in ("orphan", "later", "finished"):
            tid = ow.start(plan=plan, workdir=workdir)
            ow.store.threads.create(tid, "alice", {})
            ow.store.threads.add_run(f"run-{name}", tid, ASSISTANT_ID, {})
            runs[name] = tid
        ow.drive(runs["finished"])
        state = ow.state(runs["later"])
        later = state.model_copy(
            update={"status": RunStatus.SUSPENDED, "resume_at": ow.clock() + timedelta(hours=1)}
        )
        values = {k: getattr(later, k) for k in type(later).model_fields}
        ow.graph.update_state(ow._config(runs["later"]), values, as_node=GATE)
    time.sleep(0.3)
    try:
        assert recovery.sweep() == [runs["orphan"]]
        wait_for("the orphan's drive", lambda: driven == [runs["orphan"]], 10)
        with clients.use() as ow:
            status = {r.run_id: r.status for r in ow.store.threads.unfinished_runs()}
            (finished,) = ow.store.threads.runs(runs["finished"])
        assert finished.status is ApiRunStatus.SUCCESS
        assert status == {"run-orphan": ApiRunStatus.RUNNING, "run-later": ApiRunStatus.RUNNING}
    finally:
        pool.close()
        clients.close()


def test_the_recovery_sweep_deletes_only_the_ended_threads_stateless_runs_left(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: only a thread the server logged as a stateless run's to delete goes,
    once its runs ended; a kept stateless thread, a user's own thread, another user's and
    a stateless thread whose run is still running (driven here) stay."""
    from onward.model.state import Plan, PlanStep
    from onward.observe.kinds import EventKind
    from onward.serve import create_app
    from onward.serve.limits import ServeLimits
    from onward.serve.recovery import Recovery
    from onward.serve.wire import ASSISTANT_ID
    from onward.store.runs import ApiRunStatus

    monkeypatch.setenv("ONWARD_LEASE_TTL", "0.1")  # ended runs older than this are looked at
    serving = create_app(
        db_url, workdir=workdir, model=None, limits=ServeLimits(run_slots=2, user_runs=1)
    ).state.serving
    clients, pool = serving.clients, serving.pool
    driven: list[str] = []
    recovery = Recovery(serving, drive=lambda active, *_a: driven.append(active.thread_id))
    plan = Plan(steps=[PlanStep(id="s", tool="noop")])
    tids = {}
    with clients.use() as ow:
        for name, owner in (
            ("left", "alice"),
            ("kept", "alice"),
            ("own", "alice"),
            ("other", "mallory"),
            ("running", "alice"),
        ):
            tid = ow.start(plan=plan, workdir=workdir)
            ow.store.threads.create(tid, owner, {})
            ow.store.threads.add_run(f"run-{name}", tid, ASSISTANT_ID, {})
            if name != "running":
                ow.drive(tid)
                ow.store.threads.set_run_status(f"run-{name}", ApiRunStatus.SUCCESS)
            if name in ("left", "running"):  # as the stateless routes log a thread to delete
                ow.store.events.record(tid, EventKind.STATELESS_THREAD, {"run_id": f"run-{name}"})
            tids[name] = tid
    time.sleep(0.3)
    try:
        assert recovery.sweep() == [tids["running"]]  # the orphan is driven, not deleted
        with clients.use() as ow:
            assert ow.store.threads.get(tids["left"]) is None
            assert ow.store.get_run(tids["left"]) is None  # its checkpoints and run too
            assert ow.store.events.list(tids["left"]) == []
            for name in ("kept", "own", "other", "running"):
                assert ow.store.threads.get(tids[name]) is not None, name
                assert ow.store.get_run(tids[name]) is not None, name
        wait_for("the orphan's drive", lambda: driven == [tids["running"]], 10)
        recovery.sweep()  # a later sweep: what stays, stays
        with clients.use() as ow:
            assert [n for n in tids if ow.store.threads.get(tids[n]) is not None] == [
                "kept",
                "own",
                "other",
                "running",
            ]
    finally:
        pool.close()
        clients.close()


@pytest.mark.crash
def test_a_recovered_run_still_pauses_where_its_request_asked(db_url: str, workdir: Path) -> None:
    """A run asked to pause before finalize (``interrupt_before``), its server killed
    mid-run: the restarted server drives it on and it stops before finalize, as the
    uninterrupted run would have (not past it, to done)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start(db_url, workdir, port)
    try:
        with httpx.Client(base_url=url, headers=auth(), timeout=30) as api:
            tid = str(api.post("/threads", json={}).json()["thread_id"])
            body = {
                "assistant_id": "onward",
                "input": {"goal": "record", "plan": PLAN},
                "interrupt_before": ["finalize"],
            }
            assert api.post(f"/threads/{tid}/runs", json=body).status_code == 200
        wait_for("step a's effect", lambda: read_jsonl(workdir / "effects.jsonl"), 60)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(30)

        server = start(db_url, workdir, port)
        with httpx.Client(base_url=url, headers=auth(), timeout=30) as api:

            def record() -> str:
                (run,) = api.get(f"/threads/{tid}/runs").json()
                return str(run["status"])

            # Paused where asked: the run ended well, its thread stands interrupted.
            wait_for("the recovered run to pause", lambda: record() == "success")
            assert api.get(f"/threads/{tid}").json()["status"] == "interrupted"
            state = api.get(f"/threads/{tid}/state").json()
            assert state["next"] == ["finalize"]
            assert state["values"]["status"] == "running"
            assert {s: r["status"] for s, r in state["values"]["steps"].items()} == {
                "a": "done",
                "b": "done",
                "c": "done",
            }
            time.sleep(3)  # more sweeps (lease TTL 2 s): the paused run stays paused
            assert record() == "success"
            assert api.get(f"/threads/{tid}/state").json()["next"] == ["finalize"]
    finally:
        server.kill()
        server.wait(10)
    assert Counter(r["label"] for r in read_jsonl(workdir / "effects.jsonl")) == {"a": 1, "c": 1}
