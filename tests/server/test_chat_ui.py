"""agent-chat-ui as its users meet it, through a real ``onward serve`` and ``langgraph_sdk``
(both backends), each test a scripted replay of the requests agent-chat-ui (commit
``fdc87e6``) sends, from its source:

* editing a message (``src/components/thread/messages/human.tsx``): ``useStream`` fetches
  the thread's history with ``limit: 10``; the edit is ``submit({messages: [{type:
  "human", content}]}, {checkpoint: firstSeenState.parent_checkpoint, streamMode:
  ["values"], streamSubgraphs: true, streamResumable: true})``, where ``firstSeenState``
  is the oldest fetched state that holds the message;
* the approval card (``src/components/thread/agent-inbox/*``): its title is the action
  request's ``name``, its fields the ``args``, its config the ``review_configs`` entry
  whose ``action_name`` is that name; an edit sends ``edited_action: {name, args}`` with
  the name it showed;
* the history sidebar (``src/providers/Thread.tsx``): ``threads.search({metadata:
  {graph_id: ID}, limit: 100})`` for an assistant id that is not a UUID, ``{assistant_id:
  ID}`` for one that is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

from tests.support.hitl_tools import rows
from tests.support.serve import serve

COPY = "copy every file in inbox/ to archive/"
ORDERS = "Analyze orders.csv, find abnormal orders and give me a summary"
TWO_DELIVERIES = {
    "steps": [
        {"id": "a", "tool": "deliver", "args": {"label": "a"}},
        {"id": "b", "tool": "deliver", "args": {"label": "b"}},
    ]
}
CHAIN = {
    "steps": [
        {
            "id": f"s{i}",
            "tool": "slow",
            "args": {"value": i},
            **({"depends_on": [f"s{i - 1}"]} if i else {}),
        }
        for i in range(5)
    ]
}
"""Five steps one after the other: a goal of 14 checkpoints."""
CONFIG = """
assistants:
  onward: {description: the default}
  fast: {description: no approvals, budget: {max_steps: 40}}
