"""A run queued behind a run that another server process drives (issue 39).

The process that queued it looks every :data:`~onward.serve.drives.ELSEWHERE_POLL`
seconds whether the thread is free. While the other process holds the thread's lease,
those looks are reads only: they do not take the thread's lock in the store (on Postgres
an upsert and a delete each, four times a second for as long as the other run lasts).
Once the lease is let go, the queued run starts and finishes. Both backends; the other
process is a lease held under another driver id, through a store of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from onward.serve.app import create_app
from onward.serve.drives import ELSEWHERE_POLL
from onward.store.database import Store
from tests.support.history_rows import settled
from tests.support.serve_api import wait_until
from tests.support.serve_long import noop_chain

OTHER = "elsewhere:1:0:abcd1234"
"""The lease owner of a run driven by another process (a host and pid not this one's)."""


def test_a_run_queued_behind_another_process_waits_without_taking_the_thread_lock(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(db_url, workdir=tmp_path, model=None, recover=False)
    body = {"assistant_id": "onward", "input": noop_chain(2)}
    with TestClient(app) as client, Store(db_url) as elsewhere:
        thread_id = client.post("/threads", json={}).json()["thread_id"]
        first = client.post(f"/threads/{thread_id}/runs/wait", json=body)
        assert first.status_code == 200, first.text
        settled(client)
        serving = app.state.serving
        store = serving.clients.shared("locks").store
        elsewhere.leases.acquire(thread_id, OTHER)
        takes: list[str] = []
        real = store.thread_locks

        @contextmanager
        def counted(tid: str) -> Iterator[Any]:
            takes.append(tid)
            with real(tid) as held:
                yield held

        monkeypatch.setattr(store, "thread_locks", counted)
        message = {"messages": [{"type": "human", "content": "and then?"}]}
        queued = client.post(
            f"/threads/{thread_id}/runs", json={"assistant_id": "onward", "input": message}
        )
        assert queued.status_code == 200, queued.text
        run_id = queued.json()["run_id"]
        assert queued.json()["status"] == "pending"
        taken_to_queue = len(takes)  # the decision to queue it: once
        time.sleep(ELSEWHERE_POLL * 5)
        assert len(takes) == taken_to_queue, "the waiter took the store's lock while busy"
        assert client.get(f"/threads/{thread_id}/runs/{run_id}").json()["status"] == "pending"

        elsewhere.leases.release(thread_id, OTHER)
        wait_until(
            "the queued run to finish",
            lambda: client.get(f"/threads/{thread_id}/runs/{run_id}").json()["status"] == "success",
        )
        assert len(takes) > taken_to_queue  # the start decided under the lock
