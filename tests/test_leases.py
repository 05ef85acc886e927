"""One live driver per run: concurrent resumes, takeover after a SIGKILL, stalled runs.

All with real processes. Leases are short here (ONWARD_LEASE_TTL / ONWARD_HEARTBEAT)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from onward import LeasePolicy, Onward, Plan, PlanStep, RunBusyError
from onward.store.leases import Leases
from tests import zygote
from tests.conftest import cli_env

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


def test_resume_after_sigkill_is_refused_until_the_lease_expires_then_takes_over(
    tmp_path: Path, db_url: str
) -> None:
    db = db_url
    lease_env = {"ONWARD_LEASE_TTL": "4", "ONWARD_HEARTBEAT": "0.5"}  # outlives a start-up
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

    early = zygote.run(
        ["resume", thread_id, "--db", db],
        cwd=tmp_path,
        env=cli_env(**lease_env),
        timeout=60,
    )
    assert early.returncode == 4, early.stderr
    assert "is being driven by" in early.stderr
    with Onward(db) as ow:
        lease = ow.store.leases.get(thread_id)
        assert lease is not None
        wait = (lease.expires_at - ow.store.leases.clock()).total_seconds()
    time.sleep(max(wait, 0) + 0.2)  # past the dead driver's lease
    late = zygote.run(
        ["resume", thread_id, "--db", db, "--json"],
        cwd=tmp_path,
        env=cli_env(**lease_env),
        timeout=60,
    )
    assert late.returncode == 0, late.stderr
    assert json.loads(late.stdout)["status"] == "done"
    with Onward(db) as ow:
        events = ow.store.leases.events(thread_id)
        assert ow.store.leases.get(thread_id) is None  # released at the end
    taken = [detail for _, kind, detail in events if kind == "lease_taken_over"]
    assert len(taken) == 1
    assert "expired" in taken[0]


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
