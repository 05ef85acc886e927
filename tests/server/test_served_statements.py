"""What the store is asked for one served run, counted by statement (issue 39).

A chat frontend's run is ``POST /threads`` then ``POST /threads/{id}/runs/stream``. Its
requests and its drive read the thread's records once where they can pass on what they
read: the new thread's row is answered as written, the run request reads the thread's row
once (its metadata already names the graph: only touched when the run is accepted), the
drive knows its run is an API thread. The run's record is written whole when it is
accepted (its ``multitask_strategy`` and stream modes with it, not updated after), and set
ended together with its thread's ``updated_at``. Each batch of stream events the feed keeps
is one INSERT (on Postgres a statement per event was a round trip each, and a transaction
around them two more).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from onward import Onward
from onward.client import starting
from onward.errors import OnwardError, StoreError
from onward.serve.app import create_app
from onward.store.connection import PooledDb
from onward.store.database import Store
from onward.store.runs import Threads
from onward.store.sql import Db
from tests.support.common import postgres_schema
from tests.support.history_rows import settled
from tests.support.serve_long import noop_chain

KINDS = {
    "run record": r"^SELECT \* FROM onward_runs WHERE thread_id",
    "thread row": r"^SELECT thread_id, owner, created_at, updated_at, metadata FROM onward_threads",
    "thread metadata": r"^UPDATE onward_threads SET metadata",
    "strategy": r"^UPDATE onward_api_runs SET multitask_strategy",
    "run status": r"^(WITH also0 AS \()?UPDATE onward_api_runs SET status",
    "queue": r"^UPDATE onward_queue SET|WITH also0 AS .*UPDATE onward_queue SET",
    "event rows": r"^INSERT INTO onward_api_run_events",
}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()

    def counting(real: Any) -> Any:
        def execute(self: Db, sql: str, params: Any = ()) -> Any:
            for kind, pattern in KINDS.items():
                if re.match(pattern, sql):
                    counts[kind] += 1
            return real(self, sql, params)

        return execute

    for db in (Db, PooledDb):  # SQLite's connections, Postgres's pool
        monkeypatch.setattr(db, "execute", counting(db.execute))

    real_add = Threads.add_runs_events

    def add_runs_events(self: Threads, runs: Any) -> None:
        counts["event batches"] += 1
        counts["events"] += sum(len(events) for _run, _thread, events in runs)
        real_add(self, runs)

    monkeypatch.setattr(Threads, "add_runs_events", add_runs_events)
    monkeypatch.setenv("ONWARD_CRON_TICK", "1h")
    return counts


def streamed_run(client: TestClient) -> str:
    made = client.post("/threads", json={})
    assert made.status_code == 200, made.text
    thread_id = str(made.json()["thread_id"])
    body = {"assistant_id": "onward", "input": noop_chain(3), "stream_mode": "values"}
    with client.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as answer:
        assert answer.status_code == 200
        lines = list(answer.iter_lines())
    assert "event: error" not in lines
    settled(client)
    return thread_id


def test_a_served_run_reads_its_records_once_and_keeps_each_event_batch_in_one_statement(
    db_url: str, tmp_path: Path, counted: Counter[str]
) -> None:
    app = create_app(db_url, workdir=tmp_path, recover=False)
    with TestClient(app) as client:
        streamed_run(client)  # the server's clients are made
        counted.clear()
        thread_id = streamed_run(client)
        counts = Counter(counted)
        runs = client.get(f"/threads/{thread_id}/runs").json()
        thread = client.get(f"/threads/{thread_id}").json()
    assert [r["status"] for r in runs] == ["success"]
    assert thread["status"] == "idle"
    assert thread["values"]["status"] == "done"
    assert thread["metadata"]["graph_id"] == "onward"
    assert counts["events"] > counts["event batches"] >= 1  # batches of several events
    assert counts["event rows"] == counts["event batches"]
    assert counts["thread row"] == 1  # the run request's
    assert counts["thread metadata"] == 0  # it named the graph and assistant already
    assert counts["strategy"] == 0  # written with the run's record
    assert counts["run status"] == 1  # the drive's end, with the thread's update
    assert counts["queue"] == 1  # its queue entry's wake-up, in the same statement
    # The thread's onward run: the run request (is the thread free, under its lock) and
    # the drive's end; not the start (the request read it: no run has the id) nor the
    # drive's start (its request stored the record).
    assert counts["run record"] <= 2


def test_a_served_runs_start_writes_its_records_and_events_in_one_transaction_each(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's record and request with its start event (one transaction, on every path
    that starts a run), then the API record with the thread's touch and its event (one
    more): each was a transaction, or a commit, of its own."""
    import onward.observe.events as event_log

    made: list[str] = []

    def counting(real: Any, name: str) -> Any:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            made.append(name)
            return real(self, *args, **kwargs)

        return method

    monkeypatch.setattr(
        event_log.EventLog, "record_many", counting(event_log.EventLog.record_many, "events")
    )
    monkeypatch.setattr(Threads, "touch", counting(Threads.touch, "touch"))
    app = create_app(db_url, workdir=tmp_path, recover=False)
    with TestClient(app) as client:
        streamed_run(client)
        made.clear()
        thread_id = streamed_run(client)
        runs = client.get(f"/threads/{thread_id}/runs").json()
    assert [r["status"] for r in runs] == ["success"]
    assert made == []  # before: ["events", "events", "touch"], a transaction each
    with Onward(db=db_url) as ow:
        kinds = [e.kind for e in ow.store.events.list(thread_id)]
    assert kinds.index("run_started") < kinds.index("api_run_started")


