"""``onward serve`` against LangChain's own clients: the unmodified ``langgraph_sdk`` and
``RemoteGraph`` drive onward runs over HTTP, on both store backends; tokens keep
users apart.

The servers here and in the files that use :func:`serve` are forked from the pre-imported
zygote (``tests/support/zygote.py``): they are about what the server does, not how the interpreter
starts. ``real=True`` starts ``python -m onward serve`` (the CORS test on SQLite;
tests/cli/test_bad_input.py's taken port starts it for real too)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.pregel.remote import RemoteGraph
from langgraph.types import Command
from langgraph_sdk import get_sync_client

from tests.support.paths import ROOT
from tests.support.serve import HITL_TOOLS, PAY_PLAN, payments, serve


def test_sdk_streams_to_an_approval_resumes_reads_history_and_forks(
    server: str, workdir: Path
) -> None:
    client = get_sync_client(url=server, api_key=None)
    assert [a["graph_id"] for a in client.assistants.search()] == ["onward"]
    thread = client.threads.create(metadata={"purpose": "test"})
    tid = thread["thread_id"]

    parts = list(
        client.runs.stream(
            tid,
            "onward",
            input={"goal": "pay bo", "plan": PAY_PLAN},
            stream_mode=["values", "updates", "custom", "messages-tuple"],
        )
    )
    events = [p.event for p in parts]
    assert events[0] == "metadata"
    assert "error" not in events
    assert "custom" in events
    assert "updates" in events
    last_values = [p.data for p in parts if p.event == "values"][-1]
    (interrupt,) = last_values["__interrupt__"]
    request = interrupt["value"]
    assert request["action_requests"][0]["name"] == "pay"
    assert request["action_requests"][0]["args"] == {"amount": 5, "to": "bo"}
    assert request["review_configs"][0]["allowed_decisions"][:1] == ["approve"]
    assert payments(workdir) == []

    state = client.threads.get_state(tid)
    assert state["tasks"][-1]["interrupts"][0]["id"] == interrupt["id"]
    listed = client.threads.search(metadata={"graph_id": "onward"})
    assert tid in [t["thread_id"] for t in listed]
    assert client.threads.get(tid)["status"] == "interrupted"

    # Resume with a decision (the HITL batched shape).
    resumed = list(
        client.runs.stream(
            tid,
            "onward",
            command={"resume": {"decisions": [{"type": "approve"}]}},
            stream_mode="values",
        )
    )
    final = [p.data for p in resumed if p.event == "values"][-1]
    assert final["status"] == "done"
    assert [p["amount"] for p in payments(workdir)] == [5]
    assert client.threads.get(tid)["status"] == "idle"

    state = client.threads.get_state(tid)
    assert state["values"]["status"] == "done"
    history = client.threads.get_history(tid, limit=100)
    assert len(history) > 3
    assert history[0]["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    runs = client.runs.list(tid)
    assert len(runs) == 2
    # The run that stopped at the question ended well too (as on LangGraph Server).
    assert [r["status"] for r in runs] == ["success", "success"]

    # Fork: from the checkpoint before the payment ran, edit the state on a new branch of
    # the same thread and run it from there. The payment step runs again; the ledger
    # returns its recorded result instead of paying twice.
    before_after = [h for h in history if h["next"] == ["execute"]][-1]
    steps = before_after["values"]["plan"]["steps"]
    edited = [{**s, "args": {"value": 3}} if s["id"] == "after" else s for s in steps]
    branch = client.threads.update_state(
        tid,
        {"plan": {"steps": edited}},
        checkpoint_id=before_after["checkpoint"]["checkpoint_id"],
    )
    assert branch["checkpoint"]["checkpoint_id"] != state["checkpoint"]["checkpoint_id"]
    past = client.threads.get_state(tid, checkpoint_id=before_after["checkpoint"]["checkpoint_id"])
    assert past["checkpoint"]["checkpoint_id"] == before_after["checkpoint"]["checkpoint_id"]
    client.runs.wait(tid, "onward", input=None, checkpoint_id=branch["checkpoint"]["checkpoint_id"])
    forked = client.threads.get_state(tid)["values"]
    assert forked["status"] == "done"
    assert forked["plan"]["version"] == 2
    assert forked["steps"]["after"]["status"] == "done"
    assert json.loads(forked["steps"]["after"]["output"]["body"]) == {"value": 3}  # edited
    assert [p["amount"] for p in payments(workdir)] == [5]  # the ledger: paid once


def test_remote_graph_invokes_and_resumes(server: str, workdir: Path) -> None:
    remote = RemoteGraph("onward", url=server)
    config: Any = {"configurable": {"thread_id": "8a3a8d0e-3b50-4b2b-9d1c-5d4d0a2a9f10"}}
    out = remote.invoke({"goal": "pay bo", "plan": PAY_PLAN}, config)
    assert out["__interrupt__"][0]["value"]["action_requests"][0]["name"] == "pay"
    snapshot = remote.get_state(config)
    assert snapshot.next
    done = remote.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert done["status"] == "done"
    assert len(payments(workdir)) == 1
    assert len(list(remote.get_state_history(config))) > 3


def test_tokens_keep_threads_private(db_url: str, workdir: Path) -> None:
    env = {"ONWARD_API_TOKENS": "tok-alice:alice,tok-bob:bob"}
    with serve(db_url, workdir, **env) as url:
        assert httpx.post(f"{url}/threads", json={}).status_code == 401
        wrong = httpx.post(f"{url}/threads", json={}, headers={"x-api-key": "nope"})
        assert wrong.status_code == 401
        alice = get_sync_client(url=url, api_key="tok-alice")
        bob = get_sync_client(url=url, headers={"Authorization": "Bearer tok-bob"}, api_key=None)
        tid = alice.threads.create()["thread_id"]
        alice.runs.wait(tid, "onward", input={"goal": "pay", "plan": PAY_PLAN})
        assert alice.threads.get(tid)["status"] == "interrupted"
        attempts = [
            lambda: bob.threads.get(tid),
            lambda: bob.threads.get_state(tid),
            lambda: bob.runs.wait(tid, "onward", command={"resume": {"decisions": []}}),
        ]
        for call in attempts:
            with pytest.raises(httpx.HTTPStatusError) as caught:
                call()
            assert caught.value.response.status_code == 404
        assert tid not in [t["thread_id"] for t in bob.threads.search()]
        assert tid in [t["thread_id"] for t in alice.threads.search()]
        assert payments(workdir) == []


def test_a_token_is_taken_from_either_header_in_the_forms_clients_send(
    db_url: str, workdir: Path
) -> None:
    """``Authorization: Bearer`` in any case and with spaces before the token, or
    ``x-api-key``; a near miss in either is a 401, and the OpenAPI document names both
    ways as its security schemes."""
    env = {"ONWARD_API_TOKENS": "tok-alice:alice"}
    with serve(db_url, workdir, **env) as url:
        accepted = [
            {"Authorization": "Bearer tok-alice"},
            {"Authorization": "bearer tok-alice"},
            {"Authorization": "BEARER  tok-alice"},
            {"x-api-key": "tok-alice"},
            {"Authorization": "Basic dG9rLWFsaWNl", "x-api-key": "tok-alice"},
            {"Authorization": "Bearer tok-alice", "x-api-key": "nope"},
        ]
        for headers in accepted:
            assert httpx.post(f"{url}/threads", json={}, headers=headers).status_code == 200
        refused = [
            {"Authorization": "tok-alice"},
            {"Authorization": "Bearertok-alice"},
            {"Authorization": "Token tok-alice"},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer tok-alic"},
            {"x-api-key": "tok-alice-"},
            {"x-api-key": ""},
        ]
        for headers in refused:
            answer = httpx.post(f"{url}/threads", json={}, headers=headers)
            assert answer.status_code == 401, headers
            assert "Authorization: Bearer TOKEN" in answer.json()["detail"]
        document = httpx.get(f"{url}/openapi.json", headers=accepted[0]).json()
        schemes = document["components"]["securitySchemes"]
        assert {s["type"] for s in schemes.values()} == {"http", "apiKey"}


def test_web_page_starts_a_run_and_approves_it_in_a_real_browser(
    server: str, workdir: Path
) -> None:
    """Headless Chromium (Debian's, driven by Playwright) uses the page served at /."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is needed (.ci/run installs Debian's chromium)"
    shots = Path(os.environ.get("ONWARD_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(server + "/")
        page.fill("#goal", "pay bo")
        page.fill("#plan", json.dumps(PAY_PLAN))
        page.click("#start-button")
        approve = page.locator(".question button.approve")
        approve.wait_for(timeout=30_000)
        assert page.locator(".question pre").inner_text().count('"amount": 5') == 1
        page.screenshot(path=str(shots / "web-waiting-for-approval.png"), full_page=True)
        assert payments(workdir) == []
        approve.click()
        try:
            page.wait_for_function(
                "document.getElementById('run-status')?.textContent === 'done'", timeout=30_000
            )
        except Exception:  # say what the page and the server saw (a clean-clone CI flake)
            thread_id = page.locator("code").first.inner_text()
            seen = httpx.get(f"{server}/onward/runs/{thread_id}").json()
            api_runs = httpx.get(f"{server}/threads/{thread_id}/runs").json()
            raise AssertionError(
                f"page error {page.locator('#error').inner_text()!r}; status "
                f"{page.locator('#run-status').inner_text()!r}; server: {seen['view']['status']}"
                f", API runs {[r['status'] for r in api_runs]}, pending {seen['pending']}, "
                f"timeline {seen['timeline'][-6:]}"
            ) from None
        page.locator("td[data-status='done']").first.wait_for(timeout=10_000)
        page.screenshot(path=str(shots / "web-done.png"), full_page=True)
        browser.close()
    assert [p["amount"] for p in payments(workdir)] == [5]
    assert (shots / "web-done.png").stat().st_size > 5_000


def test_resume_needs_a_token_when_onward_secret_is_set(db_url: str, workdir: Path) -> None:
    env = {"ONWARD_API_TOKENS": "tok-alice:alice", "ONWARD_SECRET": "s3cret"}
    with serve(db_url, workdir, **env) as url:
        headers = {"Authorization": "Bearer tok-alice"}
        tid = httpx.post(f"{url}/threads", json={}, headers=headers).json()["thread_id"]
        body = {"assistant_id": "onward", "input": {"goal": "pay", "plan": PAY_PLAN}}
        httpx.post(f"{url}/threads/{tid}/runs/wait", json=body, headers=headers, timeout=60)
        approve = {"decisions": [{"type": "approve"}]}
        refused = httpx.post(
            f"{url}/threads/{tid}/runs/wait",
            json={"assistant_id": "onward", "command": {"resume": approve}},
            headers=headers,
            timeout=60,
        )
        assert refused.status_code == 403
        assert "token" in refused.json()["detail"]
        assert payments(workdir) == []
        (pending,) = httpx.get(f"{url}/onward/runs/{tid}", headers=headers).json()["pending"]
        resume = {pending["interrupt_id"]: {**approve, "token": pending["token"]}}
        done = httpx.post(
            f"{url}/threads/{tid}/runs/wait",
            json={"assistant_id": "onward", "command": {"resume": resume}},
            headers=headers,
            timeout=60,
        )
        assert done.json()["status"] == "done"
        assert [p["amount"] for p in payments(workdir)] == [5]


def test_api_runs_stay_inside_the_work_directory(server: str, workdir: Path) -> None:
    """Plans sent over HTTP cannot read or write outside the server's work directory,
    nor approve in advance; such requests fail clearly and nothing outside is touched."""
    outside = workdir.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET")
    client = get_sync_client(url=server, api_key=None)
    for step in (
        {"id": "w", "tool": "write_file", "args": {"path": str(outside / "x.txt"), "content": "1"}},
        {"id": "w", "tool": "write_file", "args": {"path": "../outside/y.txt", "content": "1"}},
        {"id": "r", "tool": "read_file", "args": {"path": str(outside / "secret.txt")}},
    ):
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "onward", input={"goal": "escape", "plan": {"steps": [step]}})
        state = client.threads.get_state(tid)
        record = state["values"]["steps"][step["id"]]
        assert record["status"] != "done"
        assert "leaves the run's work directory" in json.dumps(record)
        view = httpx.get(f"{server}/onward/runs/{tid}").json()
        assert "TOP-SECRET" not in json.dumps(view)
        assert "TOP-SECRET" not in json.dumps(state)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]

    def start(run_input: dict[str, Any]) -> httpx.Response:
        tid = client.threads.create()["thread_id"]
        body = {"assistant_id": "onward", "input": run_input}
        return httpx.post(f"{server}/threads/{tid}/runs/wait", json=body, timeout=30)

    refused = start({"goal": "pay", "plan": PAY_PLAN, "policy": {"auto_approve": ["pay"]}})
    assert refused.status_code == 403
    assert "auto_approve" in refused.json()["detail"]
    escaping = start({"goal": "x", "plan": PAY_PLAN, "inputs": ["../outside/secret.txt"]})
    assert escaping.status_code == 422
    assert payments(workdir) == []


