"""The rest of the LangGraph Server API, through the unmodified Python ``langgraph_sdk``
against a real ``onward serve`` (both store backends): stateless runs, the store API,
patching a checkpoint's metadata, and crons run by the server's scheduler."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from onward.serve.app import create_app
from tests.support.hitl_tools import rows
from tests.support.serve import HITL_TOOLS, free_port, serve
from tests.support.serve_api import chain, done_steps, wait_until


@pytest.fixture
def server(db_url: str, workdir: Path) -> Iterator[str]:
    with serve(db_url, workdir) as url:
        yield url


@pytest.fixture
def client(server: str) -> SyncLangGraphClient:
    return get_sync_client(url=server, api_key=None)


# -- the store API ----------------------------------------------------------------------


def test_store_items_are_put_read_searched_listed_and_deleted(client: SyncLangGraphClient) -> None:
    store = client.store
    store.put_item(["docs", "a"], "k1", {"text": "one", "n": 1})
    store.put_item(["docs", "a"], "k2", {"text": "two", "n": 2})
    store.put_item(["docs", "b"], "k3", {"text": "three", "n": 3})
    store.put_item(["notes"], "k4", {"text": "four", "n": 4})

    item = store.get_item(["docs", "a"], "k1")
    assert item["namespace"] == ["docs", "a"]
    assert item["key"] == "k1"
    assert item["value"] == {"text": "one", "n": 1}
    assert item["created_at"] <= item["updated_at"]

    store.put_item(["docs", "a"], "k1", {"text": "uno", "n": 1})  # an update, not a copy
    assert store.get_item(["docs", "a"], "k1")["value"]["text"] == "uno"

    found = store.search_items(["docs"])["items"]
    assert {i["key"] for i in found} == {"k1", "k2", "k3"}
    assert [i["key"] for i in store.search_items(["docs"], filter={"n": {"$gte": 2}})["items"]] in (
        ["k2", "k3"],
        ["k3", "k2"],
    )
    assert [i["key"] for i in store.search_items([], filter={"text": "four"})["items"]] == ["k4"]
    assert len(store.search_items(["docs"], limit=2)["items"]) == 2
    assert len(store.search_items(["docs"], limit=2, offset=2)["items"]) == 1

    spaces = store.list_namespaces()["namespaces"]
    assert sorted(spaces) == [["docs", "a"], ["docs", "b"], ["notes"]]
    assert sorted(store.list_namespaces(prefix=["docs"])["namespaces"]) == [
        ["docs", "a"],
        ["docs", "b"],
    ]
    assert store.list_namespaces(suffix=["b"])["namespaces"] == [["docs", "b"]]
    assert sorted(store.list_namespaces(max_depth=1)["namespaces"]) == [["docs"], ["notes"]]

    store.delete_item(["docs", "a"], "k1")
    assert store.get_item(["docs", "a"], "k1") is None
    assert {i["key"] for i in store.search_items(["docs"])["items"]} == {"k2", "k3"}


BAD_STORE_REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    ("PUT", {"namespace": ["a"], "key": "k", "value": {}, "ttl": 5}, "ttl"),
    ("PUT", {"namespace": ["a"], "key": "k", "value": {}, "index": ["text"]}, "index"),
    ("PUT", {"namespace": ["a.b"], "key": "k", "value": {}}, "periods"),
    ("PUT", {"namespace": [], "key": "k", "value": {}}, "at least one label"),
    ("PUT", {"namespace": ["a"], "key": "", "value": {}}, "key"),
    ("PUT", {"namespace": ["a"], "key": "k", "value": [1]}, "object"),
    ("PUT", {"namespace": ["a"], "key": "k", "value": {}, "color": 1}, "color"),
    ("SEARCH", {"namespace_prefix": ["a"], "query": "cats"}, "semantic"),
    ("SEARCH", {"namespace_prefix": ["a"], "limit": 10_000}, "limit"),
    ("SEARCH", {"namespace_prefix": ["a"], "filter": {"a') OR 1=1 --": 1}}, "filter field"),
    ("SEARCH", {"namespace_prefix": ["a"], "filter": {"n": {"$regex": "x"}}}, "operator"),
]


def test_store_requests_onward_does_not_take_are_a_clear_4xx(server: str) -> None:
    for method, body, word in BAD_STORE_REQUESTS:
        if method == "SEARCH":
            res = httpx.post(f"{server}/store/items/search", json=body, timeout=30)
        else:
            res = httpx.request(method, f"{server}/store/items", json=body, timeout=30)
        assert res.status_code == 422, (body, res.text)
        assert word in res.json()["detail"], (body, res.text)
    assert httpx.post(f"{server}/store/namespaces", json={}, timeout=30).json() == {
        "namespaces": []
    }


# -- stateless runs ---------------------------------------------------------------------


def labels(workdir: Path) -> list[str]:
    return [r["label"] for r in rows(workdir, "effects.jsonl")]


def test_a_stateless_wait_runs_on_a_temporary_thread_that_is_deleted_after(
    client: SyncLangGraphClient, workdir: Path
) -> None:
    values = client.runs.wait(None, "onward", input=chain("a", "b"))
    assert done_steps(values) == {"a", "b"}
    assert labels(workdir) == ["a", "b"]
    wait_until("the temporary thread's deletion", lambda: client.threads.count() == 0)


def test_a_stateless_run_kept_on_completion_leaves_its_thread(
    client: SyncLangGraphClient, workdir: Path
) -> None:
    parts = list(
        client.runs.stream(
            None, "onward", input=chain("a"), stream_mode="updates", on_completion="keep"
        )
    )
    assert parts[0].event == "metadata"
    assert any(p.event == "updates" for p in parts)
    (thread,) = client.threads.search()
    assert done_steps(client.threads.get_state(thread["thread_id"])["values"]) == {"a"}
    (run,) = client.runs.list(thread["thread_id"])
    assert run["run_id"] == parts[0].data["run_id"]
    assert run["status"] == "success"


def test_background_and_batched_stateless_runs_all_run_and_leave_no_thread(
    client: SyncLangGraphClient, workdir: Path
) -> None:
    run = client.runs.create(None, "onward", input=chain("solo"))
    assert run["status"] in ("pending", "running", "success")
    batch = client.runs.create_batch(
        [{"assistant_id": "onward", "input": chain(f"b{i}")} for i in range(3)]
    )
    assert len(batch) == 3
    assert len({r["thread_id"] for r in batch} | {run["thread_id"]}) == 4
    wait_until("every run's effect", lambda: sorted(labels(workdir)) == ["b0", "b1", "b2", "solo"])
    wait_until("the threads' deletion", lambda: client.threads.count() == 0)


def test_stateless_fields_onward_cannot_honour_are_a_clear_4xx(server: str) -> None:
    for path, body, word in [
        (
            "/runs/wait",
            {"assistant_id": "onward", "input": chain("a"), "checkpoint_id": "x"},
            "checkpoint_id",
        ),
        (
            "/runs/wait",
            {"assistant_id": "onward", "input": chain("a"), "on_completion": "x"},
            "on_completion",
        ),
        (
            "/runs",
            {"assistant_id": "onward", "input": chain("a"), "multitask_strategy": "rollback"},
            "multitask",
        ),
        (
            "/runs/stream",
            {"assistant_id": "onward", "input": chain("a"), "after_seconds": 5},
            "after_seconds",
        ),
        ("/runs/wait", {"assistant_id": "onward", "input": {"goal": 5}}, "goal"),
    ]:
        res = httpx.post(server + path, json=body, timeout=30)
        assert res.status_code == 422, (body, res.text)
        assert word in res.text, (body, res.text)
    res = httpx.post(f"{server}/runs/batch", json=[{"input": chain("a")}] * 17, timeout=30)
    assert res.status_code == 422
    res = httpx.post(f"{server}/runs/batch", json=[{"input": chain("a")}, {"x": 1}], timeout=30)
    assert res.status_code == 422
    # Nothing was left behind by the refused requests.
    assert httpx.post(f"{server}/threads/count", json={}, timeout=30).json() == 0


# -- patching a checkpoint's metadata ---------------------------------------------------


def test_patch_state_merges_metadata_into_the_latest_checkpoint_and_keeps_the_state(
    client: SyncLangGraphClient, server: str
) -> None:
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, "onward", input=chain("a"))
    before = client.threads.get_state(tid)
    history = client.threads.get_history(tid, limit=100)
    res = httpx.patch(
        f"{server}/threads/{tid}/state", json={"metadata": {"reviewed": "yes", "n": 2}}, timeout=30
    )
    assert res.status_code == 200, res.text
    after = client.threads.get_state(tid)
    assert after["metadata"]["reviewed"] == "yes"
    assert after["metadata"]["n"] == 2
    assert after["metadata"]["source"] == before["metadata"]["source"]
    assert after["values"] == before["values"]
    assert after["checkpoint"] == before["checkpoint"]
    assert after["parent_checkpoint"] == before["parent_checkpoint"]
    assert len(client.threads.get_history(tid, limit=100)) == len(history)
    # An earlier checkpoint, named.
    first = history[-1]["checkpoint"]
    res = httpx.patch(
        f"{server}/threads/{tid}/state",
        json={"metadata": {"label": "start"}, "checkpoint": first},
        timeout=30,
    )
    assert res.status_code == 200, res.text
    assert client.threads.get_state(tid, checkpoint=first)["metadata"]["label"] == "start"
    assert "label" not in client.threads.get_state(tid)["metadata"]
    for body, status in [
        ({"metadata": {"source": "update"}}, 403),
        ({"metadata": {"step": 0}}, 403),
        ({"metadata": "x"}, 422),
        ({}, 422),
        ({"metadata": {"k": "v" * 20_000}}, 422),
        ({"metadata": {"k": 1}, "checkpoint_id": "nope"}, 404),
        ({"metadata": {"k": 1}, "as_node": "x"}, 422),
    ]:
        res = httpx.patch(f"{server}/threads/{tid}/state", json=body, timeout=30)
        assert res.status_code == status, (body, res.text)
    assert client.threads.get_state(tid)["metadata"]["source"] == before["metadata"]["source"]


# -- crons ------------------------------------------------------------------------------


class FakeClock:
    """The time the server's cron scheduler reads; a test moves it on."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, **delta: float) -> None:
        with self._lock:
            self.now += timedelta(**delta)


