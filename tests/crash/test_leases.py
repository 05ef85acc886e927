"""One live driver per run: concurrent resumes, takeover after a SIGKILL (at once on the
same host, after the lease expires from another), stalled runs.

All with real processes. Leases are short here (ONWARD_LEASE_TTL / ONWARD_HEARTBEAT)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from onward import LeasePolicy, Onward, Plan, PlanStep, RunBusyError
from onward.store.leases import Leases, new_owner
from tests.support import zygote
from tests.support.common import cli_env

LEASE = {"ONWARD_LEASE_TTL": "1.0", "ONWARD_HEARTBEAT": "0.2"}


def _waits(n: int, seconds: float) -> Plan:
    return Plan(
        steps=[
            PlanStep(
                id=f"w{i}",
                tool="wait",
                args={"seconds": seconds, "label": str(i)},
                depends_on=[f"w{i - 1}"] if i else [],
            )
            for i in range(n)
        ]
    )


def _starts(journal: Path) -> Counter[str]:
    if not journal.exists():
        return Counter()
    lines = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    return Counter(e["step"] for e in lines if e["phase"] == "start")


def _resume(db: str, thread_id: str, cwd: Path, env: dict[str, str], *extra: str) -> zygote.Process:
    return zygote.spawn(
        ["resume", thread_id, "--db", db, *extra],
        cwd=cwd,
        env=cli_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_concurrent_resumes_drive_a_run_once(tmp_path: Path, db_url: str) -> None:
    """20 times (8 on Postgres, whose row locks are not the file lock under test): two
    processes resume the same stopped run together; one drives, one is refused with exit
    code 4, and every step runs once."""
    for i in range(20 if db_url.startswith("sqlite") else 8):
        wd = tmp_path / f"r{i}"
        wd.mkdir()
        db = db_url  # one store; a new run each round
        journal = wd / "journal.jsonl"
        with Onward(db) as ow:
            thread_id = ow.start(plan=_waits(3, 0.4), workdir=wd)  # stopped before any step
        env = {**LEASE, "ONWARD_EXECUTION_LOG": str(journal)}
        procs = [_resume(db, thread_id, wd, env) for _ in range(2)]
        results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
        codes = sorted(code for code, _, _ in results)
        assert codes == [0, 4], results
        busy = next(err for code, _, err in results if code == 4)
        assert f"run {thread_id} is being driven by" in busy
        assert "--takeover" in busy
        assert _starts(journal) == {"w0": 1, "w1": 1, "w2": 1}


def test_resume_after_sigkill_on_the_same_host_takes_over_at_once(
    tmp_path: Path, db_url: str
) -> None:
    """The killed driver's lease is still live (30 s TTL), but its process is gone on this
    host: a resume right after the kill takes it over, logged like any takeover."""
    db = db_url
    lease_env = {"ONWARD_LEASE_TTL": "30", "ONWARD_HEARTBEAT": "0.5"}
    with Onward(db) as ow:
        thread_id = ow.start(plan=_waits(2, 1.0), workdir=tmp_path)
    driver = _resume(db, thread_id, tmp_path, lease_env)
    deadline = time.monotonic() + 60
    with Onward(db) as ow:
        while ow.store.leases.get(thread_id) is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    time.sleep(0.3)  # let it start the first step
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    with Onward(db) as ow:
        lease = ow.store.leases.get(thread_id)
        assert lease is not None
        assert lease.expires_at > ow.store.leases.clock()  # live, by its TTL
    at_once = _run_resume(db, thread_id, tmp_path, lease_env)
    assert at_once.returncode == 0, at_once.stderr
    assert json.loads(at_once.stdout)["status"] == "done"
    taken = _takeovers(db, thread_id)
    assert len(taken) == 1
    assert f"its process {driver.pid} on this host has exited" in taken[0]


def test_a_driver_on_another_host_is_waited_out_until_its_lease_expires(
    tmp_path: Path, db_url: str
) -> None:
    """Its process cannot be checked from here: a resume is refused while its lease is
    live, and the lease is taken over once it expired."""
    db = db_url
    elsewhere = "elsewhere:4242:777:abcd1234"
    with Onward(db) as ow:
        thread_id = ow.start(plan=_waits(1, 0.1), workdir=tmp_path)
        policy = LeasePolicy(ttl=30.0, heartbeat=0.5)
        Leases(ow.store.connect, policy).acquire(thread_id, elsewhere)
    early = _run_resume(db, thread_id, tmp_path, LEASE)
    assert early.returncode == 4, early.stderr
    assert f"is being driven by {elsewhere}" in early.stdout + early.stderr
    with Onward(db) as ow:
        # 31 s on: expiry is the database's clock (a process's clock is not asked), so the
        # lease is aged instead.
        conn = ow.store.connect()
        old = (ow.clock() - timedelta(seconds=1)).isoformat()
        conn.execute("UPDATE onward_leases SET expires_at = ?", (old,))
        conn.close()
        taken = Leases(ow.store.connect, policy).acquire(thread_id, new_owner())
    assert taken is not None
    assert taken.owner == elsewhere
    [detail] = _takeovers(db, thread_id)
    assert "expired" in detail


def test_a_dead_drivers_pid_reused_by_another_process_does_not_hold_the_run(
    tmp_path: Path, db_url: str
) -> None:
    """The lease names a pid of this host that is alive, but it belongs to a process that
    started at another time than the driver: the driver is gone, the run is taken over."""
    db = db_url
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        with Onward(db) as ow:
            thread_id = ow.start(plan=_waits(1, 0.1), workdir=tmp_path)
            owner = f"{socket.gethostname()}:{unrelated.pid}:1:abcd1234"  # started at tick 1
            Leases(ow.store.connect, LeasePolicy(ttl=30.0, heartbeat=0.5)).acquire(thread_id, owner)
        result = _run_resume(db, thread_id, tmp_path, LEASE)
        assert result.returncode == 0, result.stderr
        assert unrelated.poll() is None  # the unrelated process was left alone
    finally:
        unrelated.kill()
        unrelated.wait()
    [taken] = _takeovers(db, thread_id)
    assert f"its pid {unrelated.pid} on this host now belongs to another process" in taken


def test_a_live_driver_on_this_host_is_not_taken_over(tmp_path: Path, db_url: str) -> None:
    """The same check leaves a live driver alone: this test's own process holds it."""
    db = db_url
    with Onward(db) as ow:
        thread_id = ow.start(plan=_waits(1, 0.1), workdir=tmp_path)
        ow.store.leases.acquire(thread_id, new_owner())
    result = _run_resume(db, thread_id, tmp_path, LEASE)
    assert result.returncode == 4, result.stderr
    assert f"{socket.gethostname()}:{os.getpid()}:" in result.stdout + result.stderr


