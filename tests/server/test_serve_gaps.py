"""Gaps between what ``onward serve`` said it did and what it did, closed, each seen from
outside through a real server with the unmodified ``langgraph_sdk`` (or raw HTTP): a batch
starts whole or not at all, thread ids have one spelling, a run's ``config`` acts or is
refused, ``/info`` tells the truth about crons, and ``stream_mode=events`` says why not."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client

from tests.support.hitl_tools import rows
from tests.support.serve import serve
from tests.support.serve_api import chain

CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture
def server(db_url: str, workdir: Path) -> Iterator[str]:
    """A server whose users may each have two runs in flight."""
    with serve(db_url, workdir, ONWARD_USER_RUNS="2") as url:
        yield url


def test_a_batch_past_the_users_run_cap_starts_none_and_one_that_fits_starts_all(
    server: str, workdir: Path
) -> None:
    kept = {"assistant_id": "onward", "on_completion": "keep"}
    batch = [{**kept, "input": chain(label)} for label in ("a", "b", "c")]
    res = httpx.post(f"{server}/runs/batch", json=batch, timeout=60)
    assert res.status_code == 429, res.text
    assert "none of it was started" in res.json()["detail"]
    assert res.headers["retry-after"]
    client = get_sync_client(url=server, api_key=None)
    assert client.threads.search() == []
    assert httpx.get(f"{server}/onward/runs", timeout=30).json() == []

    runs = client.runs.create_batch(batch[:2])
    assert len(runs) == 2
    for run in runs:
        client.runs.join(run["thread_id"], run["run_id"])
    assert sorted(r["label"] for r in rows(workdir, "effects.jsonl")) == ["a", "b"]
    assert len(client.threads.search()) == 2


def test_info_says_crons_are_served(server: str) -> None:
    info = httpx.get(f"{server}/info", timeout=30).json()
    assert info["flags"]["crons"] is True
    client = get_sync_client(url=server, api_key=None)
    made = client.crons.create("onward", schedule="0 9 * * *", input=chain("a"))
    assert client.crons.search()[0]["cron_id"] == made["cron_id"]


def test_thread_ids_the_sdk_and_the_server_make_are_canonical_and_drive_runs(
    server: str,
) -> None:
    client = get_sync_client(url=server, api_key=None)
    made = client.threads.create()["thread_id"]
    given = str(uuid.uuid4())
    assert client.threads.create(thread_id=given)["thread_id"] == given
    fresh = str(uuid.uuid4())
    done = client.runs.wait(fresh, "onward", input=chain("a"), if_not_exists="create")
    assert done["status"] == "done"
    kept = client.runs.wait(None, "onward", input=chain("b"), on_completion="keep")
    assert kept["status"] == "done"
    copied = client.threads.copy(fresh)["thread_id"]
    ids = [t["thread_id"] for t in client.threads.search(limit=100)]
    assert {made, given, fresh, copied} <= set(ids)
    assert len(ids) == 5
    assert all(CANONICAL.fullmatch(i) for i in ids), ids


def test_a_runs_config_metadata_and_tags_go_into_its_record_and_the_rest_is_refused(
    server: str, workdir: Path
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    config = {"configurable": {"thread_id": tid}, "metadata": {"team": "ops"}, "tags": ["x"]}
    run = client.runs.create(tid, "onward", input=chain("a"), config=config)
    client.runs.join(tid, run["run_id"])
    record = client.runs.get(tid, run["run_id"])
    assert record["metadata"]["team"] == "ops"
    assert record["metadata"]["tags"] == ["x"]
    for extra, named in [
        ({"config": {"recursion_limit": 5}}, "config.recursion_limit"),
        ({"config": {"configurable": {"model": "gpt"}}}, "config.configurable.model"),
        ({"config": {"configurable": {"thread_id": str(uuid.uuid4())}}}, "thread_id"),
        ({"config": {"run_name": "x"}}, "config.run_name"),
        ({"context": {"model": "gpt"}}, "context"),
    ]:
        body = {"assistant_id": "onward", "input": None, **extra}
        res = httpx.post(f"{server}/threads/{tid}/runs/wait", json=body, timeout=60)
        assert res.status_code == 422, (extra, res.text)
        assert named in res.json()["detail"], (extra, res.text)
    assert len(client.runs.list(tid)) == 1
    assert [r["label"] for r in rows(workdir, "calls.jsonl")] == ["a"]


def test_stream_mode_events_is_refused_saying_why(server: str) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    res = httpx.post(
        f"{server}/threads/{tid}/runs/stream",
        json={"assistant_id": "onward", "input": chain("a"), "stream_mode": ["values", "events"]},
        timeout=60,
    )
    assert res.status_code == 422
    assert "astream_events" in res.json()["detail"]
    assert "messages-tuple" in res.json()["detail"]
    assert client.runs.list(tid) == []


def test_runs_wait_takes_the_sdks_raise_error_flag_and_nothing_else_of_its_kind(
    server: str, workdir: Path
) -> None:
    """langgraph-sdk 0.4.6-0.4.9 put ``raise_error`` (their client-side flag) in the body of
    ``runs.wait``: a boolean is taken, any other value refused before a run starts."""
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    for bad in ("yes", "true", {"a": 1}):
        res = httpx.post(
            f"{server}/threads/{tid}/runs/wait",
            json={"assistant_id": "onward", "input": chain("a"), "raise_error": bad},
            timeout=60,
        )
        assert res.status_code == 422, res.text
        assert "raise_error" in res.json()["detail"]
    assert client.runs.list(tid) == []
    res = httpx.post(
        f"{server}/threads/{tid}/runs/wait",
        json={"assistant_id": "onward", "input": chain("a"), "raise_error": True},
        timeout=60,
    )
    assert res.status_code == 200, res.text
    assert [r["label"] for r in rows(workdir, "effects.jsonl")] == ["a"]
