"""Workers: processes that claim queued runs from the store and drive them.

Any number of ``onward worker`` processes, on any number of machines, share one store
(several on one machine with SQLite). A worker slot claims the oldest ready run
(Postgres: ``FOR UPDATE SKIP LOCKED``, so claimers never wait on each other; SQLite: one
writer at a time), takes the run's lease — the lease, not the claim, is what guarantees
one driver — drives it until it finishes or must wait, and puts it back on the queue for
when it can go on:

- finished → off the queue;
- suspended until a time (a delayed retry, an open breaker) → ready at that time;
- waiting for a person → ready at the question's next deadline (the run's sweep happens
  then), else parked until an answer wakes it (``decide`` does);
- driven by someone else (a live lease) → ready when that lease would expire.

Runs started by ``onward run`` whose driver died (an expired lease never released) are
adopted: put on the queue when a worker finds nothing ready.

Slots claim nothing until every slot has opened its client (store and graph), so a
fleet's first runs are not stretched over its start-up; idle slots take turns looking at
the queue (one claim per ``poll`` for the worker, not one per slot).

A claim holds the run for the lease TTL: if the worker dies, the run is claimable again
after that, when the dead driver's lease has expired too (the takeover is logged).

SIGTERM drains: nodes that have not started raise ``DrainRequested``, so each slot ends
its drive on a saved superstep, puts the run back as ready, releases the lease and exits.

The database going away (Postgres stopped, restarting, out of connections, a connection
killed) is waited out: the store's statements wait for the server (store/connection.py),
and a drive that failed because its connection was lost is driven again, in the same slot,
once the server answers; it goes on from its last saved step. A worker started while the
server is down waits for it too. When the server stays away longer than
``ONWARD_PG_OUTAGE``, or a slot fails in a way a drive does not absorb, the worker stops
every slot and :meth:`Worker.run` raises that error: only a drain or ``exit_when_idle``
end a worker without one (the CLI's exit code says which).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel

from onward.client import Onward, driving
from onward.client.views import RunView
from onward.errors import (
    DatabaseGone,
    DatabaseUnavailable,
    LeaseLostError,
    OnwardError,
    RunBusyError,
)
from onward.model.state import RunStatus
from onward.observe.kinds import EventKind
from onward.people.inbox import PendingDecision
from onward.policies.durations import fix_durations
from onward.store.connection import patiently
from onward.store.database import Claimed
from onward.store.leases import new_owner
from onward.tools.registry import Registry

OPEN_WAIT = 30.0
"""Longest a slot waits for the others to open before it claims anyway (seconds)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerPolicy:
    """How a worker claims and drives runs."""

    concurrency: int = 1
    """Runs driven at once, each on its own thread (Postgres: sharing the process's pool of
    ``ONWARD_PG_POOL_SIZE`` connections, whatever the concurrency)."""
    poll: timedelta = timedelta(seconds=1)
    """Time between claim attempts while nothing is ready."""
    exit_when_idle: bool = False
    """Stop once no queued run can become ready without a person (batch jobs, benches):
    runs waiting for an answer or a person's deadline are left to other workers."""
    max_wait: timedelta = timedelta(0)
    """Longest in-process wait for a retry or breaker; longer waits suspend the run and
    requeue it for then, so a slot never sleeps on one run while others are ready."""
    error_backoff: timedelta = timedelta(seconds=30)
    """How long before a run whose drive failed with an onward error is tried again."""

    def __post_init__(self) -> None:
        fix_durations(self, "poll", "max_wait", "error_backoff")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")


@dataclass
class WorkerReport:
    """What a worker did before it stopped (every slot's, counted under one lock)."""

    drives: int = 0
    """Drives that ended (finished, waiting, suspended, drained, busy or failed)."""
    finished: list[str] = field(default_factory=list)
    """Runs this worker's drives brought to an end (done, failed or cancelled)."""
    errors: list[tuple[str, str]] = field(default_factory=list)
    """(thread id, message) of drives that failed; the run was requeued."""
    retried: int = 0
    """Drives begun again because the database could not be reached mid-drive."""
    drained: bool = False
    stopped_by: BaseException | None = None
    """The error that stopped the worker (the database gone for good, a slot's failure);
    None after a drain or an idle exit."""


