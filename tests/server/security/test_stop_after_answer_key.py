"""A client cannot make the server's drive stop after an answer: ``onward
approve --no-continue``'s flag (``onward_stop_after_answer`` in the drive's configurable)
is the driver's own. A run request that names it in ``config.configurable`` is a 422 that
says which keys a client may name, and changes nothing: the question still waits, and the
answer sent without it runs the approved call once and the run to its end."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client

from onward.errors import AnswerRecorded
from tests.support.common import read_jsonl
from tests.support.tool_calling_serve import PLAN, publishing_server


def test_a_clients_stop_after_answer_key_is_not_the_drives(db_url: str, workdir: Path) -> None:
    key = AnswerRecorded.CONFIG_KEY
    with publishing_server(db_url, workdir) as (url, _api):
        client = get_sync_client(url=url, api_key=None)
        tid = client.threads.create()["thread_id"]
        client.runs.wait(tid, "onward", input={"goal": "publish revenue", "plan": PLAN})
        waiting = client.threads.get_state(tid)
        for body in (
            {"command": {"resume": {"decisions": [{"type": "approve"}]}}},
            {"input": {"goal": "publish revenue", "plan": PLAN}},
        ):
            with pytest.raises(httpx.HTTPStatusError) as refused:
                client.runs.wait(tid, "onward", config={"configurable": {key: True}}, **body)
            assert refused.value.response.status_code == 422
            assert key in refused.value.response.json()["detail"]
        still = client.threads.get_state(tid)
        published_before = read_jsonl(workdir / "effects.jsonl")
        client.runs.wait(tid, "onward", command={"resume": {"decisions": [{"type": "approve"}]}})
        done = client.threads.get_state(tid)

    assert [i["value"]["action_requests"][0]["name"] for i in waiting["interrupts"]] == ["publish"]
    assert still["checkpoint"] == waiting["checkpoint"]
    assert still["interrupts"] == waiting["interrupts"]
    assert published_before == []
    assert done["values"]["status"] == "done"
    assert done["interrupts"] == []
    assert [e["title"] for e in read_jsonl(workdir / "effects.jsonl")] == ["Revenue up"]
