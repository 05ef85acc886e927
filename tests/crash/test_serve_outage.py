"""``onward serve`` outlives its database: a real server process on a private PostgreSQL
cluster (``tests/support/pgcluster.py``) drives a 24-step run through the unmodified
``langgraph_sdk`` while the tests crash and restart the cluster or kill its connections.

- After ``pg_ctl stop -m immediate`` + start, and after a storm of ``pg_terminate_backend``,
  the run finishes in the same server process: every effect once (the ledger, the tool's
  own record), the API run record ``success`` as the checkpoint says ``done``, the stream
  ended (never a hang) with the whole run, or with an ``error`` event whose
  ``Last-Event-ID`` joins the rest. The server says so in one log line per outage, no
  traceback, within its pool's connections.
- A database that stays away past ``ONWARD_PG_OUTAGE`` ends the stream with an ``error``
  event naming the ``Last-Event-ID``; once the server is back the run is driven on and a
  join after that id gets the rest, to the end.
- A drive that lost its connection goes again from the request's start while it saved
  nothing, from its last saved step once it did (a fake client; no database).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from langgraph_sdk import get_sync_client

from onward.errors import DatabaseUnavailable
from onward.serve import drives
from onward.serve.feed import DONE, Feed
from onward.store.database import Store
from tests.support.hitl_tools import rows
from tests.support.pgcluster import Cluster, cluster
from tests.support.serve import start_server
from tests.support.serve_api import chain, done_steps, wait_until
from tests.support.serve_durable import sse

pytestmark = pytest.mark.crash

POOL = 10
"""ONWARD_PG_POOL_SIZE of the server here."""
STEPS = [f"s{i:02d}" for i in range(24)]
LOST = "cannot be reached"
"""What the server's one line about an outage says."""
STREAM_LIMIT = 150.0
"""Seconds a stream may take in all: past it, it hangs."""


@pytest.fixture(scope="module")
def pg() -> Iterator[Cluster]:
    with cluster(max_connections=40) as made:
        yield made


@pytest.fixture
def db(pg: Cluster) -> Iterator[str]:
    """A new database of the private cluster; the cluster runs again after the test."""
    with pg.fresh_database() as url:
        yield url


class Reader:
    """A run's stream read on a thread, so a hang shows as a reader still alive."""

    def __init__(self, url: str, path: str, last_event_id: str | None = None) -> None:
        self.events: list[Any] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._read, args=(url, path, last_event_id), daemon=True
        )
        self._thread.start()

    def _read(self, url: str, path: str, last_event_id: str | None) -> None:
        try:
            self.events.extend(sse(url, path, last_event_id))
        except BaseException as exc:
            self.error = exc

    def ended(self, timeout: float = STREAM_LIMIT) -> list[Any]:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the stream hangs"
        assert self.error is None, self.error
        return self.events


class Peak:
    """The most connections the server held at once (``pg_stat_activity``, sampled)."""

    def __init__(self, pg: Cluster, app: str) -> None:
        self.most, self._pg, self._app = 0, pg, app
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # the cluster is down now
                self.most = max(self.most, self._pg.connections(self._app))
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def storm(pg: Cluster, app: str, seconds: float) -> None:
    """Kill the server's connections again and again, mid-transaction too."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pg.terminate(app)
        time.sleep(0.005)


def start_run(url: str) -> tuple[str, str]:
    client = get_sync_client(url=url, api_key=None)
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(
        tid, "onward", input=chain(*STEPS, seconds=0.1), stream_mode=["values", "updates"]
    )
    return tid, run["run_id"]


def rest_of(url: str, path: str, events: list[Any]) -> list[Any]:
    """The stream to its end: as read, or joined again after its error event's id."""
    errors = [data for _id, event, data in events if event == "error"]
    if not errors:
        return events
    [error] = errors
    assert events[-1][1] == "error", "the error event ends the stream"
    assert "Last-Event-ID" in error["message"], error
    rest = Reader(url, path, error["last_event_id"]).ended()
    ids = [int(i) for i, _e, _d in rest]
    assert ids == sorted(set(ids)), ids
    assert min(ids) > int(error["last_event_id"]), "the rest comes after the id it named"
    return events + rest


def assert_run_done_once(db: str, url: str, workdir: Path, tid: str, run_id: str) -> None:
    """Each effect once; the API run record and the checkpoint agree: done."""
    client = get_sync_client(url=url, api_key=None)
    wait_until("the run's record", lambda: client.runs.get(tid, run_id)["status"] != "running")
    assert client.runs.get(tid, run_id)["status"] == "success"
    state: Any = client.threads.get_state(tid)["values"]
    assert state["status"] == "done"
    assert done_steps(state) == set(STEPS)
    assert client.threads.get(tid)["status"] == "idle"
    effects = Counter(r["label"] for r in rows(workdir, "effects.jsonl"))
    assert effects == Counter(STEPS), "every effect once"
    with Store(db) as store:
        ledger = store.ledger.for_thread(tid)
    assert sorted(e.step_id for e in ledger) == STEPS
    assert {e.status.value for e in ledger} == {"completed"}


