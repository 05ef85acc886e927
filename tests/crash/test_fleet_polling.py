"""An idle worker's slots take turns looking at the queue: one claim per poll for the
worker, whatever its concurrency (each claim is a transaction and an orphan query; at
``--concurrency 64 --poll 0.05`` the idle slots' claims had cost more than the runs)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from onward import Onward, Plan, PlanStep
from onward.client.worker import Worker, WorkerPolicy


class CountingWorker(Worker):
    """A worker that counts its claims (and claims as any worker does)."""

    claims = 0

    @staticmethod
    def _claim(ow: Onward, owner: str, hold: float) -> str | None:
        CountingWorker.claims += 1
        return Worker._claim(ow, owner, hold)


def test_idle_slots_share_one_look_at_the_queue_per_poll(db_url: str, workdir: Path) -> None:
    with Onward(db_url, model=None) as ow:
        ow.store  # noqa: B018  (the store exists: the worker opens it)
    CountingWorker.claims = 0
    worker = CountingWorker(db_url, policy=WorkerPolicy(concurrency=8, poll=0.05), model=None)
    running = threading.Thread(target=worker.run)
    started = time.monotonic()
    running.start()
    # A slow host may take over a second to open the store: wait for the first look,
    # then leave the slots idle for a while.
    deadline = started + 60
    while CountingWorker.claims == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(1.0)
    worker.drain()
    running.join(30)
    polls = (time.monotonic() - started) / 0.05
    assert not running.is_alive()
    # 8 slots polling alone: 8 claims a poll. Taking turns: at most one a poll, plus each
    # slot's first look (counted against the whole time the worker ran, however slow
    # the host).
    assert 0 < CountingWorker.claims <= 8 + polls + 1, (CountingWorker.claims, polls)


def test_a_run_submitted_to_an_idle_worker_is_driven(db_url: str, workdir: Path) -> None:
    with Onward(db_url, model=None) as ow:
        ow.store  # noqa: B018
    outcomes: list[str] = []
    worker = Worker(
        db_url,
        policy=WorkerPolicy(concurrency=8, poll=0.05),
        model=None,
        on_drive=lambda _tid, outcome: outcomes.append(outcome),
    )
    running = threading.Thread(target=worker.run)
    running.start()
    time.sleep(0.5)  # every slot idle, taking turns
    with Onward(db_url, model=None) as ow:
        ow.submit(plan=Plan(steps=[PlanStep(id="a", tool="noop")]), workdir=workdir)
    deadline = time.monotonic() + 60
    while not outcomes and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.drain()
    running.join(30)
    assert outcomes == ["done"]