def test_malformed_requests_get_4xx_with_a_reason(server: str) -> None:
    tid = httpx.post(f"{server}/threads", json={}).json()["thread_id"]
    cases = [
        ("post", "/threads/search", {"limit": "abc"}),
        ("post", "/threads", {"metadata": "x"}),
        ("post", "/assistants/search", {"limit": "x"}),
        ("post", f"/threads/{tid}/runs/wait", {"input": {"goal": 5}}),
        (
            "post",
            f"/threads/{tid}/runs/wait",
            {"input": {"plan": PAY_PLAN, "budget": {"max_steps": "lots"}}},
        ),
        (
            "post",
            f"/threads/{tid}/runs/wait",
            {"input": {"plan": PAY_PLAN, "policy": {"bogus": 1}}},
        ),
        ("post", f"/threads/{tid}/runs/stream", {"input": {"plan": PAY_PLAN}, "stream_mode": 5}),
        ("post", f"/threads/{tid}/runs/wait", {"command": "approve"}),
        ("post", f"/threads/{tid}/history", {"limit": "x"}),
    ]
    for method, path, body in cases:
        res = httpx.request(method, server + path, json=body, timeout=30)
        assert 400 <= res.status_code < 500, (path, body, res.status_code, res.text)
        assert res.json()["detail"], (path, body)
    assert httpx.get(f"{server}/threads/{tid}/state/not-a-checkpoint").status_code in (404, 422)
    unknown = httpx.post(
        f"{server}/threads/not-a-uuid/runs/wait", json={"if_not_exists": "create", "input": {}}
    )
    assert unknown.status_code == 422