@pytest.mark.parametrize("fault", ["crash and restart", "killed connections"])
def test_a_served_run_finishes_in_the_same_process_through_a_database_fault(
    pg: Cluster, db: str, workdir: Path, fault: str
) -> None:
    log = workdir.parent / "serve.log"
    proc, url = start_server(
        db,
        workdir,
        log=log,
        ONWARD_PG_POOL_SIZE=str(POOL),
        ONWARD_LEASE_TTL="30",
        ONWARD_HEARTBEAT="1",
        PGAPPNAME="serve",
    )
    peak = Peak(pg, "serve")
    try:
        tid, run_id = start_run(url)
        path = f"/threads/{tid}/runs/{run_id}/stream"
        reader = Reader(url, path)
        wait_until("steps to run", lambda: len(rows(workdir, "calls.jsonl")) >= 4)
        if fault == "crash and restart":
            pg.stop("immediate")
            time.sleep(3.0)
            pg.start()
        else:
            storm(pg, "serve", 3.0)
        events = rest_of(url, path, reader.ended())
        finals = [data for _i, event, data in events if event == "values"]
        assert done_steps(finals[-1]) == set(STEPS), "the stream shows the run to its end"
        assert_run_done_once(db, url, workdir, tid, run_id)
        assert proc.poll() is None, "the same server process"
    finally:
        most = peak.stop()
        proc.terminate()
        proc.wait(30)
    err = log.read_text()
    assert "Traceback" not in err, err
    assert err.count(LOST) == 1, err  # one line per outage
    assert "answers again" in err, err
    assert 0 < most <= POOL + 1, most  # the pool, and the outage's one probe


def test_a_stream_whose_database_stays_away_ends_with_an_id_that_joins_the_rest(
    pg: Cluster, db: str, workdir: Path
) -> None:
    log = workdir.parent / "serve.log"
    proc, url = start_server(
        db,
        workdir,
        log=log,
        ONWARD_PG_POOL_SIZE=str(POOL),
        ONWARD_PG_OUTAGE="2",
        ONWARD_LEASE_TTL="3",
        ONWARD_HEARTBEAT="1",
        PGAPPNAME="serve",
    )
    try:
        tid, run_id = start_run(url)
        path = f"/threads/{tid}/runs/{run_id}/stream"
        reader = Reader(url, path)
        wait_until("steps to run", lambda: len(rows(workdir, "calls.jsonl")) >= 4)
        pg.stop("immediate")
        events = reader.ended()  # while the server is still down: no hang
        [error] = [data for _i, event, data in events if event == "error"]
        assert events[-1][1] == "error"
        assert error["error"] == "DatabaseGone", error
        assert f"Last-Event-ID {error['last_event_id']}" in error["message"], error
        assert events[-1][0] == error["last_event_id"], "the error event's own id"
        pg.start()
        events = rest_of(url, path, events)
        finals = [data for _i, event, data in events if event == "values"]
        assert done_steps(finals[-1]) == set(STEPS)
        assert_run_done_once(db, url, workdir, tid, run_id)
        assert proc.poll() is None, "the same server process"
    finally:
        proc.terminate()
        proc.wait(30)
    assert "Traceback" not in log.read_text()


class FlakyClient:
    """A fake client whose first drive saves ``saved`` supersteps, then loses the
    database; its second drive goes to the end. It records what each drive started from."""

    def __init__(self, saved: int) -> None:
        self.saved = saved
        self.starts: list[dict[str, Any]] = []

    def stream_modes(self, thread_id: str, modes: list[str], **start: Any) -> Iterator[Any]:
        self.starts.append(start)
        if len(self.starts) == 1:
            for n in range(self.saved):
                yield "values", {"n": n}
            raise DatabaseUnavailable("the connection was lost")
        yield "values", {"n": "end"}


@pytest.mark.parametrize("saved", [0, 2])
def test_a_drive_that_lost_the_database_goes_again_from_where_it_saved(saved: int) -> None:
    fake = FlakyClient(saved)
    out = Feed()
    pairing = drives.Pairing(out, "t", {"values"})
    answer: Command[Any] = Command(resume={"action": "approve"})
    start = drives.Start(answer, "cp-1", False, (), ())
    drives.stream_through_outages(fake, pairing, ["values"], start, None, "r")
    pairing.flush()
    out.put(DONE)
    first, again = fake.starts
    assert (first["command"], first["checkpoint_id"], first["takeover"]) == (answer, "cp-1", False)
    if saved:  # it went on: from its last saved step, not the answer or fork again
        assert (again["command"], again["checkpoint_id"]) == (None, None)
    else:  # nothing saved: the request's start again
        assert (again["command"], again["checkpoint_id"]) == (answer, "cp-1")
    assert again["takeover"] is True
    assert [data.raw for _n, (_e, data) in out.items()][-1] == {"n": "end"}
