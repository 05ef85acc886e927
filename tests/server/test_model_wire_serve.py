"""``onward serve`` with a model behind a loopback OpenAI-compatible server
(tests/support/openai_fake.py): what a chat client asks to stream changes neither what the run's
model calls count nor what the chat shows. A client streaming ``messages-tuple`` makes
LangGraph attach its streaming callback, so langchain-openai streams the planner's call:
onward asks for the usage of a streamed call (else only an estimate would be counted) and
tags its own calls so their raw JSON never reaches the chat as message chunks."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from langgraph_sdk import get_sync_client

from tests.support.openai_fake import FakeOpenAI, Reply
from tests.support.serve import serve

GOAL = "something only a model can plan"


def _plan() -> dict[str, Any]:
    args = {"path": "title.txt", "content": "Quarterly report"}
    return {"steps": [{"id": "title", "tool": "write_file", "args_json": json.dumps(args)}]}


def _run(url: str, mode: str) -> tuple[list[Any], dict[str, Any]]:
    """A model-planned goal streamed in ``mode``: its stream parts and its thread's state."""
    client = get_sync_client(url=url, api_key=None)
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(tid, "onward", input={"goal": GOAL}, stream_mode=mode))
    assert "error" not in [p.event for p in parts], parts
    return parts, dict(client.threads.get_state(tid)["values"])


def _unsaved_texts(parts: list[Any], values: dict[str, Any]) -> list[str]:
    """The text each message id streamed as ``messages`` chunks that the thread did not
    save (a model's raw answer, streamed as it came)."""
    saved = {m.get("id") for m in values.get("messages", [])}
    texts: dict[str, str] = defaultdict(str)
    for part in parts:
        if part.event.startswith("messages"):
            message, _metadata = part.data
            if message.get("id") not in saved:
                texts[message.get("id")] += json.dumps(message.get("content"))
    return list(texts.values())


def test_values_and_messages_streams_count_the_same_tokens_and_hide_the_plan_json(
    db_url: str, workdir: Path
) -> None:
    with FakeOpenAI() as api:
        api.default = Reply(json=_plan(), prompt_tokens=5777, completion_tokens=321)
        env = {"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": api.base_url}
        with serve(db_url, workdir, **env) as url:
            _, by_values = _run(url, "values")
            parts, by_messages = _run(url, "messages-tuple")
    assert by_values["status"] == by_messages["status"] == "done"
    assert api.streamed == [False, True]  # the messages client made the planner call stream
    assert api.requests[1]["stream_options"] == {"include_usage": True}
    for usage in (by_values["usage"], by_messages["usage"]):
        assert (usage["calls"], usage["input_tokens"], usage["output_tokens"]) == (1, 5777, 321)
    assert any(p.event.startswith("messages") for p in parts)  # the chat saw the steps
    leaked = [t for t in _unsaved_texts(parts, by_messages) if "steps" in t or "args_json" in t]
    assert leaked == []
