"""A thread after ``runs.cancel`` reads as stopped, in what chat UIs render.

agent-chat-ui and ``useStream`` (``@langchain/langgraph-sdk``'s ``extractInterrupts``)
show a thread's interrupt from the head state: a task's ``interrupts``, else, when
``next`` is not empty and there is no error, a "Human Interrupt — when: breakpoint" box.
After a cancel the thread has no question (the one answered before stays answered) and
nothing pending (``next`` empty): its last message says the run was stopped and which
steps did not run; a later run with no input goes on from there, each effect once.
``langgraph dev`` leaves ``next`` naming the node it cut off (a breakpoint box).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from langgraph_sdk import get_sync_client

from tests.support.hitl_tools import rows
from tests.support.serve import serve

PAY_THEN_RECORD = {
    "goal": "pay bob, then record r and r2",
    "plan": {
        "steps": [
            {"id": "p", "tool": "pay", "args": {"amount": 5, "to": "bob"}},
            {
                "id": "r",
                "tool": "record",
                "args": {"label": "r", "seconds": 2},
                "depends_on": ["p"],
            },
            {"id": "r2", "tool": "record", "args": {"label": "r2"}, "depends_on": ["r"]},
        ]
    },
}


def ui_interrupt(state: dict[str, Any]) -> Any:
    """What ``useStream``'s ``interrupt`` shows for a thread opened on this head state
    (``extractInterrupts`` with no values ``__interrupt__`` and no stream error)."""
    interrupts = [i for t in state["tasks"] for i in t["interrupts"]]
    if interrupts:
        return interrupts[-1]
    return {"when": "breakpoint"} if state["next"] else None


def wait_for_calls(workdir: Path, n: int) -> None:
    deadline = time.monotonic() + 60
    while len(rows(workdir, "calls.jsonl")) < n:
        assert time.monotonic() < deadline, "the step did not start"
        time.sleep(0.05)


def test_a_thread_cancelled_after_its_approval_shows_no_card_and_goes_on_later(
    db_url: str, workdir: Path
) -> None:
    with serve(db_url, workdir) as url:
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "onward", input=PAY_THEN_RECORD)
        asked = client.threads.get_state(tid)
        assert ui_interrupt(asked)["value"]["action_requests"][0]["name"] == "pay"

        run = client.runs.create(
            tid, "onward", command={"resume": {"decisions": [{"type": "approve"}]}}
        )
        wait_for_calls(workdir, 1)  # r is running
        client.runs.cancel(tid, run["run_id"], wait=True)

        assert client.runs.get(tid, run["run_id"])["status"] == "interrupted"
        thread = client.threads.get(tid)
        assert thread["status"] == "idle"
        assert thread["interrupts"] == {}
        head = client.threads.get_state(tid)
        assert head["next"] == []
        assert head["tasks"] == []
        assert ui_interrupt(head) is None  # neither the answered card nor a breakpoint box
        # A reopened thread (history, as agent-chat-ui fetches it) reads the same.
        assert ui_interrupt(client.threads.get_history(tid, limit=10)[0]) is None
        last = head["values"]["messages"][-1]
        assert last["type"] == "ai"
        assert "cancelled" in last["content"]
        assert "r2" in last["content"]
        # The step that was running finished and shows before the note; r2 did not run.
        assert [m.get("name") for m in head["values"]["messages"] if m["type"] == "tool"] == [
            "pay",
            "record",
        ]
        time.sleep(2.5)  # longer than a step: nothing more runs
        assert [r["label"] for r in rows(workdir, "calls.jsonl")] == ["r"]

        values = client.runs.wait(tid, "onward", input=None)
        assert values["status"] == "done"
        assert [r["label"] for r in rows(workdir, "effects.jsonl")] == ["r", "r2"]
        assert len(rows(workdir, "payments.jsonl")) == 1
        assert client.threads.get_state(tid)["next"] == []


def test_a_cancelled_thread_reads_as_stopped_from_the_cli_and_resumes(
    db_url: str, workdir: Path, run_cli: Any
) -> None:
    plan = {
        "goal": "record a b c",
        "plan": {
            "steps": [
                {"id": x, "tool": "record", "args": {"label": x, "seconds": 1.5}}
                | ({"depends_on": [p]} if p else {})
                for x, p in (("a", None), ("b", "a"), ("c", "b"))
            ]
        },
    }
    with serve(db_url, workdir) as url:
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        run = client.runs.create(tid, "onward", input=plan)
        wait_for_calls(workdir, 1)
        client.runs.cancel(tid, run["run_id"], wait=True)
    status = run_cli("status", tid)
    assert status.code == 0, status.stderr
    assert "suspended" in status.stdout
    assert "Stopped: the run was cancelled; 2 step(s) did not run (b, c)" in status.stdout
    assert f"onward resume {tid}` goes on" in status.stdout
    resumed = run_cli("resume", tid)
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert [r["label"] for r in rows(workdir, "effects.jsonl")] == ["a", "b", "c"]
