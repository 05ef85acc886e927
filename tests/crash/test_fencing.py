"""Fencing by the store (issue 37): a driver that lost its lease writes nothing, and a
process's clock cannot take a live lease. Both backends.

- A real ``onward resume`` (A) is paused with SIGSTOP while its POST is in flight, longer
  than its lease; ``onward resume --takeover`` (B) takes the run over, finds the POST
  ``started`` and asks a person; then A is continued. A's result, its checkpoint and its
  next step's POST are refused: A exits 4 saying it lost the lease, B's question is still
  in ``onward inbox``, each key was POSTed once, and the store is as B left it.
- A process whose clock is an hour ahead cannot take the lease of a driver that
  heartbeats: expiry is the database's clock.
- In one process: a commit or ledger claim under a lease taken over is refused and writes
  nothing; writes of a thread this process holds no lease on (a person's edit) are not
  fenced; every acquisition has a larger epoch, after a release too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from onward import (
    LeaseLostError,
    LeasePolicy,
    Onward,
    Plan,
    PlanStep,
    RunBusyError,
)
from onward.model.clock import utcnow
from onward.store.leases import Leases, new_owner
from onward.testing import FakeTime
from tests.support import zygote
from tests.support.common import cli_env
from tests.support.fencing import LEASE, NO_PROXY, POSTS_APPROVED, _cli, _posts, _store_of, _until
from tests.support.httpfake import FakeService

IN_FLIGHT = 2.0
"""The service's delay: A is paused between its POST being stored and the answer."""


