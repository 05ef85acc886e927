"""A streamed run's values JSON is kept for the read its own chat makes as the run ends
(onward.checkpointing.values.CheckpointValues.keep_streamed). Another token holder asking
for that thread right after, or for its checkpoint under a thread of their own, is refused
as before, gets none of it, and the owner's state is unchanged."""

from __future__ import annotations

import httpx

from tests.support.security import VICTIM, auth
from tests.support.serve_long import noop_chain

SECRET = "alice-only-goal-7311"


def test_another_users_read_as_a_run_ends_gets_none_of_its_kept_json(
    api: httpx.Client,
) -> None:
    alice = httpx.Client(base_url=str(api.base_url), headers=auth(VICTIM), timeout=60)
    with alice:
        tid = alice.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "onward", "input": {**noop_chain(3), "goal": SECRET}}
        streamed = alice.post(f"/threads/{tid}/runs/stream", json={**body, "stream_mode": "values"})
        assert streamed.status_code == 200
        assert SECRET in streamed.text
        head = alice.get(f"/threads/{tid}/state").json()
        checkpoint = head["checkpoint"]["checkpoint_id"]
        mine = api.post("/threads", json={}).json()["thread_id"]
        attacks = [
            api.get(f"/threads/{tid}/state"),
            api.get(f"/threads/{tid}/state/{checkpoint}"),
            api.post(f"/threads/{tid}/history", json={"limit": 10}),
            api.get(f"/threads/{tid}/history"),
            api.get(f"/threads/{mine}/state/{checkpoint}"),
            api.post(f"/threads/{mine}/history", json={"limit": 10, "before": head["checkpoint"]}),
        ]
        after = alice.get(f"/threads/{tid}/state").json()
    assert [r.status_code for r in attacks] == [404, 404, 404, 404, 404, 200]
    assert attacks[-1].json() == []  # a page of their own thread before it: nothing
    assert all(SECRET not in r.text for r in attacks)
    assert after == head
