"""After a server crash: API run records agree with the store, and orphaned runs finish.

A server killed mid-run leaves API run records saying ``running`` and a lease nobody
renews. On start and then periodically, :class:`Recovery` looks at every record still
pending or running: one whose thread has a live lease is being driven (here or by another
process) and is left alone; otherwise the record is set from the run's saved state
(finished, waiting for a person), or, when the run was cut off mid-way, the run is driven
again from its last checkpoint once its lease has expired (the effect ledger keeps every
effect to once), with what its request asked for (``interrupt_before`` / ``_after``,
``webhook``, stream modes) and its stream numbered on after the ids it gave out (also a
run this server's drive gave up on when the database stayed away past
``ONWARD_PG_OUTAGE``: the sweep finds it once the server answers). A run
whose cancel was asked (through the store) before its driver died is settled under its
lease, never driven on. With ``enabled=False`` the runs are left to ``onward worker``
processes (they adopt orphans themselves) and only the records are kept true. Each sweep
also deletes the threads of ended stateless runs whose cleanup was lost (the server
stopped first) and drops the stream events of runs that ended more than an hour ago.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from fastapi import HTTPException

from onward.client import stopping
from onward.errors import RunBusyError
from onward.model.state import RunStatus
from onward.observe import reading
from onward.observe.kinds import EventKind
from onward.serve import drives, replay
from onward.serve.control import Active
from onward.serve.routes.threads import delete_thread
from onward.store.leases import LeasePolicy, new_owner
from onward.store.runs import FINISHED_RUNS, ApiRunRow, ApiRunStatus, CancelAction

if TYPE_CHECKING:
    from onward.client import Onward
    from onward.serve.clients import Clients
    from onward.serve.context import Serving


class Recovery:
    def __init__(
        self,
        serving: Serving,
        *,
        enabled: bool = True,
        every: float | None = None,
        drive: Callable[[Active, Clients, ApiRunRow], None] | None = None,
    ) -> None:
        """``drive``: how a recovered run is driven (default: :func:`drives.run` on the
        pool thread; tests pass a fake)."""
        self._serving = serving
        self._drive = drive or self._run
        self._clients, self._pool = serving.clients, serving.pool
        self.enabled = enabled
        ttl = LeasePolicy.from_env().ttl
        self.every = every if every is not None else max(1.0, ttl.total_seconds() / 2)
        self._grace = ttl
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._driving: set[str] = set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="onward-recovery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a store hiccup: try again next time
                self.sweep()
            self._stop.wait(self.every)

    def sweep(self) -> list[str]:
        """Reconcile every unfinished API run record; returns the threads driven again."""
        resumed: list[str] = []
        queued: set[str] = set()
        with self._clients.use() as ow:
            now = ow.store.leases.clock()
            for row in ow.store.threads.unfinished_runs():
                if row.request is not None:  # queued behind its thread: started below
                    queued.add(row.thread_id)
                    continue
                if self._serving.control.get(row.run_id) is not None:
                    continue  # this server drives it
                if now - row.updated_at < self._grace:
                    continue  # just created: its drive may not hold the lease yet
                lease = ow.store.leases.get(row.thread_id)
                if lease is not None and lease.live(now):
                    continue  # somebody drives it (and carries out a cancel asked of it)
                if row.cancel is not None:
                    _settle_orphan(ow, row, row.cancel)  # asked, then its driver died
                    continue
                with self._lock:
                    if row.thread_id in self._driving:
                        continue
                run = ow.store.get_run(row.thread_id)
                if run is None:
                    ow.store.threads.set_run_status(row.run_id, ApiRunStatus.ERROR)
                    continue
                state = ow.state(row.thread_id)
                if state.status.finished:
                    failed = state.status is RunStatus.FAILED
                    ow.store.threads.set_run_status(
                        row.run_id, ApiRunStatus.ERROR if failed else ApiRunStatus.SUCCESS
                    )
                elif ow.pending(row.thread_id) or _paused(ow, row):
                    # Waiting for a person: the run ended well (a cancel is "interrupted").
                    ow.store.threads.set_run_status(row.run_id, ApiRunStatus.SUCCESS)
                elif state.resume_at is not None and state.resume_at > ow.clock():
                    continue  # suspended until later (backoff, a breaker): a later sweep
                elif self.enabled:
                    self._resume(ow, row)
                    resumed.append(row.thread_id)
            self._delete_stateless_threads(ow, now)
            # Ended runs' stream events are kept for joins for a while, then dropped.
            ow.store.threads.drop_old_events(now - timedelta(seconds=replay.RETENTION_SECONDS))
        for thread_id in sorted(queued - set(resumed)):
            drives.dispatch(self._serving, thread_id)  # a no-op while the thread is busy
        return resumed

    def _delete_stateless_threads(self, ow: Onward, now: datetime) -> None:
        """Delete the threads of stateless runs that ended but whose cleanup was lost
        (the server stopped first, or the run was finished here after a restart). A kept
        thread (``on_completion="keep"``) is not logged as one; a thread whose run is
        pending, running, driven or just ended (its own cleanup is on the way) stays."""
        for thread_id in ow.store.events.threads_with(EventKind.STATELESS_THREAD):
            if self._serving.control.on_thread(thread_id):
                continue
            thread = ow.store.threads.get(thread_id)
            runs = ow.store.threads.runs(thread_id)
            if thread is None or not runs:
                continue
            if any(r.status not in FINISHED_RUNS for r in runs):
                continue
            if now - max(r.updated_at for r in runs) < self._grace:
                continue
            lease = ow.store.leases.get(thread_id)
            if lease is not None and lease.live(now):
                continue
            with contextlib.suppress(HTTPException):  # driven again meanwhile: next sweep
                delete_thread(self._serving, thread_id, thread.owner or "")

    def _resume(self, ow: Onward, row: ApiRunRow) -> None:
        run_id, thread_id = row.run_id, row.thread_id
        thread = ow.store.threads.get(thread_id)
        owner = (thread.owner if thread else None) or "recovery"
        ow.store.events.record(thread_id, EventKind.API_RUN_RECOVERED, {"run_id": run_id})
        drives_so_far = [
            e
            for e in ow.store.events.list(thread_id, [EventKind.API_RUN_RECOVERED])
            if e.detail.get("run_id") == run_id
        ]
        with self._lock:
            self._driving.add(thread_id)
        self._pool.reserve(owner, force=True)
        # Its stream goes on after the ids its earlier drive gave out (Last-Event-ID):
        # those kept, and those this server's feed gave out while the store was gone.
        earlier = self._serving.control.feed(run_id)
        active = self._serving.control.open(
            run_id,
            thread_id,
            start=max(ow.store.threads.last_event(run_id), earlier.last if earlier else 0),
            attempt=1 + len(drives_so_far),
        )
        own = None
        try:
            assistant = self._serving.catalog.resolve(ow.store, row.assistant_id, owner, False)
            plain = not assistant.model_plans
            own = self._serving.catalog.own_clients(assistant)
        except HTTPException:  # its assistant was deleted since: the default's rules
            plain = False
        clients = own or (self._serving.plain_clients if plain else self._clients)

        def go() -> None:
            try:
                self._drive(active, clients, row)
            finally:
                with self._lock:
                    self._driving.discard(thread_id)

        self._pool.submit(owner, go)

    def _run(self, active: Active, clients: Clients, row: ApiRunRow) -> None:
        drives.run(
            self._serving,
            clients,
            active,
            None,
            list(row.stream_mode) or ["values"],
            None,
            takeover=True,
            # What the request asked for holds after a restart too.
            pause_at=row.pause_before,
            pause_after=row.pause_after,
            webhook=row.webhook,
        )


def _settle_orphan(ow: Onward, row: ApiRunRow, action: CancelAction) -> None:
    """A run cancelled through the store whose driver died before it saw the cancel:
    settled under its lease (a worker cannot adopt it meanwhile), never driven on."""
    owner = new_owner()
    try:
        ow.store.leases.acquire(row.thread_id, owner)
    except RunBusyError:
        return  # a driver came back: it carries the cancel out
    try:
        stopping.settle(ow.store, row, action, before_start=False)
        ow.store.dequeue(row.thread_id)
    finally:
        ow.store.release_lease(row.thread_id, owner)


def _paused(ow: Onward, row: ApiRunRow) -> bool:
    """The run stands where its request asked it to pause (``interrupt_before``), past the
    checkpoint it started from: its drive got there and was cut off before it said so.
    (At the start checkpoint itself the drive had not begun: LangGraph runs a resumed
    checkpoint's next node, so the drive goes again.)"""
    if not row.pause_before:
        return False
    snap = reading.snapshot(ow, row.thread_id)
    here = snap.config.get("configurable", {}).get("checkpoint_id")
    paused = set(ow.get(row.thread_id).paused_before) & set(row.pause_before)
    return bool(paused) and here != row.from_checkpoint
