"""A thread's state as the server encodes it, joined from kept parts
(onward/serve/encoded.py): the same bytes as ``json.dumps`` of the state it shows, cold
and warm; what a checkpoint keeps is dropped when its values may change (a write at an
older checkpoint) and bounded; and a request that ends its run at once keeps its values
event as the checkpoint's reference, not the state (issue 39)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from onward import Onward
from onward.checkpointing import values as kept_values
from onward.checkpointing.values import CheckpointValues
from onward.serve.app import create_app
from onward.serve.encoded import dumps, kept_by, state_bytes
from onward.serve.wire import thread_state
from onward.store.database import Store
from tests.support.history_rows import thread_of
from tests.support.rolled_values import run


def test_a_state_joined_from_kept_parts_is_the_bytes_of_the_state_it_shows(
    db_url: str, workdir: Path
) -> None:
    with Onward(db_url) as ow:
        thread_id = run(ow, 12)
        snaps = list(ow.graph.get_state_history(ow._config(thread_id)))
        kept = kept_by(ow.store.saver)
        assert kept is not None
        plain = [dumps(thread_state(s)) for s in snaps]
        cold = [state_bytes(s, kept) for s in snaps]
        warm = [state_bytes(s, kept) for s in snaps]  # from each checkpoint's kept JSON
        again = list(ow.graph.get_state_history(ow._config(thread_id)))
        reread = [state_bytes(s, None) for s in again]  # from parts only
    assert len(snaps) > 20
    assert cold == plain
    assert warm == plain
    assert reread == plain
    assert json.loads(plain[0])["values"]["status"] == "done"


def test_a_write_at_an_older_checkpoint_drops_the_kept_json_of_later_ones() -> None:
    kept = CheckpointValues()
    for thread in ("t1", "t2"):
        for cid in ("c1", "c2", "c3"):
            kept.keep_text((thread, "", cid), f"{thread}{cid}".encode())
    kept.wrote("t1", "c1")  # rows saved at c1: c2 and c3 of t1 may read otherwise now
    assert kept.text(("t1", "", "c1")) == b"t1c1"
    assert kept.text(("t1", "", "c2")) is None
    assert kept.text(("t1", "", "c3")) is None
    assert kept.text(("t2", "", "c3")) == b"t2c3"  # another thread keeps its own
    kept.forget("t2")
    assert kept.text(("t2", "", "c1")) is None


def test_the_json_kept_per_checkpoint_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(kept_values, "TEXT_BYTES", 4000)
    kept = CheckpointValues()
    for i in range(100):
        kept.keep_text(("t", "", f"c{i:03}"), b"x" * 100)
    held = [i for i in range(100) if kept.text(("t", "", f"c{i:03}")) is not None]
    assert held == list(range(60, 100))  # the newest 4,000 bytes
    kept.keep_text(("t", "", "big"), b"x" * 2000)  # more than a quarter: not kept
    assert kept.text(("t", "", "big")) is None


def test_a_request_that_ends_its_run_keeps_its_values_as_a_reference(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    app = create_app(db, workdir=tmp_path, model=None, recover=False)
    with TestClient(app) as client:
        thread_id = thread_of(client, 20)
        ask = {"assistant_id": "onward", "input": {"messages": [{"type": "human", "content": "?"}]}}
        answer = client.post(f"/threads/{thread_id}/runs/wait", json=ask)
        assert answer.status_code == 200, answer.text
        state = client.get(f"/threads/{thread_id}/state").json()
        run_id = client.get(f"/threads/{thread_id}/runs").json()[0]["run_id"]
    assert answer.json() == state["values"]
    assert len(json.dumps(state["values"])) > 10_000
    store = Store(db)
    try:
        events = store.threads.events(run_id, 0, limit=100)
    finally:
        store.close()
    assert [len(json.dumps(e.data)) < 1_000 for e in events] == [True] * len(events)
    assert len(events) >= 2  # its metadata and its values


def test_a_thread_keeps_the_json_of_its_latest_streamed_supersteps_only(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(kept_values, "STREAMED", 2)
    kept = CheckpointValues()
    for cid in ("c1", "c2", "c3"):
        kept.keep_streamed(("t1", "", cid), cid.encode())
    kept.keep_streamed(("t2", "", "c1"), b"other")
    assert kept.text(("t1", "", "c1"), read=False) is None
    assert kept.text(("t1", "", "c2"), read=False) == b"c2"
    assert kept.text(("t1", "", "c3"), read=False) == b"c3"
    assert kept.text(("t2", "", "c1")) == b"other"  # another thread keeps its own
    assert kept.text(("t1", "", "c2")) == b"c2"  # a read uses it: later ones keep it
    kept.keep_streamed(("t1", "", "c4"), b"c4")
    kept.keep_streamed(("t1", "", "c5"), b"c5")
    assert kept.text(("t1", "", "c2")) == b"c2"
    assert kept.text(("t1", "", "c3"), read=False) is None
    assert kept.text(("t1", "", "c4"), read=False) == b"c4"
    kept.wrote("t1", "c2")  # rows saved at c2: the later c4, c5 may read otherwise now
    assert kept.text(("t1", "", "c4")) is None
    assert kept.text(("t1", "", "c5")) is None
    assert kept.text(("t1", "", "c2")) == b"c2"


def test_only_the_threads_that_streamed_last_keep_their_streamed_json(monkeypatch: Any) -> None:
    monkeypatch.setattr(kept_values, "STREAMING", 2)
    kept = CheckpointValues()
    kept.keep_streamed(("t1", "", "c1"), b"t1c1")
    kept.keep_streamed(("t1", "", "c2"), b"t1c2")
    assert kept.text(("t1", "", "c1")) == b"t1c1"  # read: no longer a streamed one
    kept.keep_streamed(("t2", "", "c1"), b"t2c1")
    kept.keep_streamed(("t1", "", "c3"), b"t1c3")  # t1 streamed last again
    kept.keep_streamed(("t3", "", "c1"), b"t3c1")  # three threads: t2's go
    assert kept.text(("t2", "", "c1"), read=False) is None
    assert [kept.text(("t1", "", c), read=False) for c in ("c1", "c2", "c3")] == [
        b"t1c1",
        b"t1c2",
        b"t1c3",
    ]
    assert kept.text(("t3", "", "c1"), read=False) == b"t3c1"


def test_the_state_read_as_a_streamed_run_ends_is_the_json_it_streamed_last(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    app = create_app(db, workdir=tmp_path, model=None, recover=False)
    with TestClient(app) as client:
        thread_id = client.post("/threads", json={}).json()["thread_id"]
        plan = {"steps": [{"id": f"s{i}", "tool": "noop", "args": {"value": i}} for i in range(3)]}
        ask = {"assistant_id": "onward", "input": {"goal": "g", "plan": plan}}
        with client.stream("POST", f"/threads/{thread_id}/runs/stream", json=ask) as stream:
            lines = [line for line in stream.iter_lines() if line.startswith("data: ")]
        streamed = [json.loads(line[len("data: ") :]) for line in lines[1:]]  # after metadata
        with Onward(db) as ow:  # the checkpoints, read by a store of its own
            page = list(ow.graph.get_state_history(ow._config(thread_id), limit=10))
        kept = app.state.serving.clients.kept()
        assert kept is not None
        keys = [(thread_id, "", s.config["configurable"]["checkpoint_id"]) for s in page]
        before_any_read = [kept.text(key) for key in keys]
        history = client.post(f"/threads/{thread_id}/history", json={"limit": 10}).json()
    assert streamed[-1]["status"] == "done"
    assert history[0]["values"] == streamed[-1]
    assert [h["checkpoint"]["checkpoint_id"] for h in history] == [k[2] for k in keys]
    # The run's supersteps as it streamed them, kept: the head, and most of the page
    # (a checkpoint whose values event was sent before it was named is not).
    assert before_any_read[0] is not None
    assert sum(text is not None for text in before_any_read) > len(history) // 2
    for text, answer in zip(before_any_read, history, strict=True):
        assert text is None or json.loads(text) == answer["values"]
