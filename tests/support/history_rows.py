"""Helpers shared by several test modules, moved out of tests/store/test_history_rows.py:
thread_of."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support.serve_long import noop_chain


def thread_of(client: TestClient, steps: int) -> str:
    thread_id: str = client.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "onward", "input": noop_chain(steps)}
    answer = client.post(f"/threads/{thread_id}/runs/wait", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "done"
    return thread_id
