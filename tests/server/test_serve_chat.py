"""A chat frontend's conversation with ``onward serve``, through LangChain's own clients
(``langgraph_sdk`` and ``RemoteGraph``), on both backends: a wave's approvals as one
interrupt answered by an unkeyed list of decisions, checks that follow an edited arg,
"Mark as Resolved", steps as tool calls and a Markdown report in ``messages``, follow-up
messages (next goal, feedback on a waiting question, an edited earlier message), and a
goal no template handles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.pregel.remote import RemoteGraph
from langgraph.types import Command
from langgraph_sdk import get_sync_client

from tests.support.hitl_tools import rows
from tests.support.serve import payments
from tests.support.serve_chat import COPY, TWO_PAYMENTS, human


def status_of(call: Any) -> int:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        call()
    return int(caught.value.response.status_code)


def test_a_wave_is_one_interrupt_answered_by_an_unkeyed_list_in_order(
    server: str,
    workdir: Path,
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    out = client.runs.wait(tid, "onward", input={"goal": "pay two", "plan": TWO_PAYMENTS})
    [interrupt] = out["__interrupt__"]
    value = interrupt["value"]
    assert [a["args"]["to"] for a in value["action_requests"]] == ["ann", "bo"]
    assert len(value["review_configs"]) == 2
    # The wrong number of decisions: a 422 that says why, and nothing changes.
    one = {"resume": {"decisions": [{"type": "approve"}]}}
    assert status_of(lambda: client.runs.wait(tid, "onward", command=one)) == 422
    assert client.threads.get(tid)["status"] == "interrupted"
    # What agent-chat-ui sends: one unkeyed {"decisions": [...]}, in order.
    both = {"decisions": [{"type": "approve"}, {"type": "reject", "message": "not bo"}]}
    done = client.runs.wait(tid, "onward", command={"resume": both})
    assert done["status"] == "done"
    assert [p["to"] for p in payments(workdir)] == ["ann"]


def test_remote_graph_answers_a_wave_keyed_by_interrupt_id(
    server: str,
    workdir: Path,
) -> None:
    remote = RemoteGraph("onward", url=server)
    config: Any = {"configurable": {"thread_id": "4d2b8f0e-3b50-4b2b-9d1c-5d4d0a2a9f11"}}
    out = remote.invoke({"goal": "pay two", "plan": TWO_PAYMENTS}, config)
    [interrupt] = out["__interrupt__"]
    decisions = [{"type": "approve"}, {"type": "approve"}]
    done = remote.invoke(Command(resume={interrupt["id"]: {"decisions": decisions}}), config)
    assert done["status"] == "done"
    assert sorted(p["to"] for p in payments(workdir)) == ["ann", "bo"]


TWO_DELIVERIES = {
    "steps": [
        {"id": "a", "tool": "deliver", "args": {"label": "a"}},
        {"id": "b", "tool": "deliver", "args": {"label": "b"}},
    ]
}


def deliveries(workdir: Path) -> list[str]:
    return sorted(r["label"] for r in rows(workdir, "deliveries.jsonl"))


def test_a_waves_escalations_are_one_interrupt_answered_unkeyed_or_keyed(
    server: str,
    workdir: Path,
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    out = client.runs.wait(tid, "onward", input={"goal": "deliver", "plan": TWO_DELIVERIES})
    [interrupt] = out["__interrupt__"]
    value = interrupt["value"]
    assert [a["args"]["label"] for a in value["action_requests"]] == ["a", "b"]
    assert [c["allowed_decisions"] for c in value["review_configs"]] == [
        ["approve", "edit", "reject"]
    ] * 2
    assert [q["kind"] for q in value["onward"]["questions"]] == ["escalation"] * 2
    # A chat message cannot settle a failure (respond is not among its decisions): a 422.
    assert status_of(lambda: client.runs.wait(tid, "onward", input=human("hm"))) == 422
    assert (
        status_of(
            lambda: client.runs.wait(tid, "onward", command={"resume": [{"type": "approve"}]})
        )
        == 422
    )
    both = {"decisions": [{"type": "approve"}, {"type": "reject", "message": "not b"}]}
    done = client.runs.wait(tid, "onward", command={"resume": both})
    assert done["status"] == "done"
    assert deliveries(workdir) == ["a"]
    assert [(d["step_id"], d["action"]) for d in done["decisions"]] == [
        ("a", "retry"),
        ("b", "skip"),
    ]

    # Keyed by interrupt id, through RemoteGraph: the same one question.
    remote = RemoteGraph("onward", url=server)
    config: Any = {"configurable": {"thread_id": "7c1f2e0a-6a4e-4d8e-9f0b-2f5e8b1c3d22"}}
    others = {"steps": [{"id": s, "tool": "deliver", "args": {"label": s}} for s in "cd"]}
    out = remote.invoke({"goal": "deliver two more", "plan": others}, config)
    [interrupt] = out["__interrupt__"]
    retry = [{"type": "approve"}, {"type": "approve"}]
    done = remote.invoke(Command(resume={interrupt["id"]: {"decisions": retry}}), config)
    assert done["status"] == "done"
    assert deliveries(workdir) == ["a", "c", "d"]


def test_editing_dst_at_approval_is_verified_at_the_new_path(
    server: str,
    workdir: Path,
) -> None:
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    ask = {**human(COPY), "policy": {"approve_tools": ["copy_file"]}}
    [interrupt] = client.runs.wait(tid, "onward", input=ask)["__interrupt__"]
    [action] = interrupt["value"]["action_requests"]
    edit = {
        "type": "edit",
        "edited_action": {"name": action["name"], "args": {**action["args"], "dst": "kept/a.txt"}},
    }
    done = client.runs.wait(tid, "onward", command={"resume": {"decisions": [edit]}})
    assert done["steps"]["copy-a-txt"]["status"] == "done"  # checked at kept/a.txt
    assert (workdir / "kept" / "a.txt").read_text() == "A"


def test_mark_as_resolved_ends_the_run_and_nothing_runs_after_it(
    server: str,
    workdir: Path,
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, "onward", input={"goal": "pay two", "plan": TWO_PAYMENTS})
    goto = {"goto": "plan"}
    assert status_of(lambda: client.runs.wait(tid, "onward", command=goto)) == 422
    ended = client.runs.wait(tid, "onward", command={"goto": "__end__"})
    assert ended["status"] == "cancelled"
    assert "marked as resolved" in ended["failure"]["message"]
    assert client.threads.get(tid)["status"] == "idle"
    assert client.threads.get_state(tid)["next"] == []
    assert payments(workdir) == []


def test_steps_are_tool_calls_and_the_report_is_markdown_with_the_result(
    server: str,
    workdir: Path,
) -> None:
    from onward.demo import write_sample_orders

    write_sample_orders(workdir / "orders.csv", rows=40)
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    goal = "Analyze orders.csv, find abnormal orders and give me a summary"
    parts = list(
        client.runs.stream(
            tid, "onward", input=human(goal), stream_mode=["values", "messages-tuple"]
        )
    )
    final = [p.data for p in parts if p.event == "values"][-1]
    messages = final["messages"]
    assert messages[0] == {**messages[0], "type": "human", "content": goal}
    calls = [m for m in messages if m["type"] == "ai" and m.get("tool_calls")]
    results = [m for m in messages if m["type"] == "tool"]
    assert [c["tool_calls"][0]["name"] for c in calls] == [
        "read_csv",
        "validate_fields",
        "find_anomalies",
        "aggregate",
        "render_report",
    ]
    assert [r["tool_call_id"] for r in results] == [c["tool_calls"][0]["id"] for c in calls]
    assert calls[0]["tool_calls"][0]["args"] == {"path": "orders.csv"}
    report = messages[-1]
    assert report["type"] == "ai"
    text = report["content"]
    assert text.startswith("**Run done**")
    assert "| rule | count | example order ids |" in text
    assert "| duplicate_order_id |" in text
    assert "by_rule={5}" not in text.split("**Steps**")[0]
    assert "`orders-report.md`" in text
    # The messages mode streams each step's tool call and result as it settles.
    streamed = [p.data[0] for p in parts if p.event == "messages"]
    assert any(m["type"] == "tool" and m["name"] == "find_anomalies" for m in streamed)
    assert client.threads.get_state(tid)["values"]["messages"] == messages


def test_a_follow_up_message_is_the_next_goal_and_an_edited_one_forks(
    server: str,
    workdir: Path,
) -> None:
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    first = client.runs.wait(tid, "onward", input=human(COPY))
    assert first["status"] == "done"
    second = client.runs.wait(tid, "onward", input=human("copy every file in inbox/ to backup/"))
    assert second["status"] == "done"
    assert second["plan"]["version"] == 2
    assert [s["id"] for s in second["plan"]["steps"]] == ["copy-a-txt", "copy-a-txt-2"]
    assert (workdir / "backup" / "a.txt").exists()
    humans = [m["content"] for m in second["messages"] if m["type"] == "human"]
    assert humans == [COPY, "copy every file in inbox/ to backup/"]

    # Edit the second message: a run from the checkpoint where the first goal ended.
    end_of_first = next(
        h
        for h in client.threads.get_history(tid, limit=200)
        if h["values"].get("status") == "done" and h["values"]["plan"]["version"] == 1
    )
    edited = client.runs.wait(
        tid,
        "onward",
        input=human("copy every file in inbox/ to other/"),
        checkpoint_id=end_of_first["checkpoint"]["checkpoint_id"],
    )
    assert edited["status"] == "done"
    humans = [m["content"] for m in edited["messages"] if m["type"] == "human"]
    assert humans == [COPY, "copy every file in inbox/ to other/"]
    assert (workdir / "other" / "a.txt").exists()
    # A checkpoint in the middle of a goal: that goal's message edited, forked before it.
    mid_run = next(
        h for h in client.threads.get_history(tid, limit=500) if h["next"] == ["execute"]
    )
    mid = client.runs.wait(
        tid,
        "onward",
        input=human("copy every file in inbox/ to mid/"),
        checkpoint_id=mid_run["checkpoint"]["checkpoint_id"],
    )
    assert [m["content"] for m in mid["messages"] if m["type"] == "human"] == [
        COPY,
        "copy every file in inbox/ to mid/",
    ]


def test_editing_the_first_message_forks_the_thread_from_its_start(
    server: str,
    workdir: Path,
) -> None:
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    first = client.runs.wait(tid, "onward", input=human(COPY))
    assert first["status"] == "done"
    old_branch = client.threads.get_history(tid, limit=500)
    # What agent-chat-ui sends for an edited first message: the checkpoint before it (the
    # parent of the first state holding it), as ``checkpoint``.
    holding = [
        h for h in old_branch if any(m["type"] == "human" for m in h["values"].get("messages", []))
    ]
    before = holding[-1]["parent_checkpoint"]
    assert before is not None
    edited = client.runs.wait(
        tid, "onward", input=human("copy every file in inbox/ to fresh/"), checkpoint=before
    )
    assert edited["status"] == "done"
    humans = [m["content"] for m in edited["messages"] if m["type"] == "human"]
    assert humans == ["copy every file in inbox/ to fresh/"]  # a new goal from the start
    assert edited["plan"]["version"] == 1
    assert edited["goal"]["objective"] == "copy every file in inbox/ to fresh/"
    assert (workdir / "fresh" / "a.txt").read_text() == "A"
    assert client.threads.get_state(tid)["values"]["messages"] == edited["messages"]
    # The old branch is kept: its checkpoints are all still in the thread's history.
    now = {h["checkpoint"]["checkpoint_id"] for h in client.threads.get_history(tid, limit=500)}
    assert {h["checkpoint"]["checkpoint_id"] for h in old_branch} <= now
    fork = client.threads.get_history(tid, limit=500)
    assert any(
        h["checkpoint"]["checkpoint_id"] == before["checkpoint_id"] for h in fork
    )  # the fork's root is the old branch's root
    # Editing it again forks again from the same point.
    again = client.runs.wait(
        tid, "onward", input=human("copy every file in inbox/ to third/"), checkpoint=before
    )
    assert [m["content"] for m in again["messages"] if m["type"] == "human"] == [
        "copy every file in inbox/ to third/"
    ]
    assert (workdir / "third" / "a.txt").exists()
    # Another thread's first checkpoint is not this thread's start: refused, nothing changes.
    other = client.threads.create()["thread_id"]
    client.runs.wait(other, "onward", input=human(COPY))
    root = client.threads.get_history(other, limit=500)[-1]["checkpoint"]
    head = client.threads.get_state(tid)["checkpoint"]
    steal = lambda: client.runs.wait(  # noqa: E731
        tid, "onward", input=human("copy every file in inbox/ to x/"), checkpoint=root
    )
    assert status_of(steal) == 422
    assert client.threads.get_state(tid)["checkpoint"] == head
    assert not (workdir / "x").exists()


def test_a_message_on_a_waiting_thread_answers_as_feedback(
    server: str,
    workdir: Path,
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, "onward", input={"goal": "pay two", "plan": TWO_PAYMENTS})
    client.runs.wait(tid, "onward", input=human("pay half as much"))
    decisions = client.threads.get_state(tid)["values"]["decisions"]
    assert [(d["step_id"], d["action"], d["reason"]) for d in decisions] == [
        ("a", "respond", "pay half as much"),
        ("b", "respond", "pay half as much"),
    ]
    assert payments(workdir) == []


def test_a_goal_no_template_handles_gets_an_assistant_message(
    server: str,
    workdir: Path,
) -> None:
    client = get_sync_client(url=server, api_key=None)
    tid = client.threads.create()["thread_id"]
    out = client.runs.wait(tid, "onward", input=human("write me a poem about ducks"))
    last = out["messages"][-1]
    assert last["type"] == "ai"
    assert "no built-in template matches" in last["content"]
    assert "What you can do" in last["content"]
    # A follow-up no template handles either: told so in the thread, nothing else changes.
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")
    client.runs.wait(tid, "onward", input=human(COPY))
    again = client.runs.wait(tid, "onward", input=human("and now a sonnet"))
    assert again["messages"][-2] == {**again["messages"][-2], "content": "and now a sonnet"}
    assert "I cannot plan this goal" in again["messages"][-1]["content"]
    assert again["status"] == "done"
