"""Leases taken by many drivers at once (a fleet's workers claiming the same run): on
Postgres an acquisition is a read and a compare-and-swap write (store/leases.py), so a
race must still leave exactly one driver, with the others told the run is busy."""

from __future__ import annotations

import threading

from onward.errors import RunBusyError
from onward.store.database import Store
from onward.store.leases import new_owner


def race(store: Store, thread_id: str, drivers: int) -> tuple[list[str], list[str]]:
    """(owners that took the lease, owners told it is busy), all trying at once."""
    won: list[str] = []
    busy: list[str] = []
    start = threading.Barrier(drivers)

    def take(owner: str) -> None:
        start.wait()
        try:
            store.leases.acquire(thread_id, owner)
            won.append(owner)
        except RunBusyError:
            busy.append(owner)

    threads = [threading.Thread(target=take, args=(new_owner(),)) for _ in range(drivers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won, busy


def test_drivers_racing_for_one_lease_leave_exactly_one_holder(db_url: str) -> None:
    with Store(db_url) as store:
        for n in range(12):  # the first rounds also grow the pool
            won, busy = race(store, f"race-{n}", 8)
            assert len(won) == 1, (won, busy)
            assert len(busy) == 7
            lease = store.leases.get(f"race-{n}")
            assert lease is not None
            assert lease.owner == won[0]
            kinds = [k for _, k, _ in store.leases.events(f"race-{n}")]
            assert kinds == ["lease_acquired"], kinds


def test_a_lease_taken_over_after_expiry_logs_the_takeover_then_the_acquisition(
    db_url: str,
) -> None:
    with Store(db_url) as store:
        first, second = new_owner(), new_owner()
        store.leases.acquire("t", first)
        with store.db.use() as db:  # the first driver stopped beating long ago
            db.execute(
                "UPDATE onward_leases SET expires_at = ?, heartbeat_at = ? WHERE thread_id = ?",
                ("2000-01-01T00:00:00+00:00", "2000-01-01T00:00:00+00:00", "t"),
            )
        taken = store.leases.acquire("t", second)
        assert taken is not None
        assert taken.owner == first
        lease = store.leases.get("t")
        assert lease is not None
        assert lease.owner == second
        kinds = [k for _, k, _ in store.leases.events("t")]
        assert kinds == ["lease_acquired", "lease_taken_over", "lease_acquired"], kinds
        store.leases.release("t", second)
        assert store.leases.get("t") is None
        store.leases.release("t", first)  # not the first's lease any more: nothing happens
        kinds = [k for _, k, _ in store.leases.events("t")]
        assert kinds[-2:] == ["lease_acquired", "lease_released"], kinds
        assert store.leases.acquire("t", first) is None  # free again: no takeover
