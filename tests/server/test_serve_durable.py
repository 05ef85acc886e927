"""A run's life across ``onward serve`` processes on one store (both backends), through
the unmodified Python ``langgraph_sdk``: a stream rejoined with ``Last-Event-ID`` after
the server was SIGKILLed and restarted; a recovered run that still honours
``interrupt_after`` and its webhook; ``runs.cancel`` / ``cancel_many`` of a run another
server or an ``onward worker`` drives, also when its driver dies before it saw the
cancel; and another user's runs, which cannot be cancelled or joined."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

from tests.support.common import cli_env, onward_cmd
from tests.support.hitl_tools import rows
from tests.support.serve import HITL_TOOLS, free_port, start_server
from tests.support.serve_api import chain, done_steps, wait_until
from tests.support.serve_durable import FAST_LEASES, fed_and_followed, servers, sse


def labels(workdir: Path, name: str) -> list[str]:
    return [r["label"] for r in rows(workdir, name)]


def test_a_stream_is_rejoined_after_its_last_event_id_when_the_server_was_killed_and_restarted(
    db_url: str, workdir: Path
) -> None:
    port = free_port()
    proc, url = start_server(db_url, workdir, port=port, **FAST_LEASES)
    try:
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        run = client.runs.create(
            tid,
            "onward",
            input=chain("a", "b", "c", seconds=1.0),
            stream_mode=["values", "updates"],
        )
        wait_until("step a to run", lambda: labels(workdir, "calls.jsonl"))
        seen = sse(url, f"/threads/{tid}/runs/{run['run_id']}/stream", limit=2)
        assert [i for i, _e, _d in seen] == ["1", "2"]
        proc.kill()
        proc.wait(20)
        assert labels(workdir, "effects.jsonl") != ["a", "b", "c"]

        # The same address, a new process: the run is recovered and driven on; a client
        # that saw event 2 gets the rest, after 2, to the run's end (never a hang).
        proc, url = start_server(db_url, workdir, port=port, **FAST_LEASES)
        client = get_sync_client(url=url, api_key=None)
        rest = list(client.runs.join_stream(tid, run["run_id"], last_event_id="2"))
        ids = [int(p.id) for p in rest if p.id]
        assert ids
        assert min(ids) > 2
        assert ids == sorted(set(ids)), "ids go on increasing across the restart"
        metas = [p.data for p in rest if p.event == "metadata"]
        assert [m["attempt"] for m in metas][-1:] == [2]  # the recovered drive says so
        finals = [p.data for p in rest if p.event == "values"]
        assert done_steps(finals[-1]) == {"a", "b", "c"}
        assert {p.event for p in rest} <= {"metadata", "values", "updates"}
        assert client.runs.get(tid, run["run_id"])["status"] == "success"
        assert labels(workdir, "effects.jsonl") == ["a", "b", "c"]  # each effect once

        # Killed again once it ended: the whole stream is still there, from the store.
        proc.kill()
        proc.wait(20)
        proc, url = start_server(db_url, workdir, port=port, **FAST_LEASES)
        again = sse(url, f"/threads/{tid}/runs/{run['run_id']}/stream")
        assert again[0][1] == "metadata"
        assert [i for i, _e, _d in again][-len(rest) :] == [p.id for p in rest]
        # The end values again, as join answers them.
        joined = get_sync_client(url=url, api_key=None).runs.join(tid, run["run_id"])
        assert done_steps(joined) == {"a", "b", "c"}
    finally:
        proc.kill()
        proc.wait(20)


def test_a_recovered_run_still_pauses_where_it_was_asked_to_and_calls_its_webhook(
    db_url: str, workdir: Path
) -> None:
    got: list[dict[str, Any]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    hook = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    allow = {"ONWARD_HTTP_ALLOW": f"127.0.0.1:{hook.server_address[1]}"}
    webhook = f"http://127.0.0.1:{hook.server_address[1]}/done"
    try:
        proc, url = start_server(db_url, workdir, **FAST_LEASES, **allow)
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        run = client.runs.create(
            tid,
            "onward",
            input=chain("a", "b", seconds=2.0),
            interrupt_after=["verify"],
            webhook=webhook,
        )
        wait_until("step a to run", lambda: labels(workdir, "calls.jsonl"))
        proc.kill()  # mid-step: before its check, before the pause, before the webhook
        proc.wait(20)
        assert got == []
        proc, url = start_server(db_url, workdir, **FAST_LEASES, **allow)
        client = get_sync_client(url=url, api_key=None)
        wait_until("the webhook of the recovered run", lambda: got, timeout=90)
        # Paused where asked: the run ended well, its thread stands interrupted.
        assert client.runs.get(tid, run["run_id"])["status"] == "success"
        assert client.threads.get(tid)["status"] == "interrupted"
        (sent,) = got
        assert (sent["run_id"], sent["status"]) == (run["run_id"], "success")
        assert done_steps(sent["values"]) == {"a"}  # paused after a's check, as asked
        assert labels(workdir, "effects.jsonl") == ["a"]
        assert "b" not in labels(workdir, "calls.jsonl")
        proc.terminate()
        proc.wait(20)
    finally:
        hook.shutdown()


def test_a_run_another_server_drives_is_cancelled_and_rolled_back_through_the_store(
    db_url: str, workdir: Path
) -> None:
    with servers(db_url, workdir, 2) as ((_pa, a), (_pb, b)):
        on_a, on_b = get_sync_client(url=a, api_key=None), get_sync_client(url=b, api_key=None)
        tid = on_b.threads.create()["thread_id"]
        run = on_b.runs.create(tid, "onward", input=chain("a", "b", "c", seconds=1.5))
        wait_until("step a to run", lambda: labels(workdir, "calls.jsonl"))
        # The thread's stream, through the server that does not drive it, to the end.
        thread_parts: list[Any] = []
        reader = threading.Thread(target=lambda: thread_parts.extend(on_a.threads.join_stream(tid)))
        reader.start()
        # Server A does not drive it: it asks B through the store, and waits for the end.
        on_a.runs.cancel(tid, run["run_id"], wait=True)
        reader.join(60)
        assert not reader.is_alive()
        assert thread_parts[0].event == "metadata"
        assert {p.id.split(":")[0] for p in thread_parts} == {run["run_id"]}
        assert on_a.runs.get(tid, run["run_id"])["status"] == "interrupted"
        assert on_b.runs.get(tid, run["run_id"])["status"] == "interrupted"
        wait_until("the thread to be free", lambda: on_a.threads.get(tid)["status"] == "idle")
        # Its state shows what ran (step a, verified: its tool call and result), and the
        # node the cancel stopped reads as not started, not as an error.
        state = on_a.threads.get_state(tid)
        assert [m["type"] for m in state["values"]["messages"]].count("tool") == 1
        assert done_steps(state["values"]) == {"a"}
        assert [t["error"] for t in state["tasks"]] == [None] * len(state["tasks"])
        # Joined through the server that did not drive it: from the store, to its end.
        events = list(on_a.runs.join_stream(tid, run["run_id"]))
        assert events[0].event == "metadata"
        assert events[-1].event == "values"
        time.sleep(2.0)  # longer than a step: nothing more runs
        assert labels(workdir, "calls.jsonl") == ["a"]  # a was running: it finished, kept
        # A later run (on A) goes on from where it stopped: every effect once.
        values = on_a.runs.wait(tid, "onward", input=None)
        assert done_steps(values) == {"a", "b", "c"}
        assert labels(workdir, "effects.jsonl") == ["a", "b", "c"]

        # cancel_many with rollback, of a run B drives, asked on A: removed, thread empty.
        tid = on_b.threads.create()["thread_id"]
        # x runs long enough for the cancel to land while it runs, even on a loaded
        # machine (at 1.5 s a slow cancel once found the run finished, nothing to remove).
        run = on_b.runs.create(tid, "onward", input=chain("x", "y", seconds=4))
        wait_until("step x to run", lambda: "x" in labels(workdir, "calls.jsonl"))
        on_a.runs.cancel_many(thread_id=tid, run_ids=[run["run_id"]], action="rollback")
        wait_until("the run to be removed", lambda: on_a.runs.list(tid) == [], timeout=60)
        wait_until("the thread to be free", lambda: on_b.threads.get(tid)["status"] == "idle")
        assert on_b.threads.get_state(tid)["values"] == {}
        assert on_b.threads.get_history(tid) == []
        time.sleep(2.0)
        assert "y" not in labels(workdir, "calls.jsonl")
        # multitask interrupt on A of B's run: B stops it, A runs the new one.
        tid = on_b.threads.create()["thread_id"]
        slow = on_b.runs.create(tid, "onward", input=chain("p", "q", seconds=1.5))
        wait_until("step p to run", lambda: "p" in labels(workdir, "calls.jsonl"))
        values = on_a.runs.wait(tid, "onward", input=None, multitask_strategy="interrupt")
        assert on_a.runs.get(tid, slow["run_id"])["status"] == "interrupted"
        assert done_steps(values) == {"p", "q"}


def test_a_cancel_asked_of_a_server_that_is_then_killed_is_carried_out_not_driven_on(
    db_url: str, workdir: Path
) -> None:
    with servers(db_url, workdir, 2) as ((_pa, a), (pb, b)):
        on_a, on_b = get_sync_client(url=a, api_key=None), get_sync_client(url=b, api_key=None)
        tid = on_b.threads.create()["thread_id"]
        run = on_b.runs.create(tid, "onward", input=chain("a", "b", "c", seconds=3.0))
        wait_until("step a to run", lambda: labels(workdir, "calls.jsonl"))
        pb.kill()  # B dies mid-step a, its lease still live: the cancel is recorded only
        pb.wait(20)
        on_a.runs.cancel(tid, run["run_id"])  # 202: asked of whoever drives it
        # A's recovery finds the cancel once B's lease expired: it settles the run
        # instead of driving it on.
        wait_until(
            "the cancel to be carried out",
            lambda: on_a.runs.get(tid, run["run_id"])["status"] == "interrupted",
            timeout=60,
        )
        time.sleep(4.0)  # past another sweep and a step's time: nothing was driven on
        assert labels(workdir, "calls.jsonl") == ["a"]
        assert on_a.threads.get(tid)["status"] == "idle"
        # The killed step's effect is kept to once when a later run goes on.
        values = on_a.runs.wait(tid, "onward", input=None)
        assert done_steps(values) == {"a", "b", "c"}
        assert labels(workdir, "effects.jsonl") == ["a", "b", "c"]


@contextmanager
def worker(db_url: str, workdir: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        onward_cmd("worker", "--db", db_url, "--tools", HITL_TOOLS),
        cwd=workdir,
        env=cli_env(**FAST_LEASES),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_run_a_worker_drives_is_cancelled_through_the_store_and_not_driven_on(
    db_url: str, workdir: Path
) -> None:
    # Both servers leave orphans to workers; B dies mid-run, a worker adopts its run.
    with servers(db_url, workdir, 2, "--no-recover") as ((_pa, a), (pb, b)):
        on_a, on_b = get_sync_client(url=a, api_key=None), get_sync_client(url=b, api_key=None)
        tid = on_b.threads.create()["thread_id"]
        run = on_b.runs.create(tid, "onward", input=chain("a", "b", "c", "d", seconds=1.5))
        wait_until("step a to run", lambda: labels(workdir, "calls.jsonl"))
        pb.kill()
        pb.wait(20)
        with worker(db_url, workdir):
            wait_until(
                "the worker to drive step b", lambda: "b" in labels(workdir, "calls.jsonl"), 90
            )
            on_a.runs.cancel(tid, run["run_id"], wait=True)
            assert on_a.runs.get(tid, run["run_id"])["status"] == "interrupted"
            calls = labels(workdir, "calls.jsonl")
            time.sleep(4.0)  # the worker polls its queue every second: it does not go on
            assert labels(workdir, "calls.jsonl") == calls
            assert "d" not in calls
        values = on_a.runs.wait(tid, "onward", input=None)
        assert done_steps(values) == {"a", "b", "c", "d"}
        assert labels(workdir, "effects.jsonl") == ["a", "b", "c", "d"]


def test_another_users_run_cannot_be_cancelled_or_joined(db_url: str, workdir: Path) -> None:
    tokens = {"ONWARD_API_TOKENS": "tok-ann:ann,tok-bob:bob"}
    with servers(db_url, workdir, 1, **tokens) as ((_p, url),):
        ann = get_sync_client(url=url, api_key=None, headers={"Authorization": "Bearer tok-ann"})
        bob = get_sync_client(url=url, api_key=None, headers={"Authorization": "Bearer tok-bob"})
        tid = ann.threads.create()["thread_id"]
        run = ann.runs.create(tid, "onward", input=chain("a", "b", seconds=1.0))
        rid = run["run_id"]
        for call in (
            lambda: bob.runs.cancel(tid, rid),
            lambda: bob.runs.cancel(tid, rid, action="rollback"),
            lambda: bob.runs.join(tid, rid),
            lambda: list(bob.runs.join_stream(tid, rid, last_event_id="1")),
            lambda: bob.runs.cancel_many(thread_id=tid, run_ids=[rid]),
        ):
            with pytest.raises(httpx.HTTPStatusError) as refused:
                call()
            assert refused.value.response.status_code == 404
        bob.runs.cancel_many(status="all")  # only bob's own runs: none
        with httpx.Client(base_url=url, timeout=30) as http:
            bad = http.get(
                f"/threads/{tid}/runs/{rid}/stream",
                headers={"Authorization": "Bearer tok-ann", "Last-Event-ID": "../../x"},
            )
            assert bad.status_code == 422
        assert done_steps(ann.runs.join(tid, rid)) == {"a", "b"}
        assert ann.runs.get(tid, rid)["status"] == "success"
        # Bob's own stream event ids do not reach into ann's run.
        mine = bob.threads.create()["thread_id"]
        with pytest.raises(httpx.HTTPStatusError) as other:
            list(bob.runs.join_stream(mine, rid))
        assert other.value.response.status_code == 404


# -- the pieces: a kept feed, the store's bounds --------------------------------------


def test_a_kept_feed_shows_readers_only_what_was_kept_and_numbers_on_after_its_start() -> None:
    from onward.serve.feed import Feed

    kept: list[int] = []

    def keep(batch: list[tuple[int, tuple[str, Any]]]) -> None:
        time.sleep(0.01)  # a slow store: the drive does not wait for it
        kept.extend(n for n, _item in batch)

    feed = Feed(start=40, keep=keep)
    got, seen_unkept = fed_and_followed(feed, kept, after=41)
    assert got == list(range(42, 91))
    assert seen_unkept == []
    assert kept == list(range(41, 91))  # every item, in order, numbered after 40
    assert feed.wait_done(5)
    assert feed.items(89) == [(90, ("updates", 49))]


def test_the_store_keeps_a_runs_events_bounded_and_drops_them_after_the_retention(
    ow: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from onward.model.clock import utcnow
    from onward.store import runs

    monkeypatch.setattr(runs, "MAX_RUN_EVENTS", 300)
    threads = ow.store.threads
    threads.create("t1", "ann", {})
    threads.add_run("r1", "t1", "onward", {})
    batch = [(n, "values" if n % 2 else "updates", {"n": n}) for n in range(1, 401)]
    for i in range(0, 400, 7):  # in batches, as a feed's writer keeps them
        threads.add_events("r1", "t1", batch[i : i + 7])
    got = threads.events("r1", 0, limit=1000)
    assert [e.seq for e in got] == list(range(101, 401))  # the newest 300
    whole = [e.seq for e in got if e.data is not None]
    assert [e.seq for e in got if e.event == "updates"] == [n for n in whole if n % 2 == 0]
    assert min(n for n in whole if n % 2) > 400 - runs.KEEP_VALUES - 1  # old values: no data
    assert threads.last_event("r1") == 400
    # Running: kept past the retention. Ended: dropped once the retention passed.
    assert threads.drop_old_events(utcnow() + timedelta(hours=2)) == 0
    threads.set_run_status("r1", runs.ApiRunStatus.SUCCESS)
    assert threads.drop_old_events(utcnow() - timedelta(hours=1)) == 0
    assert threads.drop_old_events(utcnow() + timedelta(seconds=1)) == 300
    assert threads.events("r1") == []


def test_a_stateless_runs_thread_a_killed_server_left_is_deleted_once_the_run_ended(
    db_url: str, workdir: Path
) -> None:
    """A stateless run's thread is deleted by the server that ran it when the run ends; a
    server killed mid-run never does. The restarted server finishes the run (recovery)
    and its sweep deletes the thread; a kept one (``on_completion="keep"``) and the thread
    of a stateless run still running stay."""
    port = free_port()
    proc, url = start_server(db_url, workdir, port=port, **FAST_LEASES)
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            left = http.post(
                "/runs", json={"assistant_id": "onward", "input": chain("gone", seconds=2.0)}
            )
            kept = http.post(
                "/runs",
                json={
                    "assistant_id": "onward",
                    "input": chain("kept", seconds=2.0),
                    "on_completion": "keep",
                },
            )
        assert left.status_code == kept.status_code == 200, (left.text, kept.text)
        left_tid, kept_tid = left.json()["thread_id"], kept.json()["thread_id"]
        wait_until(
            "both runs to start", lambda: {"gone", "kept"} <= set(labels(workdir, "calls.jsonl"))
        )
        proc.kill()  # mid-step: the runs did not end, nobody deletes the thread later
        proc.wait(20)
        proc, url = start_server(db_url, workdir, port=port, **FAST_LEASES)
        client = get_sync_client(url=url, api_key=None)
        with httpx.Client(base_url=url, timeout=60) as http:
            wait_until(
                "the recovered kept run to end",
                lambda: client.runs.list(kept_tid)[0]["status"] == "success",
                timeout=90,
            )
            wait_until(
                "the left thread to be deleted",
                lambda: http.get(f"/threads/{left_tid}").status_code == 404,
                timeout=60,
            )
            assert labels(workdir, "effects.jsonl").count("gone") == 1  # it did finish first
            assert http.get(f"/threads/{kept_tid}").status_code == 200
            assert done_steps(client.threads.get_state(kept_tid)["values"]) == {"kept"}
            # A stateless run in progress: its thread stays through the sweeps.
            running = http.post(
                "/runs", json={"assistant_id": "onward", "input": chain("r1", "r2", seconds=2.0)}
            ).json()
            wait_until("the new run to start", lambda: "r1" in labels(workdir, "calls.jsonl"))
            time.sleep(3.5)  # more than two sweeps (every 1.5 s) while it runs
            assert http.get(f"/threads/{running['thread_id']}").status_code == 200
            assert client.runs.get(running["thread_id"], running["run_id"])["status"] == "running"
            # Its end: the server that ran it deletes it itself.
            wait_until(
                "the finished run's thread to be deleted",
                lambda: http.get(f"/threads/{running['thread_id']}").status_code == 404,
                timeout=60,
            )
            assert http.get(f"/threads/{kept_tid}").status_code == 200
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_events_of_several_runs_go_in_one_statement_each_run_within_its_bounds(
    ow: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onward.store import runs
    from onward.store.connection import PooledDb
    from onward.store.sql import Db

    inserts: list[str] = []
    for db in (Db, PooledDb):
        real = db.execute

        def execute(self: Any, sql: str, params: Any = (), real: Any = real) -> Any:
            if sql.startswith("INSERT INTO onward_api_run_events"):
                inserts.append(sql)
            return real(self, sql, params)

        monkeypatch.setattr(db, "execute", execute)
    monkeypatch.setattr(runs, "KEEP_VALUES", 4)
    threads = ow.store.threads
    for n in (1, 2):
        threads.create(f"t{n}", "ann", {})
        threads.add_run(f"r{n}", f"t{n}", "onward", {})
    long = [(n, "values", {"n": n}) for n in range(1, 11)]
    short = [(n, "values", {"n": n}) for n in range(1, 4)]
    threads.add_runs_events([("r1", "t1", long), ("r2", "t2", short)])
    assert len(inserts) == 1
    first = threads.events("r1", 0)
    assert [e.seq for e in first] == list(range(1, 11))
    assert [e.seq for e in first if e.data is not None] == list(range(6, 11))  # the newest
    assert [e.data for e in threads.events("r2", 0)] == [{"n": 1}, {"n": 2}, {"n": 3}]
