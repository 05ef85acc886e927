"""Attacks on the assistant and run-control endpoints: a token holder cannot grant
themself approvals, tools or budget through an assistant, change the operator's, or reach
another user's assistants, runs and streams."""

from __future__ import annotations

import httpx
import pytest

from tests.support.security import VICTIM, auth, start
from tests.support.serve_api import chain


@pytest.mark.parametrize(
    "context",
    [
        {"policy": {"auto_approve": ["pay"]}},
        {"policy": {"confine_paths": False}},
        {"budget": {"max_replans": 99}},
        {"model_plans": "yes"},
        {"tools": ["os.system"]},
    ],
)
def test_an_assistant_made_over_http_cannot_be_looser_than_the_server(
    api: httpx.Client, context: dict[str, object]
) -> None:
    res = api.post("/assistants", json={"graph_id": "onward", "context": context})
    assert res.status_code in (403, 422), res.text
    assert [a["name"] for a in api.post("/assistants/search", json={}).json()] == ["onward"]


def test_the_operators_assistant_cannot_be_changed_or_deleted(api: httpx.Client) -> None:
    res = api.patch("/assistants/onward", json={"context": {"policy": {}}})
    assert res.status_code == 403
    assert api.delete("/assistants/onward").status_code == 403
    assert api.post("/assistants/onward/latest", json={"version": 1}).status_code == 403
    assert api.get("/assistants/onward").json()["version"] == 1


def test_another_users_assistant_is_not_found(api: httpx.Client) -> None:
    with httpx.Client(base_url=str(api.base_url), headers=auth(VICTIM), timeout=60) as alice:
        made = alice.post("/assistants", json={"graph_id": "onward", "name": "alice's"})
        assert made.status_code == 200, made.text
        aid = made.json()["assistant_id"]
    for res in (
        api.get(f"/assistants/{aid}"),
        api.patch(f"/assistants/{aid}", json={"name": "mine now"}),
        api.delete(f"/assistants/{aid}"),
        api.post(f"/assistants/{aid}/versions", json={}),
        api.get(f"/assistants/{aid}/schemas"),
    ):
        assert res.status_code == 404, res.text
    assert aid not in {a["assistant_id"] for a in api.post("/assistants/search", json={}).json()}
    tid = api.post("/threads", json={}).json()["thread_id"]
    res = api.post(f"/threads/{tid}/runs/wait", json={"assistant_id": aid, "input": chain("a")})
    assert res.status_code == 404


def test_another_users_runs_cannot_be_cancelled_joined_or_streamed(api: httpx.Client) -> None:
    with httpx.Client(base_url=str(api.base_url), headers=auth(VICTIM), timeout=60) as alice:
        tid, res = start(alice, chain("a"))
        assert res.status_code == 200
        (run,) = alice.get(f"/threads/{tid}/runs").json()
    rid = run["run_id"]
    for res in (
        api.post(f"/threads/{tid}/runs/{rid}/cancel"),
        api.get(f"/threads/{tid}/runs/{rid}/join"),
        api.get(f"/threads/{tid}/runs/{rid}/stream"),
        api.get(f"/threads/{tid}/stream"),
        api.delete(f"/threads/{tid}/runs/{rid}"),
        api.post("/runs/cancel", json={"thread_id": tid, "run_ids": [rid]}),
        api.post(f"/threads/{tid}/copy"),
        api.post(f"/threads/{tid}/runs", json={"assistant_id": "onward", "input": None}),
    ):
        assert res.status_code == 404, res.text
    # Cancelling "all running runs" reaches only the caller's own.
    assert api.post("/runs/cancel", json={"status": "all"}).status_code == 204
    with httpx.Client(base_url=str(api.base_url), headers=auth(VICTIM), timeout=60) as alice:
        assert alice.get(f"/threads/{tid}/runs/{rid}").json()["status"] == "success"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/assistants", {"graph_id": "onward", "owner": "alice"}),
        ("/assistants/search", {"owner": "alice"}),
        ("/runs/cancel", {"thread_id": "x", "run_ids": [], "force": True}),
        ("/threads/count", {"owner": "alice"}),
        ("/assistants", {"graph_id": "onward", "config": {"configurable": {"policy": {}}}}),
    ],
)
def test_unknown_fields_are_refused(api: httpx.Client, path: str, body: object) -> None:
    assert api.post(path, json=body).status_code == 422


def test_oversized_bodies_are_refused_before_they_are_read(api: httpx.Client) -> None:
    big = {"graph_id": "onward", "description": "x" * (5 * 1024 * 1024)}
    assert api.post("/assistants", json=big).status_code == 413


def test_cancel_asks_for_a_known_action_and_a_run_that_is_still_going(api: httpx.Client) -> None:
    tid, res = start(api, chain("a"))
    assert res.status_code == 200
    (run,) = api.get(f"/threads/{tid}/runs").json()
    base = f"/threads/{tid}/runs/{run['run_id']}/cancel"
    assert api.post(base, params={"action": "explode"}).status_code == 422
    assert api.post(base).status_code == 409  # it already ended: said so, not a silent 202
    assert (
        api.get(
            f"/threads/{tid}/runs/{run['run_id']}/stream", headers={"Last-Event-ID": "x"}
        ).status_code
        == 422
    )


def test_a_webhook_cannot_make_the_server_call_a_host_runs_may_not_reach(
    api: httpx.Client,
) -> None:
    tid = api.post("/threads", json={}).json()["thread_id"]
    for url in ("http://127.0.0.1:5432/", "file:///etc/passwd", "http://user@10.0.0.1/"):
        res = api.post(
            f"/threads/{tid}/runs/wait",
            json={"assistant_id": "onward", "input": chain("a"), "webhook": url},
        )
        assert res.status_code == 422, (url, res.text)
    assert api.get(f"/threads/{tid}/runs").json() == []


def test_a_busy_thread_queues_a_bounded_number_of_runs(api: httpx.Client) -> None:
    tid = api.post("/threads", json={}).json()["thread_id"]
    first = api.post(
        f"/threads/{tid}/runs", json={"assistant_id": "onward", "input": chain("a", seconds=3)}
    )
    assert first.status_code == 200
    codes = [
        api.post(f"/threads/{tid}/runs", json={"assistant_id": "onward", "input": None}).status_code
        for _ in range(17)
    ]
    assert codes == [200] * 16 + [429]
    assert api.post("/runs/cancel", json={"status": "all"}).status_code == 204
    statuses = {r["status"] for r in api.get(f"/threads/{tid}/runs", params={"limit": 100}).json()}
    assert "pending" not in statuses
