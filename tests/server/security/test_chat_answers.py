"""Abusing the chat's answers: a wave's batched decisions, follow-up messages and "Mark as
Resolved" over a real ``onward serve`` with tokens. Each attack is refused with a 4xx that
says why, and nothing happens: no payment, no decision, the question still stands."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.security import VICTIM, auth, start
from tests.support.serve import payments

WAVE = {
    "goal": "pay two",
    "plan": {
        "steps": [
            {"id": "a", "tool": "pay", "args": {"amount": 5, "to": "ann"}},
            {"id": "b", "tool": "pay", "args": {"amount": 7, "to": "bo"}},
            {"id": "later", "tool": "pay", "args": {"amount": 9, "to": "eve"}, "depends_on": ["a"]},
        ]
    },
}


def answer(api: httpx.Client, tid: str, command: dict[str, Any], token: str | None = None) -> Any:
    headers = auth(token) if token else None
    body = {"assistant_id": "onward", "command": command}
    return api.post(f"/threads/{tid}/runs/wait", json=body, headers=headers)


def unchanged(api: httpx.Client, tid: str, workdir: Any, token: str | None = None) -> None:
    """The wave is still asked, whole, and nothing was decided or paid."""
    state = api.get(f"/threads/{tid}/state", headers=auth(token) if token else None).json()
    [interrupt] = state["interrupts"]
    assert [a["args"]["to"] for a in interrupt["value"]["action_requests"]] == ["ann", "bo"]
    assert state["values"]["decisions"] == []
    assert payments(workdir) == []


def test_a_client_cannot_answer_or_end_another_users_wave(api: httpx.Client, workdir: Any) -> None:
    victim = httpx.Client(base_url=str(api.base_url), headers=auth(VICTIM), timeout=60)
    tid, res = start(victim, WAVE)
    assert res.status_code == 200, res.text
    both = {"resume": {"decisions": [{"type": "approve"}, {"type": "approve"}]}}
    assert answer(api, tid, both).status_code == 404
    assert answer(api, tid, {"goto": "__end__"}).status_code == 404
    follow = {"assistant_id": "onward", "input": {"messages": [{"type": "human", "content": "x"}]}}
    assert api.post(f"/threads/{tid}/runs/wait", json=follow).status_code == 404
    unchanged(api, tid, workdir, VICTIM)


def test_decisions_for_steps_not_asked_are_refused(api: httpx.Client, workdir: Any) -> None:
    tid, _ = start(api, WAVE)
    iid = api.get(f"/threads/{tid}/state").json()["interrupts"][0]["id"]
    # "later" is not asked yet (it waits for "a"): no decision can be smuggled in for it.
    smuggled = {"decisions": [{"type": "approve"}], "targets": ["later"]}
    res = answer(api, tid, {"resume": smuggled})
    assert res.status_code == 422
    assert "not asked: 'later'" in res.text
    # Three decisions for a wave of two, keyed or not: the third would be for nobody.
    three = {"decisions": [{"type": "approve"}] * 3}
    for resume in (three, {iid: three}):
        res = answer(api, tid, {"resume": resume})
        assert res.status_code == 422
        assert "asks about 2 actions (a, b)" in res.text
    # An interrupt id that is not pending is no key: the map is one (wrong) answer.
    assert answer(api, tid, {"resume": {"forged-id": three}}).status_code == 422
    unchanged(api, tid, workdir)


def test_an_oversized_decision_list_is_bounded(api: httpx.Client, workdir: Any) -> None:
    tid, _ = start(api, WAVE)
    many = {"decisions": [{"type": "approve"}] * 5000}
    res = answer(api, tid, {"resume": many})
    assert res.status_code in (413, 422)
    assert "at most 256 decisions" in res.text or res.status_code == 413
    unchanged(api, tid, workdir)


def test_goto_anywhere_but_the_end_is_refused(api: httpx.Client, workdir: Any) -> None:
    tid, _ = start(api, WAVE)
    for goto in ("execute", "finalize", ["execute"], {"node": "execute"}):
        res = answer(api, tid, {"goto": goto})
        assert res.status_code == 422
        assert 'only "__end__"' in res.json()["detail"]
    res = answer(api, tid, {"goto": "__end__", "resume": {"decisions": []}})
    assert res.status_code == 422
    unchanged(api, tid, workdir)


def test_a_follow_up_cannot_carry_a_plan_or_a_looser_policy(
    api: httpx.Client, workdir: Any
) -> None:
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")
    human = [{"type": "human", "content": "copy every file in inbox/ to archive/"}]
    tid, res = start(api, {"messages": human})
    assert res.json()["status"] == "done"
    for extra in ({"plan": WAVE["plan"]}, {"policy": {"auto_approve": ["pay"]}}):
        body = {"assistant_id": "onward", "input": {"messages": human, **extra}}
        res = api.post(f"/threads/{tid}/runs/wait", json=body)
        assert res.status_code == 422
        assert "not taken by a follow-up" in res.text
    state = api.get(f"/threads/{tid}/state").json()["values"]
    assert state["plan"]["version"] == 1
    assert payments(workdir) == []


COPY = "copy every file in inbox/ to archive/"


def message(text: str) -> dict[str, Any]:
    return {"messages": [{"type": "human", "content": text}]}


def first_checkpoint(client: httpx.Client, tid: str) -> dict[str, Any]:
    history = client.post(f"/threads/{tid}/history", json={"limit": 500}).json()
    root: dict[str, Any] = history[-1]["checkpoint"]
    return root


def test_a_client_cannot_fork_another_users_thread_by_editing_its_first_message(
    api: httpx.Client, workdir: Any
) -> None:
    victim = httpx.Client(base_url=str(api.base_url), headers=auth(VICTIM), timeout=60)
    tid, res = start(victim, WAVE)
    assert res.status_code == 200, res.text
    root = first_checkpoint(victim, tid)  # leaked to the attacker, say
    body = {"assistant_id": "onward", "input": message(COPY), "checkpoint": root}
    assert api.post(f"/threads/{tid}/runs/wait", json=body).status_code == 404
    unchanged(api, tid, workdir, VICTIM)
    history = victim.post(f"/threads/{tid}/history", json={"limit": 500}).json()
    assert all(m["content"] != COPY for h in history for m in h["values"].get("messages", []))


def test_an_edited_first_message_keeps_the_first_runs_policy_and_takes_no_new_one(
    api: httpx.Client, workdir: Any
) -> None:
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")
    careful = {**message(COPY), "policy": {"approve_tools": ["copy_file"]}}
    tid, res = start(api, careful)
    assert res.json()["__interrupt__"], res.text  # the first run asks before copying
    root = first_checkpoint(api, tid)
    edited = message("copy every file in inbox/ to elsewhere/")
    # The edit may not bring a policy of its own (it could loosen the first one's).
    loosen = {**edited, "policy": {"approve_tools": []}}
    body = {"assistant_id": "onward", "input": loosen, "checkpoint": root}
    refused = api.post(f"/threads/{tid}/runs/wait", json=body)
    assert refused.status_code == 422
    assert "policy" in refused.text
    # The edit alone forks from the start under the first request's policy: it asks too.
    body = {"assistant_id": "onward", "input": edited, "checkpoint": root}
    forked = api.post(f"/threads/{tid}/runs/wait", json=body)
    assert forked.status_code == 200, forked.text
    [question] = forked.json()["__interrupt__"]
    assert question["value"]["action_requests"][0]["args"]["dst"].startswith("elsewhere/")
    assert not (workdir / "elsewhere").exists()
    assert not (workdir / "archive").exists()


def test_a_client_cannot_copy_another_users_finished_thread(
    api: httpx.Client, workdir: Any
) -> None:
    victim = httpx.Client(base_url=str(api.base_url), headers=auth(VICTIM), timeout=60)
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("A")
    tid, res = start(victim, message(COPY))
    assert res.json()["status"] == "done", res.text
    assert api.post(f"/threads/{tid}/copy").status_code == 404
    assert api.post("/threads/search", json={}).json() == []  # the attacker got no thread
    mine = victim.post(f"/threads/{tid}/copy")
    assert mine.status_code == 200  # its owner can
    assert api.get(f"/threads/{mine.json()['thread_id']}").status_code == 404
