"""What a served run holds is released when it ends (issue 39: memory that levels off).

The server keeps, per run, a feed (the newest :data:`~onward.serve.control.KEEP_FEEDS`
of finished runs stay, for joins), an entry while it is in hand, a lock per thread
while a request decides about it, and a writer thread that keeps the feed's items in
the store. Runs on more threads than the feeds kept leave only the newest feeds: no
run in hand, no thread lock, no writer thread, whatever the number of runs. Both
backends.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from onward.checkpointing import values as kept_values
from onward.serve import control
from onward.serve.app import create_app
from onward.serve.encoded import kept_by
from tests.support.history_rows import settled
from tests.support.serve_long import noop_chain

KEPT = 3


def writers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "onward-feed"]


@pytest.mark.parametrize("stream", [False, True])
def test_runs_on_many_threads_leave_only_the_newest_feeds_and_no_lock_or_writer(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    monkeypatch.setattr(control, "KEEP_FEEDS", KEPT)
    app = create_app(db_url, workdir=tmp_path, model=None, recover=False)
    body = {"assistant_id": "onward", "input": noop_chain(3), "stream_mode": ["values"]}
    tail = "stream" if stream else "wait"
    with TestClient(app) as client:
        for _ in range(KEPT + 4):
            thread_id = client.post("/threads", json={}).json()["thread_id"]
            answer = client.post(f"/threads/{thread_id}/runs/{tail}", json=body)
            assert answer.status_code == 200, answer.text
        settled(client)
        held = app.state.serving.control.sizes()
        for thread in writers():  # a writer ends once its feed's end is kept
            thread.join(10)
        assert held == {"active": 0, "feeds": KEPT, "thread_locks": 0}
        assert writers() == []


def test_a_streamed_runs_last_states_are_kept_as_json_for_the_threads_that_streamed_last(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run streams one values event per superstep. A chat UI reads the thread as the run
    ends (its state, or a history page of what it just streamed), so the JSON of a
    thread's last supersteps is kept for that read; only for the threads that streamed
    last (a store once kept every streamed superstep's: about 30 kB per 3-step run, up to
    32 MB per store, most never read again)."""
    monkeypatch.setattr(kept_values, "STREAMING", 1)
    app = create_app(db_url, workdir=tmp_path, model=None, recover=False)
    body = {"assistant_id": "onward", "input": noop_chain(3), "stream_mode": ["values"]}
    with TestClient(app) as client:
        clients = app.state.serving.clients

        def streamed_run() -> tuple[str, str, str]:
            thread_id = client.post("/threads", json={}).json()["thread_id"]
            streamed = client.post(f"/threads/{thread_id}/runs/stream", json=body)
            assert streamed.status_code == 200
            assert streamed.text.count("event: values") >= 3
            settled(client)
            with clients.use() as ow:
                last = ow.store.saver.get_tuple({"configurable": {"thread_id": thread_id}})
            return thread_id, "", last.config["configurable"]["checkpoint_id"]

        def kept_json(key: tuple[str, str, str]) -> list[bool]:
            stores = [kept_by(ow.store.saver) for ow in clients.made()]
            return [s.text(key, read=False) is not None for s in stores if s is not None]

        first = streamed_run()
        assert kept_json(first)  # the store keeps JSON at all
        assert any(kept_json(first))
        second = streamed_run()  # one thread's streamed states kept (STREAMING): its own
        assert any(kept_json(second))
        assert not any(kept_json(first))
        state = client.get(f"/threads/{first[0]}/state").json()
        assert state["checkpoint"]["checkpoint_id"] == first[2]
        assert state["values"]["status"] == "done"
        assert any(kept_json(first))  # a read keeps what it made