def test_a_driver_paused_past_its_lease_writes_nothing_after_its_successor_asked(
    tmp_path: Path, db_url: str
) -> None:
    with FakeService(delay=IN_FLIGHT) as service:
        env = cli_env(**LEASE, **NO_PROXY, ONWARD_HTTP_ALLOW=f"127.0.0.1:{service.port}")
        with Onward(db_url, model=None) as ow:
            thread_id = ow.start(plan=_posts(service), workdir=tmp_path, policy=POSTS_APPROVED)
        a = zygote.spawn(
            ["resume", thread_id, "--db", db_url, "--json"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _until(lambda: bool(service.counts) or a.poll() is not None, "A's first POST")
        assert a.poll() is None, a.communicate()
        os.kill(a.pid, signal.SIGSTOP)  # cut off mid-POST, for longer than its lease
        try:
            b = zygote.run(
                ["resume", thread_id, "--takeover", "--db", db_url, "--json"],
                cwd=tmp_path,
                env=env,
                timeout=60,
            )
            assert json.loads(b.stdout)["status"] == "waiting_for_human", b.stderr
            after_b = _store_of(db_url, thread_id)
        finally:
            os.kill(a.pid, signal.SIGCONT)
        out, err = a.communicate(timeout=60)
        posts = dict(service.counts)
        payloads = [p.body["event"] for p in service.posts if isinstance(p.body, dict)]
    assert a.returncode == 4, out + err
    assert f"lost the lease on run {thread_id}" in out + err
    # B's question is still asked; the run waits for it, driven by no one.
    [question] = _cli(db_url, tmp_path, "inbox")
    assert (question["thread_id"], question["step_id"]) == (thread_id, "post-1")
    assert _cli(db_url, tmp_path, "status", thread_id)["status"] == "waiting_for_human"
    # A wrote nothing after B: B's checkpoint is the latest, no event, no effect row more.
    now = _store_of(db_url, thread_id)
    assert now["events"][len(after_b["events"]) :] == []
    assert now == after_b
    assert after_b["effects"] == [("post-1", "started", 1)]
    # The first POST once (A's); the next step's never.
    assert payloads == ["e1"]
    assert list(posts.values()) == [1]


def test_a_process_whose_clock_is_an_hour_ahead_cannot_take_a_live_lease(
    tmp_path: Path, db_url: str
) -> None:
    with Onward(db_url, model=None) as ow:
        plan = Plan(steps=[PlanStep(id="w", tool="wait", args={"seconds": 3.0, "label": "w"})])
        thread_id = ow.start(plan=plan, workdir=tmp_path)
    holder = zygote.spawn(
        ["resume", thread_id, "--db", db_url, "--json"],
        cwd=tmp_path,
        env=cli_env(**LEASE),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ahead = FakeTime(utcnow() + timedelta(hours=1))
    with Onward(db_url, model=None, clock=ahead.clock) as ow:
        skewed = Leases(
            ow.store.connect,
            LeasePolicy(ttl=timedelta(seconds=1), heartbeat=timedelta(seconds=0.2)),
            clock=ahead.clock,
        )
        _until(lambda: skewed.get(thread_id) is not None, "the holder's lease")
        refusals = 0
        while refusals < 10:  # two lease lifetimes of the holder's heartbeats
            with pytest.raises(RunBusyError):
                skewed.acquire(thread_id, new_owner())
            refusals += 1
            time.sleep(0.2)
        holder_lease = skewed.get(thread_id)
    out, err = holder.communicate(timeout=60)
    assert holder.returncode == 0, out + err
    assert json.loads(out)["status"] == "done"
    assert holder_lease is not None  # still the holder's, heartbeating
    with Onward(db_url, model=None) as ow:
        kinds = [kind for _, kind, _ in ow.store.leases.events(thread_id)]
    assert "lease_taken_over" not in kinds


def _taken_over(ow: Onward, thread_id: str) -> None:
    """Another driver takes the run over: the lease is aged, then acquired elsewhere."""
    conn = ow.store.connect()
    try:
        conn.execute(
            "UPDATE onward_leases SET expires_at = ? WHERE thread_id = ?",
            ((utcnow() - timedelta(seconds=1)).isoformat(), thread_id),
        )
    finally:
        conn.close()
    Leases(ow.store.connect, LeasePolicy()).acquire(thread_id, "elsewhere:1:1:b")


def test_a_commit_and_a_claim_under_a_lease_taken_over_are_refused_and_write_nothing(
    tmp_path: Path, db_url: str
) -> None:
    with Onward(db_url, model=None) as ow:
        plan = Plan(steps=[PlanStep(id="w", tool="wait", args={"seconds": 0.0, "label": "w"})])
        thread_id = ow.start(plan=plan, workdir=tmp_path)
        config: Any = {"configurable": {"thread_id": thread_id}}
        before = len(list(ow.store.saver.list(config)))
        ow.store.leases.acquire(thread_id, new_owner())
        ow.graph.update_state(config, {"max_concurrency": 3})  # held: it commits
        _taken_over(ow, thread_id)
        with pytest.raises(LeaseLostError):
            ow.graph.update_state(config, {"max_concurrency": 4})
        with pytest.raises(LeaseLostError):
            ow.store.ledger.claim(
                "k", thread_id=thread_id, step_id="w", tool="t", args={}, compensable=False
            )
        assert ow.store.fences.lost(thread_id)
        assert len(list(ow.store.saver.list(config))) == before + 1
        assert ow.store.ledger.for_thread(thread_id) == []
        assert ow.graph.get_state(config).values["max_concurrency"] == 3


def test_writes_of_a_thread_this_process_holds_no_lease_on_are_not_fenced(
    tmp_path: Path, db_url: str
) -> None:
    """A person's edit from another process while a driver holds the lease: written as
    LangGraph's own savers would (the driver's next drive reads it)."""
    with Onward(db_url, model=None) as ow:
        plan = Plan(steps=[PlanStep(id="w", tool="wait", args={"seconds": 0.0, "label": "w"})])
        thread_id = ow.start(plan=plan, workdir=tmp_path)
        Leases(ow.store.connect, LeasePolicy()).acquire(thread_id, "elsewhere:1:1:a")
        config: Any = {"configurable": {"thread_id": thread_id}}
        ow.graph.update_state(config, {"max_concurrency": 5})
        assert ow.graph.get_state(config).values["max_concurrency"] == 5


def test_every_acquisition_has_a_larger_epoch_even_after_a_release(
    tmp_path: Path, db_url: str
) -> None:
    with Onward(db_url, model=None) as ow:
        plan = Plan(steps=[PlanStep(id="w", tool="wait", args={"seconds": 0.0, "label": "w"})])
        thread_id = ow.start(plan=plan, workdir=tmp_path)
        leases = ow.store.leases
        epochs = []
        for _ in range(3):
            owner = new_owner()
            leases.acquire(thread_id, owner)
            lease = leases.get(thread_id)
            assert lease is not None
            epochs.append(lease.epoch)
            leases.release(thread_id, owner)
        leases.acquire(thread_id, "elsewhere:1:1:c")
        last = leases.get(thread_id)
        assert last is not None
        epochs.append(last.epoch)
    assert epochs == sorted(set(epochs))