def _run_resume(db: str, thread_id: str, cwd: Path, env: dict[str, str]) -> Any:
    return zygote.run(
        ["resume", thread_id, "--db", db, "--json"], cwd=cwd, env=cli_env(**env), timeout=60
    )


def _takeovers(db: str, thread_id: str) -> list[str]:
    with Onward(db) as ow:
        events = ow.store.leases.events(thread_id)
    return [detail for _, kind, detail in events if kind == "lease_taken_over"]


def test_takeover_flag_waits_for_the_dead_drivers_lease(tmp_path: Path, db_url: str) -> None:
    db = db_url
    with Onward(db) as ow:
        thread_id = ow.start(plan=_waits(1, 0.1), workdir=tmp_path)
        # A driver with a 1 s lease that died just now.
        Leases(ow.store.connect, LeasePolicy(ttl=1.0, heartbeat=0.2)).acquire(
            thread_id, "dead-host:1:abc"
        )
    result = zygote.run(
        ["resume", thread_id, "--takeover", "--db", db, "--json"],
        cwd=tmp_path,
        env=cli_env(**LEASE),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    with Onward(db) as ow:
        kinds = [k for _, k, _ in ow.store.leases.events(thread_id)]
    assert kinds[-3:] == ["lease_taken_over", "lease_acquired", "lease_released"]


def test_heartbeat_keeps_a_long_step_leased(tmp_path: Path, db_url: str) -> None:
    """A step longer than the lease: heartbeats keep renewing it, so a second resume
    halfway through is still refused."""
    db = db_url
    with Onward(db) as ow:
        thread_id = ow.start(plan=_waits(1, 4.0), workdir=tmp_path)
    driver = _resume(db, thread_id, tmp_path, LEASE)
    time.sleep(3.0)  # start-up plus well past the 1 s lease
    second = zygote.run(
        ["resume", thread_id, "--db", db],
        cwd=tmp_path,
        env=cli_env(**LEASE),
        timeout=60,
    )
    assert driver.wait(timeout=60) == 0
    assert second.returncode == 4, second.stderr


def test_a_dead_drivers_run_shows_as_stalled(run_cli, workdir: Path, db_url: str) -> None:  # type: ignore[no-untyped-def]
    with Onward(db_url) as ow:
        thread_id = ow.start(plan=_waits(1, 0.1), workdir=workdir)
        leases = ow.store.leases
        leases.acquire(thread_id, "dead-host:1:abc")
        # Age the heartbeat instead of sleeping: the lease row is what status reads.
        conn = ow.store.connect()
        old = (leases.clock() - timedelta(minutes=5)).isoformat()
        conn.execute("UPDATE onward_leases SET heartbeat_at = ?", (old,))
        conn.close()
    status = run_cli("status", thread_id, "--json").json()
    assert status["stalled"] is True
    assert status["driver"] == "dead-host:1:abc"
    listed = run_cli("list", "--json").json()
    assert listed[0]["stalled"] is True


def test_api_raises_run_busy_for_a_live_lease(tmp_path: Path, db_url: str) -> None:
    with Onward(db_url) as ow:
        thread_id = ow.start(plan=_waits(1, 0.1), workdir=tmp_path)
        ow.store.leases.acquire(thread_id, "other-host:2:def")
        with pytest.raises(RunBusyError, match="other-host:2:def"):
            ow.resume(thread_id)
        assert ow.state(thread_id).steps == {}  # nothing ran, nothing changed
