"""A server killed with SIGKILL mid-run: the restarted server finishes the run, its API
record agrees with the checkpoint, and every effect happened once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.conftest import cli_env, onward_cmd, read_jsonl
from tests.security.conftest import TOKENS, auth
from tests.test_serve import HITL_TOOLS, free_port

PLAN = {
    "steps": [
        {"id": "a", "tool": "record", "args": {"label": "a"}},
        {"id": "b", "tool": "slow", "args": {"seconds": 4}, "depends_on": ["a"]},
        {"id": "c", "tool": "record", "args": {"label": "c"}, "depends_on": ["b"]},
    ]
}
ENV = {"ONWARD_API_TOKENS": TOKENS, "ONWARD_LEASE_TTL": "2", "ONWARD_HEARTBEAT": "0.5"}


def start_server(db_url: str, workdir: Path, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        onward_cmd("serve", "--db", db_url, "--port", str(port), "--tools", HITL_TOOLS),
        cwd=workdir,
        env=cli_env(**ENV),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ok", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            assert proc.poll() is None, "the server died at start"
            time.sleep(0.1)
    raise AssertionError("the server did not start")


def wait_for(what: str, check: object, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.crash
def test_a_run_cut_off_by_a_server_crash_is_finished_by_the_restarted_server(
    db_url: str, workdir: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(db_url, workdir, port)
    try:
        with httpx.Client(base_url=url, headers=auth(), timeout=30) as api:
            tid = api.post("/threads", json={}).json()["thread_id"]
            body = {"assistant_id": "onward", "input": {"goal": "record", "plan": PLAN}}
            assert api.post(f"/threads/{tid}/runs", json=body).status_code == 200
            wait_for("step a's effect", lambda: read_jsonl(workdir / "effects.jsonl"), 60)
            time.sleep(0.5)  # step b is sleeping now
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)
        assert [r["label"] for r in read_jsonl(workdir / "effects.jsonl")] == ["a"]

        server = start_server(db_url, workdir, port)
        with httpx.Client(base_url=url, headers=auth(), timeout=30) as api:

            def finished() -> bool:
                (run,) = api.get(f"/threads/{tid}/runs").json()
                return bool(run["status"] == "success")

            wait_for("the recovered run", finished)
            state = api.get(f"/threads/{tid}/state").json()
            assert state["values"]["status"] == "done"
            assert {s: r["status"] for s, r in state["values"]["steps"].items()} == {
                "a": "done",
                "b": "done",
                "c": "done",
            }
            assert api.get(f"/threads/{tid}").json()["status"] == "idle"
    finally:
        server.kill()
        server.wait(10)
    effects = Counter(r["label"] for r in read_jsonl(workdir / "effects.jsonl"))
    assert effects == {"a": 1, "c": 1}
    calls = Counter(r["label"] for r in read_jsonl(workdir / "calls.jsonl"))
    assert calls["a"] == 1  # finished before the kill: never called again