def test_cors_is_off_unless_an_origin_is_allowed(db_url: str, workdir: Path) -> None:
    preflight = {
        "Origin": "https://evil.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    # This file's real `python -m onward serve` (once: on PostgreSQL it forks).
    with serve(db_url, workdir, real=db_url.startswith("sqlite")) as url:
        res = httpx.options(f"{url}/threads", headers=preflight)
        assert "access-control-allow-origin" not in res.headers
        res = httpx.post(f"{url}/threads", json={}, headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in res.headers
    with serve(db_url, workdir, "--cors-origin", "http://localhost:3000") as url:
        ok = httpx.options(
            f"{url}/threads", headers={**preflight, "Origin": "http://localhost:3000"}
        )
        assert ok.headers["access-control-allow-origin"] == "http://localhost:3000"
        evil = httpx.options(f"{url}/threads", headers=preflight)
        assert evil.headers.get("access-control-allow-origin") != "https://evil.example"


def test_a_token_holder_cannot_claim_a_run_started_elsewhere(
    db_url: str, workdir: Path, run_cli: Any
) -> None:
    (workdir / "plan.yaml").write_text(json.dumps({"goal": "pay", **PAY_PLAN}))
    started = run_cli("run", "--plan", "plan.yaml", "--tools", HITL_TOOLS, "--json")
    cli_tid = started.json()["thread_id"]
    env = {"ONWARD_API_TOKENS": "tok-alice:alice,tok-bob:bob"}
    with serve(db_url, workdir, **env) as url:
        bob = {"Authorization": "Bearer tok-bob"}
        alice = {"Authorization": "Bearer tok-alice"}
        assert (
            httpx.post(f"{url}/threads", json={"thread_id": cli_tid}, headers=bob).status_code
            == 404
        )
        assert httpx.get(f"{url}/threads/{cli_tid}", headers=bob).status_code == 404
        mine = httpx.post(f"{url}/threads", json={}, headers=alice).json()["thread_id"]
        taken = httpx.post(f"{url}/threads", json={"thread_id": mine}, headers=bob)
        assert taken.status_code == 404  # not 409: bob must not learn that it exists
    assert payments(workdir) == []
