"""A store's leases keep their connections between calls (store/leases.py): on SQLite a
new connection reads the database's schema at its first statement, inside the file's
write lock, which made taking and letting go of a lease the longest holds of a served
run. And the write lock finds a file's lock without resolving its path every time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from onward import Onward
from onward.errors import RunBusyError, StoreError
from onward.model.state import Plan, PlanStep
from onward.store import writelock
from onward.store.sql import Db


def _counting(connect: Callable[[], Db], made: list[Db]) -> Callable[[], Db]:
    def counted() -> Db:
        made.append(connect())
        return made[-1]

    return counted


def _a_run(ow: Onward, workdir: Path) -> str:
    return ow.submit(plan=Plan(steps=[PlanStep(id="a", tool="noop")]), workdir=workdir)


def test_a_lease_keeps_its_connection_between_calls(db_url: str, workdir: Path) -> None:
    """Ten drives' acquire, heartbeat and release in a row open one connection (they
    opened thirty)."""
    made: list[Db] = []
    with Onward(db_url, model=None) as ow:
        tid = _a_run(ow, workdir)
        leases = ow.store.leases
        leases._connect = _counting(leases._connect, made)
        for _ in range(10):
            leases.acquire(tid, "driver")
            assert leases.renew(tid, "driver")
            leases.release(tid, "driver")
        assert leases.get(tid) is None
    assert len(made) == 1


def test_a_lease_connection_that_saw_an_error_is_not_kept(db_url: str, workdir: Path) -> None:
    """A call that raised (here: the run is someone else's) closes its connection; the
    next call opens another, and the store's close closes the kept one."""
    made: list[Db] = []
    with Onward(db_url, model=None) as ow:
        tid = _a_run(ow, workdir)
        leases = ow.store.leases
        leases._connect = _counting(leases._connect, made)
        leases.acquire(tid, "first")
        with pytest.raises(RunBusyError):
            leases.acquire(tid, "second")
        assert len(made) == 1
        leases.release(tid, "first")
        assert len(made) == 2  # the busy call's connection was not kept
        assert ow.store.leases.get(tid) is None
    if not db_url.startswith("sqlite"):
        return  # a pooled Db holds no connection of its own
    with pytest.raises(StoreError):
        made[-1].execute("SELECT 1")  # closed with the store


def test_the_write_lock_resolves_a_files_path_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every SQLite write looks up its file's lock: the path's real path (an ``lstat`` a
    part) is resolved the first time only; the same file by another path is the same
    lock."""
    resolved: list[str] = []
    real = writelock.os.path.realpath

    def counted(path: str) -> str:
        resolved.append(path)
        return real(path)

    monkeypatch.setattr(writelock.os.path, "realpath", counted)
    path = tmp_path / "once.db"
    locks = [writelock._lock_of(str(path)) for _ in range(5)]
    assert resolved == [str(path)]
    assert all(lock is locks[0] for lock in locks)
    assert writelock._lock_of(str(tmp_path / "." / "once.db")) is locks[0]