def test_a_served_runs_own_writes_take_sqlites_write_lock_seven_times(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Besides its checkpoints' commits and its stream's event batches, a served run takes
    the file's write lock (onward.store.writelock) for its thread, its run and request,
    its API record, its lease, its status, the lease's release and its record's end:
    seven. Each take is held for a statement's GIL hand-offs as well as SQLite's work,
    and the lock is what 50 users queue for. The end's queue wake-up goes with the
    record's end (it was a take of its own)."""
    import threading

    import onward.store.writelock as writelock
    from onward.checkpointing.savers import OnwardSqliteSaver

    takes: Counter[str] = Counter()
    depth = threading.local()
    real_lock_of = writelock._lock_of

    class Counted:
        def __init__(self, real: threading.RLock) -> None:
            self.real = real

        def acquire(self, timeout: float = -1) -> bool:
            mine = self.real.acquire(timeout=timeout)
            if mine:
                if getattr(depth, "n", 0) == 0:
                    takes["all"] += 1
                depth.n = getattr(depth, "n", 0) + 1
            return mine

        def release(self) -> None:
            depth.n -= 1
            self.real.release()

    def counted(real: Any, kind: str) -> Any:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            takes[kind] += 1
            return real(self, *args, **kwargs)

        return method

    app = create_app(sqlite_url, workdir=tmp_path, recover=False)
    with TestClient(app) as client:
        streamed_run(client)  # the server's clients are made
        monkeypatch.setattr(writelock, "_lock_of", lambda path: Counted(real_lock_of(path)))
        monkeypatch.setattr(
            OnwardSqliteSaver, "_commit_now", counted(OnwardSqliteSaver._commit_now, "commits")
        )
        monkeypatch.setattr(
            Threads, "add_runs_events", counted(Threads.add_runs_events, "event batches")
        )
        monkeypatch.setattr(Store, "wake", counted(Store.wake, "wake alone"))
        streamed_run(client)
        monkeypatch.undo()
    assert takes["commits"] >= 3, takes
    assert takes["event batches"] >= 1, takes
    assert takes["wake alone"] == 0
    assert takes["all"] - takes["commits"] - takes["event batches"] == 7, takes


def test_a_served_runs_writes_outside_its_commits_are_one_statement_each_on_postgres(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's record, request and start event; its API record, the thread's touch and
    its event; its end with the queue's wake-up: one statement each (CTEs,
    ``Db.write_all``), where each was a transaction of BEGIN, a round trip a statement,
    and COMMIT. Its checkpoints' commits are the saver's own pipelines."""
    opened: list[str] = []
    real = PooledDb.transaction

    def counted(self: PooledDb, lock: str | None = None) -> Any:
        opened.append(lock or "")
        return real(self, lock)

    with postgres_schema() as url:
        app = create_app(url, workdir=tmp_path, recover=False)
        with TestClient(app) as client:
            streamed_run(client)
            monkeypatch.setattr(PooledDb, "transaction", counted)
            thread_id = streamed_run(client)
            monkeypatch.undo()
        with Onward(db=url) as ow:
            kinds = [e.kind for e in ow.store.events.list(thread_id)]
    assert opened == []
    assert kinds.index("run_started") < kinds.index("api_run_started")


def test_a_served_drive_of_a_thread_gone_ends_in_a_clear_error_and_holds_no_lease(
    ow: Onward,
) -> None:
    """A served drive does not read its run's record before it starts (its request stored
    it). A thread gone by then (deleted in between) still ends the drive with onward's
    error, before any step, and leaves no lease behind."""
    assert ow.store.leases.all() == {}
    with pytest.raises(OnwardError):
        list(ow.stream_modes("gone-before-its-drive", ["values"], served=True))
    assert ow.store.leases.all() == {}


def test_a_start_told_the_id_is_fresh_fails_on_a_taken_id_and_leaves_its_run(
    ow: Onward, workdir: Path
) -> None:
    """The run request's start does not check again that no run has the thread id (the
    request read that under the thread's lock). A run that took the id all the same makes
    the start fail with a StoreError (which the request answers 409), its run untouched."""

    def start(goal: str) -> str:
        plan = {"steps": [{"id": "a", "tool": "noop", "args": {}}]}
        return starting.start(
            ow,
            goal,
            plan=plan,
            inputs=(),
            workdir=workdir,
            max_concurrency=None,
            thread_id="taken",
            policy=None,
            budget=None,
            judge=False,
            acceptance=(),
            constraints=None,
            fresh=True,
        )

    start("the first")
    before = ow.store.get_run("taken")
    with pytest.raises(StoreError):
        start("the second")
    assert ow.store.get_run("taken") == before
    assert ow.store.run_request("taken")["input"]["goal"]["objective"] == "the first"
