"""Holding a run's lease: whoever drives or cancels a run holds it, one process at a time."""

from __future__ import annotations

import time

from onward.errors import RunBusyError
from onward.store.leases import Leases


def acquire(leases: Leases, thread_id: str, owner: str, takeover: bool) -> None:
    """Take the run's lease. A live holder raises :class:`RunBusyError`; with ``takeover``
    this waits until the lease is released or expires instead."""
    while True:
        try:
            leases.acquire(thread_id, owner)
            return
        except RunBusyError as busy:
            if not takeover:
                raise
            wait = (busy.expires_at - leases.clock()).total_seconds()
            # Poll: a live driver asked to stop (cancel) releases long before expiry.
            time.sleep(min(max(wait, 0.0) + 0.05, 0.5))
