"""Bounds a token holder cannot get past: request size, runs in flight per user, the API's
schema behind the token; and one user's long runs never hold up another user's short one."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from onward.store.database import Store
from tests.support.security import ATTACKER, TOKENS, VICTIM, auth
from tests.support.serve import serve


def long_plan(seconds: float) -> dict[str, Any]:
    return {"steps": [{"id": "s", "tool": "slow", "args": {"seconds": seconds, "value": 1}}]}


def test_a_body_over_the_limit_is_413_and_nothing_is_stored(api: httpx.Client) -> None:
    threads = api.post("/threads/search", json={"limit": 100}).json()
    tid = api.post("/threads", json={}).json()["thread_id"]
    huge = {"assistant_id": "onward", "input": {"goal": "x" * (5 * 1024 * 1024)}}
    res = api.post(f"/threads/{tid}/runs/wait", json=huge)
    assert res.status_code == 413
    assert "limit of 4194304 bytes" in res.json()["detail"]
    # Without a Content-Length (chunked), the limit holds while the body streams in.
    chunks = (b"x" * 65536 for _ in range(100))
    res = api.post(
        "/threads", content=chunks, headers={"content-type": "application/json", **auth()}
    )
    assert res.status_code == 413
    assert api.get(f"/threads/{tid}/state").json()["values"] == {}
    after = api.post("/threads/search", json={"limit": 100}).json()
    assert len(after) == len(threads) + 1  # only the thread made before the big request


def test_docs_and_schema_need_a_token(api: httpx.Client) -> None:
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert httpx.get(f"{api.base_url}{path}").status_code in (401, 404), path
    schema = api.get("/openapi.json")
    assert schema.status_code == 200
    assert "/threads/{thread_id}/runs/wait" in schema.json()["paths"]
    assert httpx.get(f"{api.base_url}/openapi.json").status_code == 401


def test_one_users_long_runs_do_not_hold_up_another_users_short_run(
    db_url: str, workdir: Path
) -> None:
    """Two runs per user on three slots: mallory's third run is refused with Retry-After,
    and alice's short run finishes while mallory's long runs are still going."""
    with (
        serve(
            db_url, workdir, "--run-slots", "3", "--user-runs", "2", ONWARD_API_TOKENS=TOKENS
        ) as url,
        httpx.Client(base_url=url, headers=auth(ATTACKER), timeout=60) as mallory,
        httpx.Client(base_url=url, headers=auth(VICTIM), timeout=60) as alice,
    ):
        long_threads = []
        for _ in range(2):
            tid = mallory.post("/threads", json={}).json()["thread_id"]
            body = {"assistant_id": "onward", "input": {"goal": "wait", "plan": long_plan(8)}}
            assert mallory.post(f"/threads/{tid}/runs", json=body).status_code == 200
            long_threads.append(tid)
        tid = mallory.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "onward", "input": {"goal": "more", "plan": long_plan(8)}}
        refused = mallory.post(f"/threads/{tid}/runs/wait", json=body)
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) > 0
        assert mallory.get(f"/threads/{tid}/state").json()["values"] == {}

        short = alice.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "onward", "input": {"goal": "quick", "plan": long_plan(0)}}
        done = alice.post(f"/threads/{short}/runs/wait", json=body)
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "done"
        # Ordering, not a time limit: mallory's runs are still in flight.
        for tid in long_threads:
            assert mallory.get(f"/threads/{tid}").json()["status"] == "busy"
            (run,) = mallory.get(f"/threads/{tid}/runs").json()
            assert run["status"] == "running"


def test_a_user_spreading_runs_over_server_processes_gets_at_most_each_ones_cap(
    db_url: str, workdir: Path
) -> None:
    """``--processes 2 --user-runs 1``: mallory opens a new connection per request (the
    kernel spreads connections over the processes) and asks for eight long runs at once;
    at most one per process is accepted, the rest are 429 with nothing stored for them."""
    args = ("--processes", "2", "--run-slots", "1", "--user-runs", "1")
    with (
        serve(db_url, workdir, *args, real=True, ONWARD_API_TOKENS=TOKENS) as url,
        httpx.Client(base_url=url, headers=auth(ATTACKER), timeout=60) as mallory,
    ):
        threads = [mallory.post("/threads", json={}).json()["thread_id"] for _ in range(8)]
        body = {"assistant_id": "onward", "input": {"goal": "wait", "plan": long_plan(8)}}

        def ask(tid: str) -> int:
            with httpx.Client(base_url=url, headers=auth(ATTACKER), timeout=60) as own:
                return own.post(f"/threads/{tid}/runs", json=body).status_code

        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(ask, threads))
        accepted = [tid for tid, code in zip(threads, codes, strict=True) if code == 200]
        assert set(codes) == {200, 429}, codes
        assert 1 <= len(accepted) <= 2, codes
        for tid, code in zip(threads, codes, strict=True):
            runs = mallory.get(f"/threads/{tid}/runs").json()
            assert len(runs) == (code == 200), (tid, code, runs)


def test_runs_sent_to_another_users_thread_are_404_and_leave_its_lock_free(
    db_url: str, workdir: Path
) -> None:
    """Mallory sends runs, eight at a time with each multitask strategy, to alice's thread
    (each request takes the thread's lock in the store while it decides): every one is a
    404, nothing is stored on the thread, no lock is left held, and alice's run then
    starts and finishes as if mallory had sent nothing."""
    with (
        serve(db_url, workdir, ONWARD_API_TOKENS=TOKENS) as url,
        httpx.Client(base_url=url, headers=auth(VICTIM), timeout=60) as alice,
    ):
        tid = alice.post("/threads", json={}).json()["thread_id"]
        body: dict[str, Any] = {"assistant_id": "onward", "input": {"plan": long_plan(0)}}

        def ask(strategy: str) -> int:
            with httpx.Client(base_url=url, headers=auth(ATTACKER), timeout=60) as own:
                sent = {**body, "multitask_strategy": strategy}
                return own.post(f"/threads/{tid}/runs", json=sent).status_code

        with ThreadPoolExecutor(8) as pool:
            for strategy in ("enqueue", "reject", "interrupt", "rollback"):
                assert set(pool.map(ask, [strategy] * 8)) == {404}, strategy
        assert alice.get(f"/threads/{tid}/runs").json() == []
        if db_url.startswith("postgresql"):
            with Store(db_url) as store, store.db.use() as db:
                assert db.execute("SELECT COUNT(*) FROM onward_thread_locks").fetchone()[0] == 0
        done = alice.post(f"/threads/{tid}/runs/wait", json=body)
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "done"