class Worker:
    def __init__(
        self,
        db: str | None = None,
        *,
        policy: WorkerPolicy | None = None,
        registry: Registry | None = None,
        tool_modules: Sequence[str] = (),
        model: BaseChatModel | Literal["env"] | None = "env",
        on_drive: Callable[[str, str], None] | None = None,
    ) -> None:
        """``on_drive(thread_id, outcome)`` is called after every drive (for logs)."""
        self.db, self.policy = db, policy or WorkerPolicy()
        self._client_args: dict[str, Any] = {
            "registry": registry,
            "tool_modules": tool_modules,
            "model": model,
            "max_wait": self.policy.max_wait,
        }
        self.on_drive = on_drive
        self.report = WorkerReport()
        self._stop = threading.Event()
        self._clients: list[Onward] = []
        self._lock = threading.Lock()
        self._busy = 0
        self._polled_at = -math.inf
        """When a slot last looked at the queue and found nothing (monotonic seconds)."""
        self._idle = threading.Event()
        """Set when ``exit_when_idle`` found nothing left to do: every slot ends."""
        self._opened = 0
        self._all_open = threading.Condition(self._lock)

    def drain(self) -> None:
        """Stop: slots finish their current superstep, requeue their run and exit."""
        self._stop.set()
        self.report.drained = True
        with self._lock:
            self._all_open.notify_all()
            for client in self._clients:
                client.deps.draining.set()

    def run(self) -> WorkerReport:
        """Drive queued runs until :meth:`drain` (or idle, with ``exit_when_idle``). Raises
        the error that stopped the worker otherwise (``report.stopped_by``): the database
        gone for longer than ``ONWARD_PG_OUTAGE`` (a :class:`DatabaseGone`), or a slot's."""
        with patiently():  # a server that is not up yet is waited for (ONWARD_PG_OUTAGE)
            anchor = Onward(self.db, **self._client_args)
            # Open (or make) the store first: the slots' stores then share its pool.
            anchor.store  # noqa: B018
        with anchor:
            slots = [
                threading.Thread(target=self._slot, name=f"onward-worker-{i}", daemon=True)
                for i in range(max(1, self.policy.concurrency))
            ]
            for t in slots:
                t.start()
            for t in slots:
                while t.is_alive():
                    t.join(0.2)  # in slices: the main thread must stay able to take signals
        if self.report.stopped_by is not None:
            raise self.report.stopped_by
        return self.report

    def _slot(self) -> None:
        try:
            with patiently():  # a server that is not up yet is waited for
                ow = Onward(self.db, **self._client_args)
            with ow:
                self._wait_for_every_slot()
                self._claim_and_drive(ow)
        except BaseException as exc:
            self._fail(exc)

    def _wait_for_every_slot(self) -> None:
        """Claim nothing until every slot has its client (its store and graph; up to
        :data:`OPEN_WAIT`): slots opening while others drive had stretched a fleet's first
        runs over their start-up (at ``--concurrency 64`` the last slot began a second
        after the first), CPU-bound opening competing with the drives."""
        with self._all_open:
            self._opened += 1
            self._all_open.notify_all()
            self._all_open.wait_for(
                lambda: self._opened >= self.policy.concurrency or self._stop.is_set(),
                timeout=OPEN_WAIT,
            )

    def _fail(self, exc: BaseException) -> None:
        """A slot stopped by an error: the worker stops (the first error is its reason)."""
        with self._lock:
            if self.report.stopped_by is None and not self.report.drained:
                self.report.stopped_by = exc
            clients = list(self._clients)
        self._stop.set()
        with self._all_open:
            self._all_open.notify_all()
        for client in clients:
            client.deps.draining.set()

    def _claim_and_drive(self, ow: Onward) -> None:
        with self._lock:
            self._clients.append(ow)
            if self._stop.is_set():
                ow.deps.draining.set()
        owner = new_owner()
        hold = ow.store.leases.policy.ttl.total_seconds()
        waiting = False  # this slot found the queue empty last time
        while not (self._stop.is_set() or self._idle.is_set()):
            if waiting and self._someone_polled():
                continue
            with self._lock:
                self._busy += 1
            try:
                claimed = self._claim(ow, owner, hold)
            except DatabaseGone:
                raise
            except DatabaseUnavailable:  # a claim's commit lost: the statements wait
                claimed = None
            waiting = claimed is None
            if claimed is None:
                with self._lock:
                    self._busy -= 1
                    idle = self._busy == 0
                    self._polled_at = time.monotonic()
                if self.policy.exit_when_idle and idle and not ow.store.pending_work():
                    self._idle.set()
                    return
                self._stop.wait(self.policy.poll.total_seconds())
                continue
            try:
                self._drive(ow, claimed, owner)
            finally:
                with self._lock:
                    self._busy -= 1

    def _someone_polled(self) -> bool:
        """An idle slot's turn to look at the queue: not while another slot looked less than
        a poll ago (then wait until its look is a poll old, plus a little jitter, and say
        so); a slot whose turn it is takes it under the lock, so two never look at once.
        Idle slots take turns: one look per ``poll`` for the worker, not one per slot (at
        ``--concurrency 64`` and ``--poll 0.05`` the idle slots' claims, each a transaction
        and an orphan query, had cost more than the runs' own steps). A slot whose drive
        just ended looks at once."""
        poll = self.policy.poll.total_seconds()
        with self._lock:
            now = time.monotonic()
            due = self._polled_at + poll - now
            if due <= 0:
                self._polled_at = now  # this slot's turn: the others wait a poll from now
                return False
        self._stop.wait(due + random.uniform(0, poll / 4))
        return True

    @staticmethod
    def _claim(ow: Onward, owner: str, hold: float) -> Claimed | None:
        claimed = ow.store.claim_run(owner, hold)
        if claimed is None and ow.store.adopt_orphans(ow.store.leases.clock()):
            claimed = ow.store.claim_run(owner, hold)
        return claimed

    def _drive_through_outages(self, ow: Onward, claimed: Claimed) -> RunView:
        """Sweep the run's deadlines, then drive it; again (from its last saved step) after
        a drive that lost the database, once the server answers. The store's statements
        wait for it themselves, up to ``ONWARD_PG_OUTAGE`` (then DatabaseGone ends this).
        The first drive goes on from what the claim read of the run (``claimed``); a drive
        again reads it afresh."""
        thread_id = claimed.thread_id
        known: Claimed | None = claimed
        delay = 0.1
        while True:
            try:
                # Deadlines of this run's questions first (reminders, expiry defaults). A
                # run still *planning* never got as far as a question: nothing to sweep.
                if known is None or known.run is None or known.run.status is not RunStatus.PLANNING:
                    ow.sweep(thread_ids=[thread_id], continue_runs=False)
                return driving.drive(
                    ow,
                    thread_id,
                    None,
                    takeover=False,
                    wait=False,
                    command=None,
                    stop_after_answer=False,
                    wake=False,
                    claimed=known,
                )
            except DatabaseGone:
                raise
            except DatabaseUnavailable:
                if self._stop.is_set():
                    raise
                with self._lock:
                    self.report.retried += 1
                known = None
                time.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 2.0)

    def _drive(self, ow: Onward, claimed: Claimed, owner: str) -> None:
        store, thread_id = ow.store, claimed.thread_id
        outcome = "requeued"
        try:
            # Where the drive stopped, as it ended (not a second load of the run).
            view = self._drive_through_outages(ow, claimed)
        except DatabaseGone:
            raise
        except RunBusyError as busy:
            store.requeue(thread_id, busy.expires_at.timestamp(), owner)
            self._done(thread_id, "busy")
            return
        except LeaseLostError:
            self._done(thread_id, "lease lost")  # its new driver requeues it
            return
        except OnwardError as exc:
            store.events.record(thread_id, EventKind.WORKER_ERROR, {"error": str(exc)[:500]})
            store.requeue(thread_id, time.time() + self.policy.error_backoff.total_seconds(), owner)
            with self._lock:
                self.report.errors.append((thread_id, str(exc)))
            self._done(thread_id, "error")
            return
        now = time.time()
        if view.status.finished:
            # Finished even if a drain came in as the last superstep ended: not requeued.
            if store.holds_claim(thread_id):  # (else the drive's last commit took it off)
                store.dequeue(thread_id)
            with self._lock:
                self.report.finished.append(thread_id)
            outcome = view.status.value
        elif self._stop.is_set():
            store.requeue(thread_id, now, owner)  # drained: ready for another worker now
            outcome = "drained"
        elif view.pending:
            due = _next_deadline(ow, thread_id, view.pending)
            # A deadline that passed during the drive (after its sweep) is due now: the
            # next claim's sweep applies it. (Dropping it as past parked the run until its
            # next future deadline, the reminder hours later, when a loaded machine made
            # the drive outlast a short expiry.)
            ready = None if due is None else max(due, now + self.policy.poll.total_seconds())
            store.requeue(thread_id, ready, owner, for_person=True)
            outcome = "waiting for a person"
        elif view.resume_at is not None:
            store.requeue(thread_id, view.resume_at.timestamp(), owner)
            outcome = f"suspended until {view.resume_at.isoformat()}"
        else:
            # Stopped without a reason the view shows: look again shortly, not in a loop.
            store.requeue(thread_id, now + self.policy.poll.total_seconds(), owner)
        self._done(thread_id, outcome)

    def _done(self, thread_id: str, outcome: str) -> None:
        with self._lock:
            self.report.drives += 1
        if self.on_drive is not None:
            self.on_drive(thread_id, outcome)


def _next_deadline(ow: Onward, thread_id: str, pending: Sequence[PendingDecision]) -> float | None:
    """Epoch seconds of the earliest reminder or expiry of ``pending`` that no sweep has
    applied yet (it may be past); None when every one is applied (only an answer helps)."""
    applied = {
        (e.kind, e.detail.get("interrupt_id"))
        for e in ow.store.events.list(
            thread_id, [EventKind.APPROVAL_REMINDER, EventKind.APPROVAL_EXPIRED]
        )
    }
    due = [
        p.remind_at for p in pending if (EventKind.APPROVAL_REMINDER, p.interrupt_id) not in applied
    ]
    due += [
        p.expire_at for p in pending if (EventKind.APPROVAL_EXPIRED, p.interrupt_id) not in applied
    ]
    return min(t.timestamp() for t in due) if due else None
