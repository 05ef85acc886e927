"""Abusing the fields and paths whose gaps were closed, over a real ``onward serve`` with
tokens: a batch that fails part-way, resume tokens of the wrong type, "Mark as Resolved"
without a token, checkpoints the thread does not have, a cron bringing its own tools,
thread ids in other spellings, a run's ``config`` and ``context``, and the server's own
paths. Each asserts the refusal and that nothing changed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from onward import Onward
from tests.support.hitl_tools import rows
from tests.support.security import TOKENS, VICTIM, auth, start
from tests.support.serve import HITL_TOOLS, PAY_PLAN, payments, serve
from tests.support.serve_api import chain

PAY = {"goal": "pay bo", "plan": PAY_PLAN}


def wait(api: httpx.Client, tid: str, **body: Any) -> httpx.Response:
    return api.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "onward", **body})


def test_a_batch_whose_last_request_fails_starts_none_of_it(
    api: httpx.Client, workdir: Path
) -> None:
    kept = {"assistant_id": "onward", "on_completion": "keep"}
    bad = {**kept, "input": {"goal": "x", "plan": {"steps": [{"id": "s", "tool": "nope"}]}}}
    batch = [{**kept, "input": chain("a")}, {**kept, "input": chain("b")}, bad]
    res = api.post("/runs/batch", json=batch)
    assert res.status_code == 422, res.text
    assert "nope" in res.text
    assert api.post("/threads/search", json={}).json() == []
    assert api.get("/onward/runs").json() == []
    _tid, done = start(api, chain("z"))  # a run after it: only its own effect happens
    assert done.json()["status"] == "done"
    assert [r["label"] for r in rows(workdir, "calls.jsonl")] == ["z"]


@pytest.fixture
def secret_api(db_url: str, workdir: Path) -> Iterator[httpx.Client]:
    """A server with tokens and ``ONWARD_SECRET``: every answer needs a resume token."""
    with (
        serve(db_url, workdir, ONWARD_API_TOKENS=TOKENS, ONWARD_SECRET="s3cret") as url,
        httpx.Client(base_url=url, headers=auth(), timeout=60) as client,
    ):
        yield client


def still_asked(api: httpx.Client, tid: str, workdir: Path) -> dict[str, Any]:
    """The question still stands: nothing decided, paid or ended. Its pending view."""
    state = api.get(f"/threads/{tid}/state").json()
    assert len(state["interrupts"]) == 1
    assert state["values"]["decisions"] == []
    assert state["values"]["status"] == "running"
    assert api.get(f"/threads/{tid}").json()["status"] == "interrupted"
    assert payments(workdir) == []
    (pending,) = api.get(f"/onward/runs/{tid}").json()["pending"]
    return dict(pending)


def test_a_resume_token_that_is_not_a_string_is_a_422_naming_it(
    secret_api: httpx.Client, workdir: Path
) -> None:
    tid, _ = start(secret_api, PAY)
    iid = still_asked(secret_api, tid, workdir)["interrupt_id"]
    approve = {"decisions": [{"type": "approve"}]}
    for token in ({"a": 1}, 12345, ["t"], True):
        for resume in ({**approve, "token": token}, {iid: {**approve, "token": token}}):
            res = wait(secret_api, tid, command={"resume": resume})
            assert res.status_code == 422, (resume, res.text)
            assert "token must be a string" in res.json()["detail"]
            assert res.headers.get("connection") != "close"
    still_asked(secret_api, tid, workdir)


def test_ending_a_waiting_run_needs_a_resume_token_like_any_answer(
    secret_api: httpx.Client, workdir: Path
) -> None:
    tid, _ = start(secret_api, PAY)
    pending = still_asked(secret_api, tid, workdir)
    for command in (
        {"goto": "__end__"},
        {"goto": "__end__", "resume": {"token": "forged.token"}},
        {"goto": "__end__", "resume": {"token": 12345}},
        {"goto": "__end__", "resume": {"token": pending["token"], "decisions": []}},
    ):
        res = wait(secret_api, tid, command=command)
        assert res.status_code in (403, 422), (command, res.text)
        assert "token" in res.json()["detail"]
        still_asked(secret_api, tid, workdir)
    alice = auth(VICTIM)  # another user, even with mallory's token, cannot end it
    end = {"goto": "__end__", "resume": {"token": pending["token"]}}
    res = secret_api.post(
        f"/threads/{tid}/runs/wait",
        json={"assistant_id": "onward", "command": end},
        headers=alice,
    )
    assert res.status_code == 404
    still_asked(secret_api, tid, workdir)
    ended = wait(secret_api, tid, command=end)
    assert ended.status_code == 200, ended.text
    assert ended.json()["status"] == "cancelled"
    assert payments(workdir) == []


def test_a_checkpoint_the_thread_does_not_have_is_a_422_and_runs_nothing(
    api: httpx.Client, workdir: Path
) -> None:
    tid, _ = start(api, chain("a"))
    other, _ = start(api, chain("b"))
    theirs = api.get(f"/threads/{other}/state").json()["checkpoint_id"]
    history = api.post(f"/threads/{tid}/history", json={"limit": 100}).json()
    state = api.get(f"/threads/{tid}/state").json()
    for bad in (theirs, str(uuid.UUID(int=0)), "../../etc/passwd"):
        for body in (
            {"input": None, "checkpoint_id": bad},
            {"input": None, "checkpoint": {"checkpoint_id": bad}},
            {"input": None, "config": {"configurable": {"checkpoint_id": bad}}},
            {"input": {"messages": [{"type": "human", "content": "again"}]}, "checkpoint_id": bad},
        ):
            res = wait(api, tid, **body)
            assert res.status_code == 422, (body, res.text)
            assert "is not a checkpoint of thread" in res.json()["detail"]
        edit = {"values": {"messages": [{"type": "human", "content": "x"}]}, "checkpoint_id": bad}
        assert api.post(f"/threads/{tid}/state", json=edit).status_code == 422
    assert api.post(f"/threads/{tid}/history", json={"limit": 100}).json() == history
    assert api.get(f"/threads/{tid}/state").json() == state
    assert sorted(r["label"] for r in rows(workdir, "calls.jsonl")) == ["a", "b"]


def test_a_cron_or_a_run_cannot_bring_its_own_tools_or_workdir(
    api: httpx.Client, workdir: Path
) -> None:
    evil = str(workdir / "evil_tools.py")
    base = {"assistant_id": "onward", "schedule": "* * * * *"}
    for extra in ({"tool_modules": [evil]}, {"workdir": "/"}):
        body = {**base, "input": {**chain("a"), **extra}}
        res = api.post("/runs/crons", json=body)
        assert res.status_code == 422, res.text
        assert "cannot be set by a client" in res.json()["detail"]
        tid = api.post("/threads", json={}).json()["thread_id"]
        assert api.post(f"/threads/{tid}/runs/crons", json=body).status_code == 422
        run = wait(api, tid, input={**chain("a"), **extra})
        assert run.status_code == 422, run.text
        assert "server" in run.json()["detail"]
    made = api.post("/runs/crons", json={**base, "input": chain("a")}).json()
    patch = {"input": {**chain("a"), "tool_modules": [evil]}}
    assert api.patch(f"/runs/crons/{made['cron_id']}", json=patch).status_code == 422
    assert api.get(f"/runs/crons/{made['cron_id']}").json()["payload"]["input"] == chain("a")
    assert api.post("/runs/crons/count", json={}).json() == 1
    assert rows(workdir, "calls.jsonl") == []


def test_thread_ids_in_other_spellings_are_refused_and_reach_no_thread(
    api: httpx.Client,
) -> None:
    alice = auth(VICTIM)
    theirs = api.post("/threads", json={}, headers=alice).json()["thread_id"]
    mine = str(uuid.uuid4())
    arabic = mine.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    spellings = [mine.upper(), f"{{{mine}}}", f"urn:uuid:{mine}", mine.replace("-", "")]
    spellings += [arabic, theirs.upper(), f"urn:uuid:{theirs}"]
    for spelling in spellings:
        res = api.post("/threads", json={"thread_id": spelling})
        assert res.status_code == 422, (spelling, res.text)
        assert "canonical form" in res.json()["detail"]
        run = wait(api, spelling, input=chain("a"), if_not_exists="create")
        assert run.status_code == 422, (spelling, run.text)
        assert api.get(f"/threads/{spelling}").status_code == 404
    assert api.post("/threads/count", json={}).json() == 0
    assert api.post("/threads/count", json={}, headers=alice).json() == 1
    assert api.get(f"/threads/{theirs}", headers=alice).json()["status"] == "idle"


def test_a_runs_config_and_context_cannot_reach_another_thread_or_loosen_rules(
    api: httpx.Client, workdir: Path
) -> None:
    alice = auth(VICTIM)
    theirs = api.post("/threads", json={}, headers=alice).json()["thread_id"]
    tid, _ = start(api, PAY)
    attacks: list[dict[str, Any]] = [
        {"config": {"configurable": {"thread_id": theirs}}},
        {"config": {"configurable": {"checkpoint_ns": "x"}}},
        {"config": {"configurable": {"__pregel_checkpointer": "x"}}},
        {"config": {"recursion_limit": 10_000}},
        {"config": {"callbacks": ["x"]}},
        {"config": {"tags": "not-a-list"}},
        {"config": []},
        {"context": {"policy": {"auto_approve": ["pay"]}}},
        {"context": "x"},
    ]
    for attack in attacks:
        res = wait(api, tid, command={"resume": {"decisions": [{"type": "approve"}]}}, **attack)
        assert res.status_code == 422, (attack, res.text)
        stateless = api.post("/runs/wait", json={"assistant_id": "onward", "input": PAY, **attack})
        assert stateless.status_code == 422, (attack, stateless.text)
    state = api.get(f"/threads/{tid}/state").json()
    assert state["values"]["decisions"] == []
    assert payments(workdir) == []
    assert len(api.get(f"/threads/{tid}/runs").json()) == 1
    assert api.get(f"/threads/{theirs}/runs", headers=alice).json() == []
    assert api.post("/threads/count", json={}).json() == 1


def test_token_holders_never_see_the_servers_paths(
    api: httpx.Client, db_url: str, workdir: Path
) -> None:
    paths = [str(workdir), str(Path(HITL_TOOLS)), str(Path(HITL_TOOLS).parent)]
    tid = api.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "onward", "input": chain("a")}
    modes = ["values", "updates", "debug", "tasks", "checkpoints", "custom"]
    with api.stream(
        "POST", f"/threads/{tid}/runs/stream", json={**body, "stream_mode": modes}
    ) as s:
        streamed = s.read().decode()
    escape = {"steps": [{"id": "r", "tool": "read_file", "args": {"path": "../x"}}]}
    _other, failed = start(api, {"goal": "escape", "plan": escape})
    seen = [
        streamed,
        failed.text,
        api.get(f"/threads/{tid}/state").text,
        api.post(f"/threads/{tid}/history", json={}).text,
        api.get(f"/threads/{tid}").text,
        api.post("/threads/search", json={}).text,
        api.get(f"/onward/runs/{tid}").text,
        api.get(f"/onward/runs/{_other}").text,
    ]
    for text in seen:
        for path in paths:
            assert path not in text, (path, text[:300])
    state = api.get(f"/threads/{tid}/state").json()
    assert state["values"]["workdir"] == "(server workdir)"
    assert state["values"]["tool_modules"] == ["(server tools)/hitl_tools.py"]
    view = api.get(f"/onward/runs/{tid}").json()["view"]
    assert view["workdir"] == "(server workdir)"
    assert "(server workdir)" in json.dumps(api.get(f"/onward/runs/{_other}").json())
    with Onward(db_url) as ow:  # the operator's own views still show where runs work
        assert ow.get(tid).workdir == str(workdir)
        assert ow.state(tid).tool_modules == [HITL_TOOLS]


def test_a_token_holder_cannot_claim_a_run_started_outside_the_api_by_its_thread_id(
    api: httpx.Client, db_url: str, workdir: Path
) -> None:
    """``POST /threads`` with the id of a run started by the CLI or Python (no API row) is
    a 404 and makes no thread: only an id the server makes itself goes unlooked-up."""
    with Onward(db_url) as ow:
        theirs = ow.start(plan={"steps": [{"id": "a", "tool": "noop"}]}, workdir=workdir)
        before = ow.store.get_run(theirs)
    for body in ({"thread_id": theirs}, {"thread_id": theirs, "if_exists": "do_nothing"}):
        res = api.post("/threads", json=body)
        assert res.status_code == 404, res.text
    assert api.get(f"/threads/{theirs}").status_code == 404
    assert api.post("/threads/count", json={}).json() == 0
    made = api.post("/threads", json={})
    assert made.status_code == 200
    assert made.json()["status"] == "idle"
    with Onward(db_url) as ow:
        assert ow.store.threads.get(theirs) is None
        assert ow.store.get_run(theirs) == before
