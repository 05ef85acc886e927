"""``onward serve`` side by side with the reference server: the same ``langgraph_sdk`` calls
(tests/support/sdk_parity.py) against ``langgraph dev`` serving a tiny plain LangGraph graph with
one approval question (tests/support/parity_graph.py) and against ``onward serve`` with a one-step
payment plan, both answered by agent-chat-ui's unkeyed decisions. The responses' shapes
(keys and JSON types of assistants, threads, runs, states, tasks, interrupts, history) and
the stream's event names must match, so drift from LangGraph Server is caught. Everything
is on loopback: ``langgraph dev`` runs with ``--no-browser``, no reload, no analytics and
no LangSmith, in-memory."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.common import cli_env
from tests.support.hitl_tools import rows
from tests.support.langgraph_dev import free_port, plain_text
from tests.support.paths import SUPPORT
from tests.support.sdk_parity import differences, observe
from tests.support.serve import serve

GRAPH = SUPPORT / "parity_graph.py"
PAY = {"steps": [{"id": "pay", "tool": "pay", "args": {"amount": 5, "to": "bo"}}]}
ANSWER = {"decisions": [{"type": "approve"}]}

KNOWN: dict[str, str] = {
    ".runs.list.kwargs": "the reference's internal run arguments (not in the SDK's Run type)",
    ".runs.get.kwargs": "the same",
    ".runs.create.kwargs": "the same",
    ".runs.list.langsmith_session_name": "LangSmith's (onward runs offline, without it)",
    ".runs.get.langsmith_session_name": "the same",
    ".runs.create.langsmith_session_name": "the same",
    ".runs.stream interrupt update.__interrupt__[0].response_schema": (
        "null in the reference; onward streams LangGraph's Interrupt as it is (value, id)"
    ),
}
"""Drift known and accepted (a path in the shapes → why); anything else fails."""
KNOWN_FACTS: dict[str, tuple[Any, Any]] = {
    "runs.join_stream events": ([], ["metadata", "values"]),
}
"""Facts that differ, as (reference, onward). A finished run joined by stream: the
reference streams nothing, onward replays the feed it still holds (a reloaded page gets
the final state). (A run that stops at a question is "success" on both, its thread
"interrupted": the facts "run status waiting" and "run statuses" must be equal.)"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """What the reference server answers, observed once per module."""
    import subprocess
    import time

    import httpx

    here = tmp_path_factory.mktemp("reference")
    shutil.copy(GRAPH, here / "parity_graph.py")
    (here / "langgraph.json").write_text(
        '{"dependencies": ["."], "graphs": {"agent": "./parity_graph.py:graph"}}'
    )
    langgraph = shutil.which("langgraph", path=str(Path(sys.executable).parent))
    assert langgraph, "langgraph-cli[inmem] is part of the dev extra"
    port = free_port()
    env = cli_env(
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        LANGGRAPH_NO_VERSION_CHECK="true",
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
    )
    for key in ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "LANGSMITH_ENDPOINT"):
        env.pop(key, None)
    log = here / "langgraph-dev.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                *(langgraph, "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"),
                *("--port", str(port), "--config", str(here / "langgraph.json")),
            ],
            cwd=here,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, plain_text(log)[-4000:]
            assert time.monotonic() < deadline, "langgraph dev did not start"
            time.sleep(0.25)
        human = {"messages": [{"type": "human", "content": "pay bo"}]}
        yield observe(url, "agent", human, ANSWER)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture
def onward(db_url: str, workdir: Path) -> dict[str, Any]:
    with serve(db_url, workdir) as url:
        seen = observe(url, "onward", {"goal": "pay bo", "plan": PAY}, ANSWER)
    assert [p["to"] for p in rows(workdir, "payments.jsonl")] == ["bo"]  # it did answer
    return seen


def known_as(drift: str, key: str) -> bool:
    path = drift.split(":")[0]
    return path == key or path.startswith((key + ".", key + "["))


def known(drift: str) -> bool:
    return any(known_as(drift, k) for k in KNOWN)


def test_onward_answers_the_sdk_calls_in_the_reference_servers_shapes(
    reference: dict[str, Any], onward: dict[str, Any]
) -> None:
    found = differences(reference["shapes"], onward["shapes"])
    assert [d for d in found if not known(d)] == []
    stale = [k for k in KNOWN if not any(known_as(d, k) for d in found)]
    assert stale == [], "no longer drift: remove from KNOWN"
    # The shapes compared are not empty: the calls returned something to compare.
    assert reference["shapes"]["threads.get_state waiting"]["interrupts"] != []
    assert set(reference["shapes"]["interrupt value"]) >= {"action_requests", "review_configs"}


def test_onward_and_the_reference_agree_on_statuses_events_and_the_question(
    reference: dict[str, Any], onward: dict[str, Any]
) -> None:
    for fact, (theirs, ours) in KNOWN_FACTS.items():
        assert (reference["facts"][fact], onward["facts"][fact]) == (theirs, ours)
    same = {k: v for k, v in onward["facts"].items() if k not in KNOWN_FACTS}
    assert same == {k: v for k, v in reference["facts"].items() if k not in KNOWN_FACTS}
    assert reference["facts"]["thread status waiting"] == "interrupted"
    assert reference["facts"]["run status waiting"] == "success"
    assert reference["facts"]["interrupts asked"] == 1


def test_the_shape_comparison_catches_a_missing_key_and_a_changed_type() -> None:
    ref = {"thread": {"thread_id": "str", "status": "str", "tasks": [{"id": "str"}]}}
    assert differences(ref, ref) == []
    assert differences(ref, {"thread": {"thread_id": "str", "tasks": []}}) == [
        ".thread.status: missing"
    ]
    changed = {"thread": {"thread_id": "number", "status": "null", "tasks": [{"id": "dict"}]}}
    assert differences(ref, changed) == [
        ".thread.thread_id: str in the reference, number in onward",
        ".thread.tasks[0].id: str in the reference, dict in onward",
    ]
    assert differences(ref, {**ref, "extra": "str"}) == []  # extensions are not drift
