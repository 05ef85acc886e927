"""A tool-calling step over ``onward serve``, its model a loopback OpenAI-compatible server
(tests/support/openai_fake.py) that answers with tool calls, through langchain-openai's
``bind_tools``: the unsafe call waits as the thread's interrupt in the approval shape
(agent-chat-ui's card: the tool and its args as they would run), a resume with the
decision runs it, and the thread's messages hold each call as an AI tool call and a tool
message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph_sdk import get_sync_client

from tests.support.common import read_jsonl
from tests.support.tool_calling_serve import PLAN, publishing_server


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def test_over_http_the_call_asks_as_the_threads_interrupt_and_the_answer_runs_it(
    db_url: str, workdir: Path
) -> None:
    with publishing_server(db_url, workdir) as (url, api):
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "onward", input={"goal": "publish revenue", "plan": PLAN})
        waiting = client.threads.get_state(tid)
        published_before = read_jsonl(workdir / "effects.jsonl")
        client.runs.wait(tid, "onward", command={"resume": {"decisions": [{"type": "approve"}]}})
        done = client.threads.get_state(tid)

    [interrupt] = waiting["interrupts"]
    [action] = interrupt["value"]["action_requests"]
    assert action["name"] == "publish"
    assert action["args"] == {"title": "Revenue up"}
    assert interrupt["value"]["review_configs"][0]["allowed_decisions"] == [
        "approve",
        "reject",
        "respond",
    ]
    assert published_before == []
    assert done["values"]["status"] == "done"
    assert [e["title"] for e in read_jsonl(workdir / "effects.jsonl")] == ["Revenue up"]
    messages = done["values"]["messages"]
    calls = [m["tool_calls"][0]["name"] for m in messages if m["type"] == "ai" and m["tool_calls"]]
    assert calls == ["lookup", "publish", "tool_calling"]
    results = [m for m in messages if m["type"] == "tool"]
    assert [m["name"] for m in results] == ["lookup", "publish", "tool_calling"]
    assert results[1]["content"] == '{"published": "Revenue up"}'
    # The provider was offered exactly the step's tools, on each of the 3 turns.
    assert [tool_names(r) for r in api.requests] == [["lookup", "publish"]] * 3
