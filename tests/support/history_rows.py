"""Helpers shared by several test modules, moved out of tests/store/test_history_rows.py:
thread_of."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from tests.support.serve_long import noop_chain


def thread_of(client: TestClient, steps: int) -> str:
    thread_id: str = client.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "onward", "input": noop_chain(steps)}
    answer = client.post(f"/threads/{thread_id}/runs/wait", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "done"
    settled(client)
    return thread_id


def settled(client: TestClient, timeout: float = 10.0) -> None:
    """Wait until the server's run pool is idle: ``runs/wait`` answers when the run is
    done, and the pool thread then still looks for a queued run on the thread (two
    statements on the same connection a test may be counting)."""
    pool = client.app.state.serving.pool  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while pool.in_flight():
        assert time.monotonic() < deadline, "the server's run pool never went idle"
        time.sleep(0.01)