@contextmanager
def in_process(db_url: str, workdir: Path, clock: FakeClock) -> Iterator[tuple[str, FastAPI]]:
    """``onward serve``'s app on 127.0.0.1 in this process (so its clock is the test's)."""
    app = create_app(db_url, workdir=workdir, tool_modules=[HITL_TOOLS], model=None, clock=clock)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until("the server", lambda: server.started)
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(30)


def test_crons_fire_when_due_on_the_fake_clock_and_are_managed_through_the_sdk(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONWARD_CRON_TICK", "0.02")
    clock = FakeClock(datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    with in_process(db_url, workdir, clock) as (url, app):
        sched = app.state.crons
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        on_thread = client.crons.create_for_thread(
            tid, "onward", schedule="* * * * *", input=chain("t1")
        )
        assert on_thread["thread_id"] == tid
        assert on_thread["next_run_date"].startswith("2026-01-01T12:01:00")
        stateless = client.crons.create(
            "onward", schedule="*/5 * * * *", input=chain("s1"), metadata={"kind": "report"}
        )
        assert stateless["on_run_completed"] == "delete"
        assert stateless["next_run_date"].startswith("2026-01-01T12:05:00")
        assert client.crons.count() == 2
        assert [c["cron_id"] for c in client.crons.search(thread_id=tid)] == [on_thread["cron_id"]]

        seen = sched.ticks
        wait_until("a few scheduler passes", lambda: sched.ticks >= seen + 3)
        assert sched.fired == 0  # nothing is due yet: nothing ran
        assert client.runs.list(tid) == []

        clock.advance(seconds=31)  # 12:01:01: the thread cron is due
        wait_until("the thread cron's run", lambda: labels(workdir) == ["t1"])
        wait_until("its end", lambda: client.runs.list(tid)[0]["status"] == "success")
        assert client.runs.list(tid)[0]["metadata"]["cron_id"] == on_thread["cron_id"]
        assert client.crons.search(thread_id=tid)[0]["next_run_date"].startswith(
            "2026-01-01T12:02:00"
        )
        client.crons.update(on_thread["cron_id"], enabled=False)

        clock.advance(minutes=4)  # 12:05:01: the stateless cron is due
        wait_until("the stateless cron's run", lambda: "s1" in labels(workdir))
        wait_until("its thread's deletion", lambda: client.threads.count() == 1)
        assert sched.fired == 2  # the disabled thread cron did not run again

        client.crons.update(stateless["cron_id"], on_run_completed="keep", input=chain("s2"))
        clock.advance(minutes=5)
        wait_until("the kept run", lambda: "s2" in labels(workdir))
        wait_until("the kept thread", lambda: client.threads.count() == 2)
        kept = [t for t in client.threads.search() if t["thread_id"] != tid]
        wait_until(
            "the kept run's end",
            lambda: done_steps(client.threads.get_state(kept[0]["thread_id"])["values"]) == {"s2"},
        )

        client.crons.delete(stateless["cron_id"])
        assert client.crons.count() == 1
        res = httpx.get(f"{url}/runs/crons/{stateless['cron_id']}", timeout=30)
        assert res.status_code == 404
        for body, word in [
            ({"assistant_id": "onward", "schedule": "* * * * * *"}, "five-field"),
            ({"assistant_id": "onward", "schedule": "every day"}, "five-field"),
            ({"assistant_id": "onward", "schedule": "* * * * *", "timezone": "Mars/Base"}, "zone"),
            (
                {"assistant_id": "onward", "schedule": "* * * * *", "stream_mode": "x"},
                "stream_mode",
            ),
            ({"assistant_id": "nobody", "schedule": "* * * * *"}, "nobody"),
        ]:
            res = httpx.post(f"{url}/runs/crons", json=body, timeout=30)
            assert res.status_code in (404, 422), (body, res.text)
            assert word in res.text, (body, res.text)
        assert client.crons.count() == 1


# -- the parts underneath ---------------------------------------------------------------


def test_cron_times_follow_the_schedule_in_its_time_zone_until_the_end() -> None:
    from onward.serve.crons import next_run, parse_schedule, upcoming
    from onward.store.crons import CronRow

    noon = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    assert next_run("* * * * *", None, noon) == datetime(2026, 1, 1, 12, 1, tzinfo=UTC)
    # 09:00 in Paris is 08:00 UTC in winter
    assert next_run("0 9 * * *", "Europe/Paris", noon) == datetime(2026, 1, 2, 8, tzinfo=UTC)
    assert parse_schedule(" */5  *  * * * ") == "*/5 * * * *"
    row = CronRow(
        cron_id="c",
        owner="u",
        thread_id=None,
        assistant_id="onward",
        schedule="0 * * * *",
        timezone=None,
        payload={},
        metadata={},
        on_run_completed="delete",
        enabled=True,
        end_time=datetime(2026, 1, 1, 13, 30, tzinfo=UTC),
        next_run_date=None,
        created_at=noon,
        updated_at=noon,
    )
    assert upcoming(row, noon) == datetime(2026, 1, 1, 13, tzinfo=UTC)
    assert upcoming(row, datetime(2026, 1, 1, 13, 0, 1, tzinfo=UTC)) is None  # past the end


def test_store_items_are_sealed_on_an_encrypted_store(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onward.errors import UsageError
    from onward.serve.items import Items
    from onward.store.database import Store

    monkeypatch.setenv("ONWARD_AES_KEY", "another key of 32 bytes, exactly")
    with Store(db_url) as store:
        items = Items(store.url, store.backend, store.cipher)
        try:
            items.put("alice", ("notes",), "k", {"secret": "PLAINTEXT-CANARY"})
            got = items.get("alice", ("notes",), "k")
            assert got is not None
            assert got["value"] == {"secret": "PLAINTEXT-CANARY"}
            (found,) = items.search("alice", (), None, 10, 0)
            assert found["value"] == {"secret": "PLAINTEXT-CANARY"}
            raw = items.store().search(found_namespace(found), limit=10)
            assert "PLAINTEXT-CANARY" not in str([i.value for i in raw])
            with pytest.raises(UsageError, match="encrypted"):
                items.filter({"secret": "x"})
        finally:
            items.close()


def found_namespace(doc: dict[str, Any]) -> tuple[str, ...]:
    from onward.serve.items import user_label

    return (user_label("alice"), *doc["namespace"])
