"""The writers of one SQLite file in a process wait on the process's write lock of it
(onward.store.writelock) instead of sleeping in SQLite's busy handler; a lock held too
long is waited for a bounded time."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from onward import Onward
from onward.errors import StoreError
from onward.store import writelock
from onward.store.sql import Db
from tests.support.serve_long import noop_chain

WRITERS, EACH = 8, 40


def _table(path: Path) -> None:
    db = Db.open(f"sqlite:///{path}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (writer INTEGER, n INTEGER)")
    db.close()


def test_writers_of_one_file_in_a_process_never_find_it_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no busy timeout at all, a writer that finds the file locked fails at once
    ("database is locked"): waiting on the write lock, none of 8 threads' transactions
    and single writes does, and every row is there. (The lock waited for as long as it
    takes: a busy host must not make a writer give up its wait and fail.)"""
    monkeypatch.setattr(writelock, "WRITE_WAIT", 60.0)
    path = tmp_path / "writers.db"
    _table(path)
    failed: list[BaseException] = []
    start = threading.Barrier(WRITERS, timeout=60)
    # Opened one after another: opening sets pragmas, which with no busy timeout can
    # themselves find the file locked by another connection's opening (a writer that
    # died there left the others at the barrier until the suite's timeout).
    dbs = [Db.open(f"sqlite:///{path}", timeout=0) for _ in range(WRITERS)]

    def write(writer: int) -> None:
        db = dbs[writer]
        try:
            start.wait()
            for n in range(EACH):
                if n % 2:
                    db.execute("INSERT INTO t VALUES (?, ?)", (writer, n))
                    continue
                with db.transaction():
                    db.execute("INSERT INTO t VALUES (?, ?)", (writer, n))
                    db.execute("UPDATE t SET n = n WHERE writer = ?", (writer,))
        except (StoreError, sqlite3.Error, threading.BrokenBarrierError) as exc:
            failed.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    db = Db.open(f"sqlite:///{path}")
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == WRITERS * EACH
    db.close()


def test_a_write_lock_held_across_a_wait_delays_other_writers_only_a_bounded_time(
    tmp_path: Path,
) -> None:
    """A transaction that has read but not written holds the lock while it waits for
    another thread's write: that write goes on after WRITE_WAIT (SQLite lets it in), so
    the two never wait for each other for good."""
    path = tmp_path / "held.db"
    _table(path)
    wrote = threading.Event()

    def other() -> None:
        db = Db.open(f"sqlite:///{path}")
        db.execute("INSERT INTO t VALUES (2, 0)")
        db.close()
        wrote.set()

    db = Db.open(f"sqlite:///{path}")
    t0 = time.monotonic()
    with db.transaction():
        db.execute("SELECT count(*) FROM t").fetchone()
        thread = threading.Thread(target=other)
        thread.start()
        assert wrote.wait(10 * writelock.WRITE_WAIT + 5)  # not stuck behind this lock
    thread.join()
    assert time.monotonic() - t0 >= writelock.WRITE_WAIT * 0.9  # it did wait for the lock
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    db.close()


def test_only_statements_that_may_write_take_the_write_lock() -> None:
    assert writelock.writes("  insert into t values (1)")
    assert writelock.writes("WITH x AS (SELECT 1) UPDATE t SET n = 1")
    assert writelock.writes("DELETE FROM t")
    assert not writelock.writes("SELECT * FROM t")
    assert not writelock.writes("PRAGMA journal_mode=WAL")


def test_runs_driven_at_once_in_one_process_share_a_store_without_a_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six runs driven at once on one SQLite store, each through its own client (its
    own connections, its saver's own), with no busy timeout: every commit, event and
    lease write takes the write lock first, so none finds the file locked and all end
    done."""
    monkeypatch.setattr(writelock, "WRITE_WAIT", 60.0)
    monkeypatch.setenv("ONWARD_BUSY_TIMEOUT", "0")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    Onward(db=url).close()  # the store's tables, made once
    clients = [Onward(db=url) for _ in range(6)]
    for ow in clients:
        ow.store  # noqa: B018  (each store opened here, one by one: the runs go at once)
    ended: list[str] = []
    failed: list[BaseException] = []
    start = threading.Barrier(6)

    def drive(n: int) -> None:
        ow = clients[n]
        try:
            start.wait()
            plan = {"goal": f"run {n}", "steps": noop_chain(4)["plan"]["steps"]}
            view = ow.run(plan=plan, workdir=tmp_path)
            ended.append(view.status.value)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=drive, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for ow in clients:
        ow.close()
    assert failed == []
    assert ended == ["done"] * 6


@pytest.mark.parametrize(("fsync", "level"), [("0", 1), ("1", 2)])
def test_every_connection_to_a_sqlite_store_has_the_stores_durability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: str, level: int
) -> None:
    """The store's threads, leases, events and any other connection commit as its
    checkpoints do: NORMAL, or FULL with ONWARD_FSYNC=1 (SQLite's default is FULL: the
    side connections fsynced every commit, a disk's wait inside the write lock, while
    the checkpoints did not)."""
    monkeypatch.setenv("ONWARD_FSYNC", fsync)

    def synchronous(db: Db) -> int:
        return int(db.execute("PRAGMA synchronous").fetchone()[0])

    with Onward(f"sqlite:///{tmp_path / 'onward.db'}", model=None) as ow:
        store = ow.store
        with store.db.use() as db:
            assert synchronous(db) == level
        with store.threads._db.use() as db:
            assert synchronous(db) == level
        with store.leases._use() as db:
            assert synchronous(db) == level
        assert synchronous(store.connect()) == level