"""


@pytest.fixture
def server(db_url: str, workdir: Path) -> Iterator[str]:
    config = workdir.parent / "serve.yaml"
    config.write_text(CONFIG)
    with serve(db_url, workdir, "--config", str(config)) as url:
        yield url


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"type": "human", "content": text}]}


def inbox(workdir: Path, *names: str) -> None:
    (workdir / "inbox").mkdir()
    for name in names:
        (workdir / "inbox" / f"{name}.txt").write_text(name.upper())


def edit(client: Any, tid: str, message_index: int, text: str) -> list[Any]:
    """agent-chat-ui's edit of the thread's ``message_index``-th human message."""
    history = client.threads.get_history(tid, limit=10)  # newest first, as fetched
    head = history[0]["values"]["messages"]
    target = [m for m in head if m["type"] == "human"][message_index]
    first_seen = [
        h for h in history if any(m["id"] == target["id"] for m in h["values"]["messages"])
    ][-1]
    sent = client.threads.get_state(tid, checkpoint=first_seen["parent_checkpoint"])
    assert sent["values"]["status"] != "done"  # a checkpoint in the middle of the goal
    parts = client.runs.stream(
        tid,
        "onward",
        input=human(text),
        checkpoint=first_seen["parent_checkpoint"],
        stream_mode=["values"],
        stream_subgraphs=True,
        stream_resumable=True,
    )
    return list(parts)


def humans_of(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values["messages"] if m["type"] == "human"]


def test_editing_the_first_message_of_a_long_thread_forks_from_its_start(
    server: str, workdir: Path
) -> None:
    inbox(workdir, "a", "b", "c")
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    first = {**human(COPY), "plan": CHAIN}
    assert client.runs.wait(tid, "onward", input=first)["status"] == "done"
    old = client.threads.get_history(tid, limit=500)
    assert len(old) > 10  # the first message's first-seen state is not fetched
    parts = edit(client, tid, 0, "copy every file in inbox/ to fresh/")
    assert "error" not in [p.event for p in parts]
    final = client.threads.get_state(tid)["values"]
    assert final["status"] == "done"
    assert humans_of(final) == ["copy every file in inbox/ to fresh/"]
    assert final["plan"]["version"] == 1
    assert sorted(p.name for p in (workdir / "fresh").iterdir()) == ["a.txt", "b.txt", "c.txt"]
    # Nothing else changed: the old branch is kept whole, archive/ as it was.
    now = {h["checkpoint"]["checkpoint_id"] for h in client.threads.get_history(tid, limit=500)}
    assert {h["checkpoint"]["checkpoint_id"] for h in old} <= now
    assert not (workdir / "archive").exists()  # the first goal's plan was the chain


def test_editing_a_later_message_with_a_mid_goal_checkpoint_forks_just_before_it(
    server: str, workdir: Path
) -> None:
    from onward.demo import write_sample_orders

    write_sample_orders(workdir / "orders.csv", rows=40)
    inbox(workdir, "a", "b", "c")
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, "onward", input=human(COPY))
    # The second goal: five steps one after the other, more states than are fetched.
    second = client.runs.wait(tid, "onward", input=human(ORDERS))
    assert second["status"] == "done"
    assert second["plan"]["version"] == 2
    parts = edit(client, tid, 1, "copy every file in inbox/ to other/")
    assert "error" not in [p.event for p in parts]
    final = client.threads.get_state(tid)["values"]
    assert final["status"] == "done"
    assert humans_of(final) == [COPY, "copy every file in inbox/ to other/"]
    assert final["plan"]["version"] == 2  # goal 2 again, after goal 1: not a third goal
    assert (workdir / "other" / "c.txt").read_text() == "C"


def test_an_escalation_card_shows_why_and_what_each_answer_does(server: str, workdir: Path) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    out = client.runs.wait(tid, "onward", input={"goal": "deliver", "plan": TWO_DELIVERIES})
    [interrupt] = out["__interrupt__"]
    value = interrupt["value"]
    titles = [a["name"] for a in value["action_requests"]]
    for title, label in zip(titles, "ab", strict=True):
        assert f"the address for '{label}' is unknown" in title
        assert title.startswith(f"deliver (step {label}) stopped:")
        assert "Approve: try again" in title
        assert "Reject: skip the step" in title
    for action in value["action_requests"]:
        assert action["description"].startswith("**")  # the reason first
        assert "the address for" in action["description"].split("\n")[0]
    # The card pairs a request with the review config of the same name; both HITL-valid.
    assert [c["action_name"] for c in value["review_configs"]] == titles
    assert [a["args"] for a in value["action_requests"]] == [{"label": "a"}, {"label": "b"}]
    # onward's own metadata is unchanged: kinds, steps, reasons.
    assert [q["kind"] for q in value["onward"]["questions"]] == ["escalation"] * 2
    assert [q["step_id"] for q in value["onward"]["questions"]] == ["a", "b"]
    # The same card in get_state's tasks and the thread's interrupts.
    state = client.threads.get_state(tid)
    assert [i["value"] for t in state["tasks"] for i in t["interrupts"]] == [value]
    # An edit as the card sends it (its title as the name) edits the step's args.
    decisions = [
        {"type": "edit", "edited_action": {"name": titles[0], "args": {"label": "b"}}},
        {"type": "reject", "message": "not b"},
    ]
    done = client.runs.wait(tid, "onward", command={"resume": {"decisions": decisions}})
    assert done["status"] == "done"
    assert done["plan"]["steps"][0] == {**done["plan"]["steps"][0], "tool": "deliver"}
    assert sorted(r["label"] for r in rows(workdir, "deliveries.jsonl")) == ["b"]


def test_the_history_sidebar_lists_an_assistants_threads_by_its_name(
    server: str, workdir: Path
) -> None:
    inbox(workdir, "a")
    client = get_sync_client(url=server, api_key=None)
    fast = client.threads.create()["thread_id"]
    client.runs.wait(fast, "fast", input=human(COPY))
    default = client.threads.create()["thread_id"]
    client.runs.wait(default, "onward", input=human(COPY))
    [fast_assistant] = [a for a in client.assistants.search() if a["name"] == "fast"]

    def listed(metadata: dict[str, Any]) -> set[str]:
        return {t["thread_id"] for t in client.threads.search(metadata=metadata, limit=100)}

    assert listed({"graph_id": "fast"}) == {fast}
    assert listed({"assistant_id": fast_assistant["assistant_id"]}) == {fast}
    assert listed({"graph_id": "onward"}) == {fast, default}  # the graph: every thread
    assert client.threads.get(fast)["metadata"] == {
        "graph_id": "onward",
        "assistant_id": fast_assistant["assistant_id"],
    }
    [run] = client.runs.list(fast)
    assert run["metadata"] == {"graph_id": "onward", "assistant_id": fast_assistant["assistant_id"]}
    assert listed({"graph_id": "nobody"}) == set()


def status_of(call: Any) -> int:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        call()
    return int(caught.value.response.status_code)
