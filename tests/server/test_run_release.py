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

from onward.serve import control
from onward.serve.app import create_app
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
