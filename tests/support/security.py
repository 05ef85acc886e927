"""Helpers shared by several test modules, moved out of tests/server/security/conftest.py:
ATTACKER, TOKENS, VICTIM, auth, start."""

from __future__ import annotations

import httpx

ATTACKER = "tok-mallory"
VICTIM = "tok-alice"
TOKENS = f"{ATTACKER}:mallory,{VICTIM}:alice"


def auth(token: str = ATTACKER) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def start(client: httpx.Client, run_input: dict[str, object]) -> tuple[str, httpx.Response]:
    """A new thread and a waited run on it: (thread id, the response)."""
    tid = client.post("/threads", json={}).json()["thread_id"]
    res = client.post(
        f"/threads/{tid}/runs/wait", json={"assistant_id": "onward", "input": run_input}
    )
    return tid, res
