"""The Python clients make the calls the JS conformance test makes
(tests/server/js/conformance.mjs),
against a real ``onward serve`` on both store backends: the async ``langgraph_sdk`` client
and ``RemoteGraph`` (sync and async) answer a wave's approvals with one unkeyed list, send a
follow-up message, cancel (interrupt and rollback), enqueue runs in order, rejoin a dropped
stream after its last event id, copy and count threads, read assistants' versions and
schemas, and page with the pagination headers. Each asserts status, shape and behaviour."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.pregel.remote import RemoteGraph
from langgraph.types import Command
from langgraph_sdk import get_client

from tests.support.hitl_tools import rows
from tests.support.serve import payments
from tests.support.serve_api import chain, done_steps, server  # noqa: F401  (the fixture)
from tests.support.serve_chat import COPY, TWO_PAYMENTS, human

BOTH = {"decisions": [{"type": "approve"}, {"type": "reject", "message": "not bo"}]}


def labels(workdir: Path, name: str = "calls.jsonl") -> list[str]:
    return [r["label"] for r in rows(workdir, name)]


async def wait_until(what: str, check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def status_of(call: Any) -> int:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        await call
    return int(caught.value.response.status_code)


def test_the_async_sdk_answers_a_wave_unkeyed_and_a_follow_up_is_the_next_goal(
    server: str,  # noqa: F811
    workdir: Path,
) -> None:
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")

    async def go() -> None:
        client = get_client(url=server, api_key=None)
        tid = (await client.threads.create())["thread_id"]
        out = await client.runs.wait(tid, "onward", input={"goal": "pay", "plan": TWO_PAYMENTS})
        [interrupt] = out["__interrupt__"]
        assert isinstance(interrupt["id"], str)
        assert [a["name"] for a in interrupt["value"]["action_requests"]] == ["pay", "pay"]
        assert (await client.threads.get(tid))["status"] == "interrupted"
        one = {"resume": {"decisions": [{"type": "approve"}]}}
        assert await status_of(client.runs.wait(tid, "onward", command=one)) == 422
        done = await client.runs.wait(tid, "onward", command={"resume": BOTH})
        assert done["status"] == "done"
        assert [p["to"] for p in payments(workdir)] == ["ann"]
        assert (await client.threads.get(tid))["status"] == "idle"
        # The next message on the finished thread: the next goal, in the same thread.
        nxt = await client.runs.wait(tid, "onward", input=human(COPY))
        assert nxt["status"] == "done"
        assert nxt["plan"]["version"] == 2
        assert (workdir / "archive" / "a.txt").read_text() == "A"
        humans = [m["content"] for m in nxt["messages"] if m["type"] == "human"]
        assert humans[-1] == COPY
        runs = await client.runs.list(tid)
        # The first run stopped at the question: it ended well too (as on LangGraph Server).
        assert [r["status"] for r in runs] == ["success", "success", "success"]

    asyncio.run(go())


def test_remote_graph_streams_a_wave_resumes_it_unkeyed_and_reads_state_and_history(
    server: str,  # noqa: F811
    workdir: Path,
) -> None:
    remote = RemoteGraph("onward", url=server)
    config: Any = {"configurable": {"thread_id": "0b7a4c1e-2f4d-4e8a-9c3b-6d5e4f3a2b10"}}
    parts = list(
        remote.stream(
            {"goal": "pay", "plan": TWO_PAYMENTS}, config, stream_mode=["values", "updates"]
        )
    )
    assert {p[0] for p in parts} == {"values", "updates"}, [str(p)[:200] for p in parts[:4]]
    snap = remote.get_state(config)
    [interrupt] = snap.interrupts
    assert len(interrupt.value["action_requests"]) == 2
    assert snap.next == ("approve",)
    done = remote.invoke(Command(resume=BOTH), config)  # unkeyed, as agent-chat-ui sends
    assert done["status"] == "done"
    assert [p["to"] for p in payments(workdir)] == ["ann"]
    after = remote.get_state(config)
    assert after.next == ()
    assert after.interrupts == ()
    history = list(remote.get_state_history(config))
    assert (
        history[0].config["configurable"]["checkpoint_id"]
        == (after.config["configurable"]["checkpoint_id"])
    )
    assert any(h.interrupts for h in history)  # the question is in the thread's past

    async def follow_up() -> dict[str, Any]:
        out = await remote.ainvoke(
            {"messages": [{"type": "human", "content": "pay ann 1"}]}, config
        )
        return dict(out)

    # A goal no template handles, as a follow-up: an assistant message, not an error.
    out = asyncio.run(follow_up())
    assert out["messages"][-1]["type"] == "ai"
    assert "I cannot plan this goal" in out["messages"][-1]["content"]


def test_the_async_sdk_cancels_with_interrupt_and_rollback_and_nothing_more_runs(
    server: str,  # noqa: F811
    workdir: Path,
) -> None:
    async def go() -> None:
        client = get_client(url=server, api_key=None)
        tid = (await client.threads.create())["thread_id"]
        run = await client.runs.create(tid, "onward", input=chain("a", "b", "c", seconds=1.5))
        assert run["status"] in ("pending", "running")
        await wait_until("step a to start", lambda: "a" in labels(workdir))
        await client.runs.cancel(tid, run["run_id"], wait=True, action="interrupt")
        assert (await client.runs.get(tid, run["run_id"]))["status"] == "interrupted"
        await asyncio.sleep(2.0)  # longer than a step: nothing more runs
        assert labels(workdir) == ["a"]

        tid2 = (await client.threads.create())["thread_id"]
        run2 = await client.runs.create(tid2, "onward", input=chain("r1", "r2", seconds=1.5))
        await wait_until("step r1 to start", lambda: "r1" in labels(workdir))
        await client.runs.cancel(tid2, run2["run_id"], wait=True, action="rollback")
        assert await status_of(client.runs.get(tid2, run2["run_id"])) == 404
        assert (await client.threads.get_state(tid2))["values"] == {}
        await asyncio.sleep(2.0)
        assert labels(workdir) == ["a", "r1"]
        await client.runs.cancel_many(status="all")  # nothing left running: accepted

    asyncio.run(go())


def test_the_async_sdk_enqueues_runs_in_order_and_joins_each(
    server: str,  # noqa: F811
    workdir: Path,
) -> None:
    async def go() -> None:
        client = get_client(url=server, api_key=None)
        tid = (await client.threads.create())["thread_id"]
        pause = {"interrupt_after": ["verify"]}
        first = await client.runs.create(tid, "onward", input=chain("e1", "e2", "e3"), **pause)
        second = await client.runs.create(tid, "onward", input=None, **pause)
        third = await client.runs.create(
            tid, "onward", input=None, multitask_strategy="enqueue", **pause
        )
        assert (
            await status_of(
                client.runs.create(tid, "onward", input=None, multitask_strategy="reject")
            )
            == 409
        )
        assert done_steps(await client.runs.join(tid, first["run_id"])) == {"e1"}
        assert done_steps(await client.runs.join(tid, second["run_id"])) == {"e1", "e2"}
        assert done_steps(await client.runs.join(tid, third["run_id"])) == {"e1", "e2", "e3"}
        assert labels(workdir, "effects.jsonl") == ["e1", "e2", "e3"]

    asyncio.run(go())


def test_the_async_sdk_rejoins_a_dropped_stream_after_its_last_event_id(
    server: str,  # noqa: F811
    workdir: Path,
) -> None:
    async def go() -> None:
        client = get_client(url=server, api_key=None)
        tid = (await client.threads.create())["thread_id"]
        created: list[str] = []
        seen: list[Any] = []
        stream = client.runs.stream(
            tid,
            "onward",
            input=chain("j1", "j2", seconds=0.5),
            stream_mode=["values", "updates"],
            on_run_created=lambda meta: created.append(meta["run_id"]),
        )
        async for part in stream:
            seen.append(part)
            if len(seen) == 2:
                break  # the page goes away
        await stream.aclose()  # type: ignore[attr-defined]
        assert [p.id for p in seen] == ["1", "2"]
        assert seen[0].event == "metadata"
        [run_id] = created
        rest = [p async for p in client.runs.join_stream(tid, run_id, last_event_id="2")]
        assert rest[0].id == "3"
        assert [int(p.id) for p in rest] == list(range(3, 3 + len(rest)))
        values = [p.data for p in rest if p.event == "values"][-1]
        assert done_steps(values) == {"j1", "j2"}
        assert (await client.runs.join(tid, run_id))["steps"]["j2"]["status"] == "done"
        # Nothing in hand on the thread any more: its stream ends at once.
        assert [p async for p in await client.threads.join_stream(tid)] == []

    asyncio.run(go())


def test_threads_copy_count_and_assistants_versions_schemas_and_pages(
    server: str,  # noqa: F811
    workdir: Path,
) -> None:
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")

    async def go() -> None:
        client = get_client(url=server, api_key=None)
        tid = (await client.threads.create(metadata={"kind": "original"}))["thread_id"]
        await client.runs.wait(tid, "onward", input=chain("c1"))
        copy: Any = await client.threads.copy(tid)
        assert copy["thread_id"] != tid
        assert copy["metadata"]["copied_from"] == tid
        state = await client.threads.get_state(copy["thread_id"])
        assert done_steps(state["values"]) == {"c1"}
        assert state["next"] == []
        assert (await client.threads.get(copy["thread_id"]))["status"] == "idle"
        copied = await client.runs.list(copy["thread_id"])
        assert copied == []  # its history is the original's; no run of its own yet
        # The copy goes on by itself: a follow-up goal there runs there only.
        nxt = await client.runs.wait(copy["thread_id"], "onward", input=human(COPY))
        assert nxt["plan"]["version"] == 2
        assert done_steps(nxt) >= {"c1", "copy-a-txt"}
        assert done_steps((await client.threads.get_state(tid))["values"]) == {"c1"}
        assert await client.threads.count() == 2
        assert await client.threads.count(metadata={"kind": "original"}) == 2  # copied along
        page = await client.threads.search(limit=1)
        rest = await client.threads.search(limit=1, offset=1)
        assert len(page) == len(rest) == 1
        assert {page[0]["thread_id"], rest[0]["thread_id"]} == {tid, copy["thread_id"]}
        empty = (await client.threads.create())["thread_id"]
        assert await status_of(client.threads.copy(empty)) == 409  # no run yet

        mine = await client.assistants.create(
            "onward", name="py", context={"budget": {"max_steps": 5}}
        )
        await client.assistants.update(mine["assistant_id"], context={"budget": {"max_steps": 4}})
        versions = await client.assistants.get_versions(mine["assistant_id"])
        assert [v["version"] for v in versions] == [2, 1]
        assert versions[0]["context"]["budget"]["max_steps"] == 4
        schemas = await client.assistants.get_schemas(mine["assistant_id"])
        assert schemas["graph_id"] == "onward"
        assert "properties" in schemas["input_schema"]
        # Pagination headers, read by the SDK's object response format.
        first: Any = await client.assistants.search(limit=2, response_format="object")
        assert len(first["assistants"]) == 2
        assert first["next"] == "2"
        last: Any = await client.assistants.search(limit=2, offset=2, response_format="object")
        assert [a["name"] for a in last["assistants"]] == ["py"]
        assert last["next"] is None

    asyncio.run(go())
