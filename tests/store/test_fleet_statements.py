"""What a worker's drive costs Postgres, counted, not timed (issue 37).

A fleet on Postgres spent several milliseconds of client and server CPU per plan step on
each run's claim, lease, reads of its record and its cancel requests, status writes and
threads, around the step's own commit. These are counted here, on a private cluster
that logs every statement (``log_statement = all``): an in-process worker drains runs of
plain steps, and the statements its connections sent (by ``application_name``) are
divided by the plan steps it ran. Counting the statements, not the time they took, makes
the bound hold on a loaded machine too.

- commits per plan step stay within :data:`MOST_COMMITS`, each one statement, and the
  other statements per run within :data:`MOST_OUTSIDE_COMMITS` (before 8215bd2: a transaction of
  four for the claim and for each status write, the run's record read three times, its
  cancel requests twice, its API thread, its request again at the end);
- the claim, the lease and the status write are one statement each, the record and the
  cancel requests are not read by the drive (the claim read them);
- the drives start no thread of onward's own per run: one timer thread per store runs
  every drive's heartbeat and looks for cancels (store/ticking.py).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from onward import Onward
from onward.client.worker import Worker, WorkerPolicy
from onward.model.state import RunStatus
from tests.support.pgcluster import Cluster
from tests.support.rolled_values import chain

RUNS, STEPS = 6, 3
MOST_OUTSIDE_COMMITS = 10.5
"""Statements per run outside the savers' commits (claim, lease, the reads of the
checkpoint and the request, the status write, the release; the worker's start-up shared
over the runs): now 9.8; 18.5 on the commit before 8215bd2, and its claim and two
status writes were transactions of four statements besides."""
MOST_COMMITS = 5 / 3
"""Commits per plan step of these runs, all of them the savers': the run's
input checkpoint, one per step (the first with the declared plan's writes, which wait
for it), the last checkpoint's with finalize's writes, the run's status and its leaving
the queue: 5 a run (7 before the plan and finalize waited for
the next commit; 3.8 a step before 8215bd2: 8 commits a run, the claim's and two status
writes' transactions)."""
APP = "counted-worker"
SAVE = "WITH also0 AS (INSERT INTO checkpoint"
"""How a saver's commit begins: one statement of data-modifying CTEs, its first the
rows of a checkpoint table (since the commit of this line; before, a transaction)."""


@pytest.fixture(scope="module")
def logged() -> Iterator[Cluster]:
    """A private cluster that logs every statement with its connection's application name
    and server process."""
    made = Cluster(max_connections=40)
    try:
        with (made.data / "postgresql.conf").open("a") as conf:
            conf.write("log_statement = 'all'\nlog_line_prefix = '@@%a %p: '\n")
        made.start()
        yield made
    finally:
        made.remove()


def statements(log: str) -> tuple[Counter[str], Counter[str]]:
    """The statements logged for :data:`APP` by their first words: those inside a
    transaction (``BEGIN`` to ``COMMIT`` of one connection) and the others."""
    inside: Counter[str] = Counter()
    outside: Counter[str] = Counter()
    open_on: set[str] = set()
    for entry in log.split("@@")[1:]:
        who, _, rest = entry.partition(": ")
        app, _, pid = who.rpartition(" ")
        match = re.match(r"LOG:\s+(?:statement|execute [^:]*): (.*)", rest, re.DOTALL)
        if app != APP or not match:
            continue
        text = " ".join(match.group(1).split())[:60]
        if text == "BEGIN":
            open_on.add(pid)
        (inside if pid in open_on else outside)[text] += 1
        if text in ("COMMIT", "ROLLBACK"):
            open_on.discard(pid)
    return inside, outside


def test_a_worker_drive_costs_few_statements(
    logged: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = logged.create_database("fleet")
    with Onward(url, model=None) as ow:
        tids = [ow.submit(plan=chain(STEPS), workdir=tmp_path) for _ in range(RUNS)]
    started: Counter[str] = Counter()
    start = threading.Thread.start

    def counted(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        started[self.name] += 1
        start(self, *args, **kwargs)

    log = logged.root / "server.log"
    mark = log.stat().st_size
    monkeypatch.setattr(threading.Thread, "start", counted)
    worker = Worker(
        f"{url}?application_name={APP}",
        policy=WorkerPolicy(concurrency=2, poll=timedelta(seconds=0.05), exit_when_idle=True),
        model=None,
    )
    report = worker.run()
    monkeypatch.undo()
    with Onward(url, model=None) as ow:
        assert [ow.get(t).status for t in tids] == [RunStatus.DONE] * RUNS
    assert sorted(report.finished) == sorted(tids)

    inside, outside = statements(log.read_bytes()[mark:].decode(errors="replace"))
    shown = sorted({**inside, **outside}.items(), key=lambda kv: -kv[1])
    # A commit is one statement: each table's rows one multi-row INSERT, the fence its
    # SELECT (store.sql.batch_in_one), not BEGIN, the fence, a call a row and COMMIT.
    saves = sum(n for q, n in outside.items() if q.startswith(SAVE))
    assert inside["BEGIN"] == inside["COMMIT"] == 0, shown
    assert saves / (RUNS * STEPS) <= MOST_COMMITS, shown
    rest = sum(outside.values()) - saves
    assert rest / RUNS <= MOST_OUTSIDE_COMMITS, sorted(outside.items())
    # The claim, the lease and the status write are one statement each; the drive reads
    # the run's record and its cancel requests not at all (the claim did), and fences
    # inside its statements, not in a transaction of its own.
    claims = sum(n for q, n in outside.items() if q.startswith("UPDATE onward_queue SET"))
    assert RUNS <= claims <= RUNS + 4  # (and each idle slot's look at the end)
    assert not [q for q in outside if q.startswith("SELECT * FROM onward_runs")], shown
    assert not [q for q in outside if "FROM onward_events WHERE thread_id = " in q], shown
    leases = sum(n for q, n in outside.items() if q.startswith("WITH won AS"))
    assert leases == RUNS
    assert not [q for q in outside if "onward_fence" in q], shown
    # No thread of onward's own per run: the timer thread at most once (it lingers).
    ours = {name: n for name, n in started.items() if name.startswith("onward-")}
    assert ours.get("onward-heartbeat", 0) <= 1, ours
    assert "onward-cancels" not in ours, ours
