"""Long runs through ``onward serve`` and the unmodified ``langgraph_sdk`` (both backends):
the stream events a run keeps in the store are bounded by what changed in their
superstep (a values event is kept as its checkpoint's reference, not as the state), and a
client that resumes a ``values`` or an ``updates`` stream with ``Last-Event-ID`` (from the
server that drives it, or from another one reading the store) gets exactly the events a
live client got."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk import get_sync_client

from onward.store.database import Store
from tests.support.serve import serve
from tests.support.serve_durable import servers, sse
from tests.support.serve_long import noop_chain

Event = tuple[str | None, str, Any]
"""(SSE id, event name, data)."""


def stream_live(url: str, thread_id: str, body: dict[str, Any]) -> tuple[str, list[Event]]:
    """``runs.stream`` read with its SSE ids: (run id, events)."""
    got: list[Event] = []
    block: dict[str, str] = {}
    with (
        httpx.Client(base_url=url, timeout=120) as http,
        http.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as res,
    ):
        assert res.status_code == 200, res.read()
        run_id = res.headers["Content-Location"].rsplit("/", 1)[-1]
        for line in res.iter_lines():
            if line.startswith(("id: ", "event: ", "data: ")):
                key, _sep, value = line.partition(": ")
                block[key] = value
            if not line and "event" in block:
                got.append((block.get("id"), block["event"], json.loads(block.get("data", "null"))))
                block = {}
    return run_id, got


def stored_bytes(db_url: str, run_id: str) -> list[int]:
    """The JSON bytes of each stream event the store keeps for a run."""
    store = Store(db_url)
    try:
        events = store.threads.events(run_id, 0, limit=100_000)
    finally:
        store.close()
    return [len(json.dumps(e.data)) for e in events]


def run_steps(url: str, n: int, modes: list[str]) -> tuple[str, str, list[Event]]:
    client = get_sync_client(url=url, api_key=None)
    thread_id = client.threads.create()["thread_id"]
    body = {"assistant_id": "onward", "input": noop_chain(n), "stream_mode": modes}
    run_id, live = stream_live(url, thread_id, body)
    state: Any = client.threads.get_state(thread_id)
    assert state["values"]["status"] == "done"
    return thread_id, run_id, live


def test_stored_stream_events_per_step_stay_flat_and_far_below_the_state(
    db_url: str, workdir: Path
) -> None:
    modes = ["values", "updates", "messages-tuple"]
    with serve(db_url, workdir) as url:
        _short_thread, short_run, short_live = run_steps(url, 20, modes)
        long_thread, long_run, long_live = run_steps(url, 80, modes)
        state: Any = get_sync_client(url=url, api_key=None).threads.get_state(long_thread)
    state_bytes = len(json.dumps(state["values"]))
    short, long = stored_bytes(db_url, short_run), stored_bytes(db_url, long_run)
    assert len(long) == len(long_live)
    assert len(short) == len(short_live)
    per_step_short, per_step_long = sum(short) / 20, sum(long) / 80
    assert per_step_long < 1.5 * per_step_short
    # The live values stream sent the state after every superstep; the store keeps none.
    assert max(long) < state_bytes / 10
    assert sum(long) < 2 * state_bytes
    live_values = [len(json.dumps(d)) for _i, e, d in long_live if e == "values"]
    assert max(live_values) > state_bytes / 2


def test_a_resumed_values_or_updates_stream_gets_exactly_what_the_live_stream_got(
    db_url: str, workdir: Path
) -> None:
    """Long enough that the feed keeps only the newest values chunks in memory: the older
    ones are made again from their checkpoints, here and on a server reading the store."""
    with servers(db_url, workdir, 2) as [(_p, url), (_q, other)]:
        thread_id, run_id, live = run_steps(url, 90, ["values", "updates"])
        assert len(live) > 300
        path = f"/threads/{thread_id}/runs/{run_id}/stream"
        for cut in (1, 5, len(live) // 2, len(live) - 3):
            after = live[cut - 1][0]
            assert after is not None
            wanted = [e for e in live[cut:] if e[1] != "metadata"]
            for base in (url, other):
                again = [e for e in sse(base, path, after) if e[1] != "metadata"]
                assert again == wanted, (base, cut)
            values_only = sse(other, path + "?stream_mode=values", after)
            assert values_only == [e for e in wanted if e[1] == "values"]
