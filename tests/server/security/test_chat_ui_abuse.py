"""Abuse of what agent-chat-ui's fixes changed: the thread search's ``graph_id`` read as an
assistant's name, and an escalation card's title sent back as an edit's tool name. Each
request is one an attacker with a valid token could send; each asserts the refusal (or
the empty answer) and that nothing changed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.hitl_tools import rows
from tests.support.security import TOKENS, VICTIM, auth
from tests.support.serve import payments, serve

CONFIG = "assistants:\n  onward: {}\n  fast: {budget: {max_steps: 40}}\n"


@pytest.fixture
def api(db_url: str, workdir: Path) -> Iterator[httpx.Client]:
    config = workdir.parent / "serve.yaml"
    config.write_text(CONFIG)
    with (
        serve(db_url, workdir, "--config", str(config), ONWARD_API_TOKENS=TOKENS) as url,
        httpx.Client(base_url=url, headers=auth(), timeout=60) as client,
    ):
        yield client


def test_a_search_by_an_assistants_name_lists_only_the_callers_threads(
    api: httpx.Client, workdir: Path
) -> None:
    tid = api.post("/threads", json={}, headers=auth(VICTIM)).json()["thread_id"]
    run = {
        "assistant_id": "fast",
        "input": {
            "goal": "note",
            "plan": {"steps": [{"id": "a", "tool": "slow", "args": {"value": 1}}]},
        },
    }
    api.post(f"/threads/{tid}/runs/wait", json=run, headers=auth(VICTIM)).raise_for_status()
    before = api.get(f"/threads/{tid}", headers=auth(VICTIM)).json()
    fast = next(a for a in api.post("/assistants/search", json={}).json() if a["name"] == "fast")
    for metadata in (
        {"graph_id": "fast"},
        {"graph_id": "fast", "assistant_id": fast["assistant_id"]},
        {"assistant_id": fast["assistant_id"]},
        {"graph_id": "onward"},
    ):
        found = api.post("/threads/search", json={"metadata": metadata, "limit": 100})
        assert found.status_code == 200
        assert found.json() == []  # alice's thread is not mallory's to list
        assert api.post("/threads/count", json={"metadata": metadata}).json() == 0
    # A contradictory filter matches nothing, even for the owner.
    other = {"graph_id": "fast", "assistant_id": "not-fast"}
    mine = api.post("/threads/search", json={"metadata": other}, headers=auth(VICTIM)).json()
    assert mine == []
    assert api.get(f"/threads/{tid}", headers=auth(VICTIM)).json() == before


def test_an_edit_named_like_a_card_of_another_tool_is_refused_and_changes_nothing(
    api: httpx.Client, workdir: Path
) -> None:
    plan = {"steps": [{"id": "a", "tool": "deliver", "args": {"label": "a"}}]}
    tid = api.post("/threads", json={}).json()["thread_id"]
    out = api.post(
        f"/threads/{tid}/runs/wait",
        json={"assistant_id": "onward", "input": {"goal": "deliver", "plan": plan}},
    ).json()
    [action] = out["__interrupt__"][0]["value"]["action_requests"]
    forged = action["name"].replace("deliver (step a)", "pay (step a)")
    state = api.get(f"/threads/{tid}/state").json()

    def edit(name: str, args: dict[str, Any]) -> httpx.Response:
        decision = {"type": "edit", "edited_action": {"name": name, "args": args}}
        body = {"assistant_id": "onward", "command": {"resume": {"decisions": [decision]}}}
        return api.post(f"/threads/{tid}/runs/wait", json=body)

    assert edit(forged, {"amount": 5, "to": "mallory"}).status_code == 422
    assert edit(action["name"] + " ", {"label": "b"}).status_code == 422
    assert api.get(f"/threads/{tid}/state").json()["checkpoint"] == state["checkpoint"]
    assert api.get(f"/threads/{tid}").json()["status"] == "interrupted"
    assert payments(workdir) == []
    assert rows(workdir, "deliveries.jsonl") == []
