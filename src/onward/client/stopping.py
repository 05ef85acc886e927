"""An API run's cancel asked through the store, carried out by whoever drives the run.

``onward serve`` records ``runs.cancel`` of a run it does not drive on the run's record
(another server, an ``onward worker``, or nobody since a crash drives it). The driver
watches for it (:class:`CancelWatch`, a look every :data:`POLL` seconds): it sets the
drive's drain flag, so the drive stops before its next node starts — the last superstep
is saved, a step already running finishes and is kept (its effect happened once and is
in the ledger) and still verified (no effect: the state then shows what ran), nothing
else runs. The driver, still holding the lease, then
settles the record (:func:`settle`): *interrupted* (the thread keeps what it did; a later
run goes on from there) or, for a rollback, removed with the checkpoints it made. A
run nobody drives is settled by a server's recovery sweep under the run's lease.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onward.observe.kinds import EventKind
from onward.store.runs import ApiRunRow, ApiRunStatus, CancelAction

if TYPE_CHECKING:
    from onward.nodes.deps import NodeDeps
    from onward.store.database import Store
    from onward.store.ticking import Job

POLL = 0.25
"""Seconds between a driver's looks for a cancel asked of its run."""


class CancelWatch:
    """While a drive of an API thread runs: a cancel asked of its run through the store
    sets ``draining`` (the drive's flag its nodes check before they start)."""

    def __init__(self, store: Store, thread_id: str, deps: NodeDeps) -> None:
        self.store, self.thread_id, self.deps = store, thread_id, deps
        self.asked: ApiRunRow | None = None
        self._job: Job | None = None

    def __enter__(self) -> CancelWatch:
        self.look()
        if self.asked is None:
            # On the store's timer thread (store/ticking.py), not a thread per drive.
            self._job = self.store.ticker.every(POLL, self._tick)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._job is not None:
            self._job.stop()  # a look in progress ends first
        if self.asked is not None:  # set for this run only: the client drives others next
            self.deps.draining.clear()
            self.deps.cancelling.clear()

    def look(self) -> None:
        try:
            found = self.store.threads.cancel_asked(self.thread_id)
        except Exception:  # a store hiccup: look again next time
            return
        if found is not None:
            self.asked = found
            self.deps.cancelling.set()  # a step already produced is still verified
            self.deps.draining.set()

    def _tick(self) -> bool:
        self.look()
        return self.asked is None


def settle(store: Store, row: ApiRunRow, action: CancelAction, *, before_start: bool) -> None:
    """A cancelled run's record once its drive stopped (the caller holds the lease, or
    drove the run): *interrupted*, or for a rollback removed with the checkpoints it
    made (``before_start``: it made none)."""
    thread_id = row.thread_id
    store.events.record(
        thread_id, EventKind.API_RUN_CANCELLED, {"run_id": row.run_id, "action": action.value}
    )
    if action is not CancelAction.ROLLBACK:
        # The node the drain stopped reads as not started, not as failed (chat UIs show
        # a head task's error as the thread's error).
        store.forget_drain_errors(thread_id)
        store.threads.set_run_status(row.run_id, ApiRunStatus.INTERRUPTED)
        return
    if not before_start:
        if row.from_checkpoint:
            store.delete_checkpoints_after(thread_id, row.from_checkpoint)
        elif store.get_run(thread_id) is not None:
            # The thread's first run: the thread is left as it was made, empty.
            _rows, shas = store.delete_run(thread_id, keep_api=True)
            store.delete_unused_bodies(shas)
    store.threads.delete_run(row.run_id)


def settle_asked(store: Store, watch: CancelWatch) -> None:
    """After a drive that a cancel asked through the store stopped: settle its run, and
    take it off the work queue (a worker drove it: it must not go on)."""
    if watch.asked is None:
        return
    row = store.threads.get_run(watch.asked.run_id)  # a rollback may have come since
    if row is None or row.cancel is None:
        return
    settle(store, row, row.cancel, before_start=False)
    store.dequeue(row.thread_id)
