"""A run request reads the thread's records once (issue 39).

``POST /threads/{id}/runs/wait`` of a 3-step run used to read the same thread, run and
assistant records again at each check it passed (thread lock, visibility, thread status,
queued runs, the run's start, its end, the next queued run): 24 reads of those four
tables per run on SQLite (the onward run's row 10 times, the thread's 8), now 13. The request
now reads the thread once under its lock and hands what it read on; the drive's end
asks for the thread's questions only of a run that did not finish, and the pool looks
for a queued run before it reads the thread's status. The reads are counted on every
SQLite connection the server opens (a trace callback set as each is opened), per table,
on the threads that serve the request and drive the run: the drive's cancel watch polls
on a timer and the lease heartbeat beats on one, so their reads depend on how long the
run took, and are not counted.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from onward.serve.app import create_app
from tests.support.history_rows import settled
from tests.support.serve_long import noop_chain

TIMED = ("onward-cancels", "onward-heartbeat", "onward-recovery")
"""Threads that read on a timer, not for the request."""
RECORDS = ("onward_threads", "onward_runs", "onward_api_runs", "onward_assistants")
"""The thread's, its onward run's, its API runs' and the assistant's records."""
MOST = {"onward_threads": 3, "onward_runs": 5, "onward_api_runs": 4, "onward_assistants": 1}
"""Reads per table of one run now (before: 8, 10, 4 and 2)."""


class Reads:
    """SELECT statements by the table they read, while counting."""

    def __init__(self) -> None:
        self.tables: Counter[str] = Counter()
        self.states: Counter[str] = Counter()
        """Reads of a checkpoint with its values (SqliteSaver keeps them in the row), by
        whether a drive made them."""
        self.counting = False
        self._lock = threading.Lock()

    def statement(self, sql: str) -> None:
        name = threading.current_thread().name
        if not self.counting or name in TIMED:
            return
        found = re.match(r"\s*SELECT\b(.*?)\bFROM\s+(\w+)", sql, re.IGNORECASE | re.DOTALL)
        if found:
            with self._lock:
                self.tables[found.group(2)] += 1
                if found.group(2) == "checkpoints" and re.search(r"\bcheckpoint\b", found[1]):
                    self.states["drive" if name.startswith("onward-run") else "request"] += 1


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    """Every SQLite connection opened from now on reports its statements."""
    counted = Reads()
    opened = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = opened(*args, **kwargs)
        conn.set_trace_callback(counted.statement)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setenv("ONWARD_CRON_TICK", "1h")  # no scheduler tick inside a counted run
    return counted


def one_run(client: TestClient, reads: Reads | None = None) -> None:
    """A 3-step run on a new thread; ``reads`` counts its ``runs/wait`` request."""
    thread_id = client.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "onward", "input": noop_chain(3)}
    if reads is not None:
        reads.counting = True
    answer = client.post(f"/threads/{thread_id}/runs/wait", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "done"
    settled(client)  # the pool's look for a queued run belongs to this run
    if reads is not None:
        reads.counting = False


def run_reads(tmp_path: Path, reads: Reads) -> Counter[str]:
    app = create_app(
        f"sqlite:///{tmp_path / 'reads.db'}", workdir=tmp_path, model=None, recover=False
    )
    with TestClient(app) as client:
        one_run(client)  # the server's clients and their connections are made
        one_run(client, reads)
    return Counter({t: n for t, n in reads.tables.items() if t in RECORDS})


def test_a_run_request_reads_the_thread_run_and_assistant_records_once_each_check(
    tmp_path: Path, reads: Reads
) -> None:
    counted = run_reads(tmp_path, reads)
    assert counted["onward_runs"] >= 1  # the counting saw the run's reads at all
    over = {t: n for t, n in counted.items() if n > MOST.get(t, 0)}
    assert not over, f"more reads per run than {MOST}: {dict(counted)}"
    assert counted.total() <= sum(MOST.values())


def test_a_follow_up_request_loads_its_threads_state_twice(tmp_path: Path, reads: Reads) -> None:
    """A message on a finished thread: the request reads the state it plans from and
    LangGraph's update reads it again; its questions and the checkpoint its run record
    names are found by the checkpoint's id, without its values (they were loaded three
    more times); whether a run drives the thread is read from its lease, not from its
    whole status."""
    app = create_app(
        f"sqlite:///{tmp_path / 'reads.db'}", workdir=tmp_path, model=None, recover=False
    )
    with TestClient(app) as client:
        one_run(client)
        thread_id = client.post("/threads/search", json={}).json()[0]["thread_id"]
        message = {"messages": [{"type": "human", "content": "and now?"}]}
        reads.counting = True
        answer = client.post(
            f"/threads/{thread_id}/runs/wait", json={"assistant_id": "onward", "input": message}
        )
        assert answer.status_code == 200, answer.text
        settled(client)
        reads.counting = False
    assert reads.tables["checkpoints"] >= 3  # the counting saw the request's reads at all
    assert reads.states["request"] == 2, dict(reads.states)
    # Whether the thread is busy is its lease alone (it was read in full, questions and
    # all, and the run record with it: 6 reads of that record on the parent).
    assert reads.tables["onward_runs"] <= 4, dict(reads.tables)
    assert reads.tables["writes"] <= 5, dict(reads.tables)
