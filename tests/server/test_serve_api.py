"""The LangGraph Server API beyond one run at a time, through the unmodified Python
``langgraph_sdk`` against a real ``onward serve`` (both store backends): assistants from
the server's configuration, cancel that stops effects, multitask strategies, joins and
resumed streams, and a clear 4xx for what onward does not do."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

import tests.support.serve_api
from tests.support.hitl_tools import rows
from tests.support.serve import serve
from tests.support.serve_api import chain, done_steps, wait_until

server = tests.support.serve_api.server  # a fixture, shared through tests/support


def test_assistants_come_from_the_config_are_versioned_and_pick_the_run_policy(
    server: str, workdir: Path
) -> None:
    client = get_sync_client(url=server, api_key=None)
    found = {a["name"]: a for a in client.assistants.search()}
    assert set(found) == {"onward", "careful"}
    careful = found["careful"]
    assert careful["context"]["policy"]["approve_all"] is True
    assert careful["context"]["budget"]["max_steps"] == 10
    assert client.assistants.get("careful")["assistant_id"] == careful["assistant_id"]
    assert client.assistants.count() == 2
    schemas = client.assistants.get_schemas(careful["assistant_id"])
    assert schemas["graph_id"] == "onward"
    assert schemas["input_schema"]
    assert client.assistants.get_subgraphs("careful") == {}
    assert {n["id"] for n in client.assistants.get_graph("careful")["nodes"]} >= {"execute"}

    # The same plan of an effect that needs no approval: the careful assistant asks.
    # A run that stops at a question ends "success" (as on LangGraph Server); its thread
    # is "interrupted".
    for name, expect in (("onward", "idle"), ("careful", "interrupted")):
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, name, input=chain(f"by-{name}"))
        (run,) = client.runs.list(tid)
        assert (run["status"], run["assistant_id"]) == ("success", found[name]["assistant_id"])
        assert client.threads.get(tid)["status"] == expect
    assert [r["label"] for r in rows(workdir, "effects.jsonl")] == ["by-onward"]

    # A user's assistant: stricter than the default, versioned, latest settable.
    mine = client.assistants.create(
        "onward", context={"policy": {"approve_tools": ["record"]}}, name="mine"
    )
    assert mine["version"] == 1
    assert mine["context"]["policy"]["approve_tools"] == ["record"]
    two = client.assistants.update(mine["assistant_id"], context={"budget": {"max_steps": 3}})
    assert two["version"] == 2
    assert two["context"]["budget"]["max_steps"] == 3
    versions = client.assistants.get_versions(mine["assistant_id"])
    assert [v["version"] for v in versions] == [2, 1]
    back = client.assistants.set_latest(mine["assistant_id"], 1)
    assert back["version"] == 1
    assert client.assistants.get(mine["assistant_id"])["version"] == 1
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, mine["assistant_id"], input=chain("by-mine"))
    assert client.runs.list(tid)[0]["status"] == "success"
    assert client.threads.get(tid)["status"] == "interrupted"  # approve_tools: record
    client.assistants.delete(mine["assistant_id"])
    assert "mine" not in {a["name"] for a in client.assistants.search()}


def test_a_cancelled_run_executes_no_further_effect_and_a_later_run_goes_on(
    server: str, workdir: Path
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, "onward", input=chain("a", "b", "c", seconds=1.5))
    wait_until("step a to start", lambda: rows(workdir, "calls.jsonl"))
    client.runs.cancel(tid, run["run_id"], wait=True)
    assert client.runs.get(tid, run["run_id"])["status"] == "interrupted"
    assert client.threads.get(tid)["status"] == "idle"
    time.sleep(2.0)  # longer than a step: nothing more runs
    assert [r["label"] for r in rows(workdir, "calls.jsonl")] == ["a"]
    # Step a finished (it was running) and is kept; a new run goes on from there.
    values = client.runs.wait(tid, "onward", input=None)
    assert done_steps(values) == {"a", "b", "c"}
    assert [r["label"] for r in rows(workdir, "effects.jsonl")] == ["a", "b", "c"]


def test_rollback_removes_the_run_and_leaves_a_new_thread_empty(server: str, workdir: Path) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, "onward", input=chain("a", "b", seconds=1.5))
    wait_until("step a to start", lambda: rows(workdir, "calls.jsonl"))
    client.runs.cancel(tid, run["run_id"], wait=True, action="rollback")
    with pytest.raises(httpx.HTTPStatusError) as gone:
        client.runs.get(tid, run["run_id"])
    assert gone.value.response.status_code == 404
    assert client.threads.get_state(tid)["values"] == {}
    assert client.threads.get_history(tid) == []
    assert [r["label"] for r in rows(workdir, "calls.jsonl")] == ["a"]


def test_enqueued_runs_start_in_order_and_other_strategies_act_on_the_busy_thread(
    server: str, workdir: Path
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    pause = {"interrupt_after": ["verify"]}
    first = client.runs.create(tid, "onward", input=chain("a", "b", "c", seconds=1.0), **pause)
    second = client.runs.create(tid, "onward", input=None, **pause)  # enqueue: the default
    third = client.runs.create(tid, "onward", input=None, multitask_strategy="enqueue", **pause)
    assert client.runs.get(tid, second["run_id"])["status"] == "pending"
    with pytest.raises(httpx.HTTPStatusError) as busy:
        client.runs.create(tid, "onward", input=None, multitask_strategy="reject")
    assert busy.value.response.status_code == 409
    # Each run does one step and pauses after its check: the order shows in what each saw.
    assert done_steps(client.runs.join(tid, first["run_id"])) == {"a"}
    assert done_steps(client.runs.join(tid, second["run_id"])) == {"a", "b"}
    assert done_steps(client.runs.join(tid, third["run_id"])) == {"a", "b", "c"}
    statuses = {r["run_id"]: r["status"] for r in client.runs.list(tid)}
    # Paused where asked: the runs ended well, the thread stands interrupted.
    assert statuses[first["run_id"]] == statuses[second["run_id"]] == "success"
    assert client.threads.get(tid)["status"] == "interrupted"

    # interrupt: the running run stops, the new one runs.
    tid = client.threads.create()["thread_id"]
    slow = client.runs.create(tid, "onward", input=chain("x", "y", seconds=1.5))
    wait_until("step x to start", lambda: "x" in [r["label"] for r in rows(workdir, "calls.jsonl")])
    values = client.runs.wait(tid, "onward", input=None, multitask_strategy="interrupt")
    assert client.runs.get(tid, slow["run_id"])["status"] == "interrupted"
    assert done_steps(values) == {"x", "y"}


def test_a_dropped_stream_is_joined_again_after_its_last_event_id(
    server: str, workdir: Path
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    with httpx.Client(base_url=server, timeout=60) as http:
        body = {"assistant_id": "onward", "input": chain("a", "b", seconds=0.5)}
        body["stream_mode"] = ["values", "updates"]
        seen: list[tuple[str, str]] = []
        with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as res:
            assert res.status_code == 200
            location = res.headers["location"]
            run_id = res.headers["content-location"].rsplit("/", 1)[-1]
            assert location == f"/threads/{tid}/runs/{run_id}/stream"
            block: dict[str, str] = {}
            for line in res.iter_lines():
                if line.startswith(("id: ", "event: ")):
                    key, _sep, value = line.partition(": ")
                    block[key] = value
                if not line and "id" in block:
                    seen.append((block["id"], block.get("event", "")))
                    block = {}
                if len(seen) == 2:
                    break  # the client goes away
        assert [i for i, _e in seen] == ["1", "2"]
        assert seen[0][1] == "metadata"
    parts = list(client.runs.join_stream(tid, run_id, last_event_id="2"))
    assert parts, "the rest of the stream"
    assert parts[0].event != "metadata"
    finals = [p.data for p in parts if p.event == "values"]
    assert done_steps(finals[-1]) == {"a", "b"}
    # From the start, only the updates: every event of the run again, filtered.
    again = list(client.runs.join_stream(tid, run_id, stream_mode="updates"))
    assert {p.event for p in again} == {"metadata", "updates"}
    assert client.runs.get(tid, run_id)["status"] == "success"


def test_a_stream_that_drops_with_on_disconnect_cancel_stops_the_run(
    server: str, workdir: Path
) -> None:
    tid = get_sync_client(url=server, api_key=None).threads.create()["thread_id"]
    body = {
        "assistant_id": "onward",
        "input": chain("a", "b", "c", seconds=1.0),
        "on_disconnect": "cancel",
    }
    with httpx.Client(base_url=server, timeout=60) as http:
        with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as res:
            for line in res.iter_lines():
                if line.startswith("id: 1"):
                    break
        wait_until(
            "the run to stop",
            lambda: http.get(f"/threads/{tid}/runs").json()[0]["status"] == "interrupted",
        )
    time.sleep(1.5)
    assert len(rows(workdir, "calls.jsonl")) <= 1


def test_run_fields_are_honoured_or_refused(server: str) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    for extra, word in [
        ({"stream_mode": "events"}, "stream_mode"),
        ({"webhook": "http://127.0.0.1:9/hook"}, "webhook"),
        ({"multitask_strategy": "sometimes"}, "multitask_strategy"),
        ({"interrupt_after": ["nope"]}, "nope"),
    ]:
        res = httpx.post(
            f"{server}/threads/{tid}/runs/wait",
            json={"assistant_id": "onward", "input": chain("a"), **extra},
            timeout=30,
        )
        assert res.status_code == 422, (extra, res.text)
        assert word in json.dumps(res.json())
    assert client.threads.count() == 1
    client.threads.create()
    res = httpx.post(f"{server}/threads/search", json={"limit": 1}, timeout=30)
    assert res.headers["x-pagination-total"] == "2"
    assert res.headers["x-pagination-next"] == "1"


def test_a_webhook_is_posted_through_the_egress_policy_when_the_run_ends(
    db_url: str, workdir: Path
) -> None:
    import http.server
    import threading

    got: list[dict[str, Any]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    hook = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    port = hook.server_address[1]
    try:
        with serve(db_url, workdir, ONWARD_HTTP_ALLOW=f"127.0.0.1:{port}") as url:
            client = get_sync_client(url=url, api_key=None)
            tid = client.threads.create()["thread_id"]
            webhook = f"http://127.0.0.1:{port}/done"
            client.runs.wait(tid, "onward", input=chain("a"), webhook=webhook)
            wait_until("the webhook", lambda: got)
            (run,) = client.runs.list(tid)
            assert got[0]["run_id"] == run["run_id"]
            assert got[0]["status"] == "success"
            assert done_steps(got[0]["values"]) == {"a"}
            # A host the egress policy does not allow: refused before the run starts.
            res = httpx.post(
                f"{url}/threads/{tid}/runs/wait",
                json={"assistant_id": "onward", "input": None, "webhook": "http://10.0.0.1/x"},
                timeout=30,
            )
            assert res.status_code == 422
            assert "not allowed" in res.json()["detail"]
            assert len(client.runs.list(tid)) == 1
    finally:
        hook.shutdown()


def test_stream_subgraphs_as_agent_chat_ui_sends_it_streams_the_one_graph(server: str) -> None:
    """agent-chat-ui streams with ``stream_subgraphs: true``; onward's graph has no
    subgraphs, so the run streams just what it streams without it (not a 422)."""
    client = get_sync_client(url=server, api_key=None)
    seen: dict[bool, list[str]] = {}
    for subgraphs in (False, True):
        tid = client.threads.create()["thread_id"]
        parts = client.runs.stream(
            tid,
            "onward",
            input=chain("a", "b"),
            stream_mode=["values", "updates"],
            stream_subgraphs=subgraphs,
        )
        seen[subgraphs] = [p.event for p in parts if p.event != "metadata"]
        assert done_steps(client.threads.get_state(tid)["values"]) == {"a", "b"}
    assert seen[True] == seen[False]
    assert "error" not in seen[True]
    assert "values" in seen[True]
