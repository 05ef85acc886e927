"""A thread lock (``Store.thread_locks``, store/threadlocks.py): one holder at a time
across the threads and processes of one store; a holder's process that dies lets it go at
once (SQLite: the kernel drops its file lock; Postgres: its row names a pid that is gone),
and a Postgres hold of a live process elsewhere runs out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from onward.errors import StoreError
from onward.model.clock import utcnow
from onward.store.database import Store
from onward.store.sql import Backend, backend_of
from onward.store.threadlocks import RowLocks

HOLD = """
import sys, time
from onward.store.database import Store
with Store(sys.argv[1]) as store, store.thread_locks("t"):
    print("held", flush=True)
    time.sleep(600)
"""


def _hold(store: Store, thread_id: str, taken: threading.Event, done: threading.Event) -> None:
    with store.thread_locks(thread_id):
        taken.set()
        done.wait(30)


def _taker(store: Store) -> tuple[threading.Thread, threading.Event, threading.Event]:
    taken, done = threading.Event(), threading.Event()
    taker = threading.Thread(target=_hold, args=(store, "t", taken, done), daemon=True)
    taker.start()
    return taker, taken, done


def test_a_second_holder_waits_until_the_first_lets_go(db_url: str) -> None:
    with Store(db_url) as one, Store(db_url) as two:  # two stores: two connections
        with one.thread_locks("t"):
            taker, taken, done = _taker(two)
            assert not taken.wait(0.3)
            with one.thread_locks("other"):  # other threads are not held up
                pass
        assert taken.wait(10)
        done.set()
        taker.join(10)
        with one.thread_locks("t"):  # let go at the end
            pass


def test_the_lock_is_let_go_when_the_decision_fails(db_url: str) -> None:
    with Store(db_url) as store:
        with pytest.raises(ValueError, match="refused"), store.thread_locks("t"):
            raise ValueError("the request was refused")
        taker, taken, done = _taker(store)
        assert taken.wait(10)
        done.set()
        taker.join(10)


def test_a_holder_in_another_process_keeps_it_until_that_process_is_killed(
    db_url: str,
) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, db_url], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held\n"
        with Store(db_url) as store:
            taker, taken, done = _taker(store)
            assert not taken.wait(0.5)
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(10)
            assert taken.wait(10)  # at once, not after LOCK_HOLD
            done.set()
            taker.join(10)
    finally:
        holder.kill()
        holder.wait(10)


def test_a_postgres_hold_of_a_process_elsewhere_runs_out(db_url: str) -> None:
    if backend_of(db_url) is not Backend.POSTGRES:
        return  # a SQLite store's holders are all on this host: the kernel knows them
    with Store(db_url) as store:
        store.threads.runs("none")  # the serve tables exist
        with store.db.use() as db:
            db.execute(
                "INSERT INTO onward_thread_locks VALUES (?, ?, ?)",
                ("t", "another-host:1:0:x", (utcnow() + timedelta(seconds=1)).isoformat()),
            )
        taker, taken, done = _taker(store)
        assert not taken.wait(0.5)  # still its holder's
        assert taken.wait(10)  # its hold ran out
        done.set()
        taker.join(10)


class _DeleteFails:
    """The store's connection, but the first delete of a lock row fails as a database
    gone past ``ONWARD_PG_OUTAGE`` does."""

    def __init__(self, real: Any) -> None:
        self.real, self.failed = real, False

    @contextmanager
    def use(self) -> Iterator[Any]:
        with self.real.use() as db:
            yield self if not self.failed else db

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql.startswith("DELETE") and not self.failed:
            self.failed = True
            raise StoreError("the database is gone")
        with self.real.use() as db:
            return db.execute(sql, params)


def test_a_postgres_lock_whose_delete_failed_is_taken_at_once_in_its_process(
    db_url: str,
) -> None:
    """The decision stands (no error for a run already started); the row stays, and the
    next request of this process on the thread takes it at once, not after LOCK_HOLD."""
    if backend_of(db_url) is not Backend.POSTGRES:
        return  # a SQLite lock is the kernel's: nothing to delete
    with Store(db_url) as store:
        store.threads.runs("none")  # the serve tables exist
        failing = RowLocks(_DeleteFails(store.db))  # type: ignore[arg-type]
        with failing("t"):
            pass
        with store.db.use() as db:
            assert db.execute("SELECT COUNT(*) FROM onward_thread_locks").fetchone()[0] == 1
        taker, taken, done = _taker(store)
        assert taken.wait(5)  # LOCK_HOLD is 90 s
        done.set()
        taker.join(10)
