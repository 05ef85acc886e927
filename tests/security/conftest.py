"""Attacks on a real ``onward serve`` over loopback: each test is a request an attacker with
a valid token could send, and asserts both the refusal and that nothing changed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.test_serve import serve

ATTACKER = "tok-mallory"
VICTIM = "tok-alice"
TOKENS = f"{ATTACKER}:mallory,{VICTIM}:alice"


def auth(token: str = ATTACKER) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def outside(workdir: Path) -> Path:
    """A directory beside the server's work directory holding a secret."""
    out = workdir.parent / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("TOP-SECRET-42")
    (out / "secret.json").write_text('{"password": "TOP-SECRET-42"}')
    (out / "orders.csv").write_text("TOP-SECRET-42,amount\nx,1\n")
    return out


@pytest.fixture
def api(db_url: str, workdir: Path) -> Iterator[httpx.Client]:
    """A real ``onward serve`` with tokens (the test-suite's HITL tools loaded), and an
    HTTP client that holds the attacker's token."""
    with (
        serve(db_url, workdir, ONWARD_API_TOKENS=TOKENS) as url,
        httpx.Client(base_url=url, headers=auth(), timeout=60) as client,
    ):
        yield client


def start(client: httpx.Client, run_input: dict[str, object]) -> tuple[str, httpx.Response]:
    """A new thread and a waited run on it: (thread id, the response)."""
    tid = client.post("/threads", json={}).json()["thread_id"]
    res = client.post(
        f"/threads/{tid}/runs/wait", json={"assistant_id": "onward", "input": run_input}
    )
    return tid, res
