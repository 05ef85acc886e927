"""What a served ``runs.wait`` adds per superstep, counted (issue 39): nothing that grows
with the run but the stream events' numbers.

A 1,000-step ``runs.wait`` cost about twice the wall of the same plan through
``Onward.run``: its feed kept each superstep's values event in its own transaction. Now,
for runs of 5 and 40 steps, the same counts: the events are kept in the same number of
store transactions (the writer's batches, :data:`~onward.serve.feed.KEEP_EVERY` set
longer than the run), the state is encoded as JSON once (the answer), and the graph is
asked for the stream modes the drive needs (``values``, and ``checkpoints`` to name each
values event's checkpoint), whatever the run's length.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from onward.client import Onward
from onward.serve import encoded, feed, states
from onward.serve.app import create_app
from onward.store.runs import Threads
from tests.support.history_rows import settled
from tests.support.serve_long import noop_chain


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    monkeypatch.setattr(feed, "KEEP_EVERY", 3600.0)  # no batch boundary set by the clock
    monkeypatch.setenv("ONWARD_CRON_TICK", "1h")

    def counting(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    real_modes = Onward.stream_modes

    def stream_modes(self: Onward, thread_id: str, modes: Any, **kw: Any) -> Any:
        counts["modes:" + ",".join(modes)] += 1
        return real_modes(self, thread_id, modes, **kw)

    monkeypatch.setattr(Onward, "stream_modes", stream_modes)
    monkeypatch.setattr(Threads, "add_events", counting("add_events", Threads.add_events))
    made = counting("values_bytes", encoded.values_bytes)
    monkeypatch.setattr(encoded, "values_bytes", made)
    monkeypatch.setattr(states, "values_bytes", made)
    return counts


def one_wait(client: TestClient, steps: int) -> tuple[int, Any]:
    thread_id = client.post("/threads", json={}).json()["thread_id"]
    body = {"assistant_id": "onward", "input": noop_chain(steps)}
    answer = client.post(f"/threads/{thread_id}/runs/wait", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "done"
    settled(client)
    run_id = client.get(f"/threads/{thread_id}/runs").json()[0]["run_id"]
    return len(answer.json()["plan"]["steps"]), run_id


def test_a_served_run_adds_the_same_per_run_work_whatever_its_length(
    tmp_path: Path, counted: Counter[str]
) -> None:
    app = create_app(f"sqlite:///{tmp_path / 'wait.db'}", workdir=tmp_path, recover=False)
    per_run: dict[int, Counter[str]] = {}
    with TestClient(app) as client:
        one_wait(client, 2)  # the server's clients are made
        for steps in (5, 40):
            counted.clear()
            done, run_id = one_wait(client, steps)
            assert done == steps
            per_run[steps] = Counter(counted)
            with app.state.serving.clients.use() as ow:
                kept = ow.store.threads.events(run_id, 0, 10_000)
            per_run[steps]["events"] = len(kept)
    short, long = per_run[5], per_run[40]
    assert long["events"] > short["events"] + 35  # a values event per superstep, kept
    assert long["add_events"] == short["add_events"] <= 3  # in as many transactions
    assert long["values_bytes"] == short["values_bytes"] <= 1  # the answer's state only
    modes = {k: v for k, v in long.items() if k.startswith("modes:")}
    assert modes == {"modes:checkpoints,values": 1}
    assert {k: v for k, v in short.items() if k.startswith("modes:")} == modes


def test_step_messages_are_made_once_per_record_and_the_same_as_the_conversation(
    ow: Onward, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``messages-tuple`` stream's step messages: the same as those new in each
    chunk's whole conversation (onward.observe.chat), with a step's pair made again only
    when its record changed: 210 steps (past the 200 pairs a goal shows) make about two
    pairs a step, not the whole conversation each superstep (~120 pairs a chunk)."""
    from onward.observe.chat import STEP_MESSAGE_PREFIX
    from onward.serve import drives
    from onward.serve.wire import conversation_of, jsonable

    thread_id = ow.start("long", plan=noop_chain(210)["plan"], policy=_any_size())
    chunks = [d for mode, d in ow.stream_modes(thread_id, ["values"]) if mode == "values"]

    class Out:
        def __init__(self) -> None:
            self.items: list[Any] = []

        def put(self, item: Any) -> None:
            self.items.append(item)

    expected, seen = Out(), None
    for chunk in chunks:  # every chunk's whole conversation, the new step messages put
        messages = conversation_of(chunk)
        if seen is None:
            seen = {m.id for m in messages if m.id}
            continue
        for m in messages:
            if m.id and m.id not in seen and m.id.startswith(STEP_MESSAGE_PREFIX):
                seen.add(m.id)
                expected.put(("messages", [jsonable(m), {"langgraph_node": "verify"}]))

    made = Counter[str]()
    real = drives.step_pair

    def step_pair(*args: Any) -> Any:
        made["pairs"] += 1
        return real(*args)

    monkeypatch.setattr(drives, "step_pair", step_pair)
    got, messages = Out(), drives.StepMessages()
    for chunk in chunks:
        messages.take(got, chunk)  # type: ignore[arg-type]
    assert len(expected.items) > 200
    assert got.items == expected.items
    assert made["pairs"] <= 2 * 210 + 10


def _any_size() -> Any:
    from onward import RunPolicy

    return RunPolicy(max_plan_steps=1000)
