"""onward's graph under ``langgraph dev`` (LangGraph's own server, in-memory, offline), as
``langgraph.json`` configures it: strict msgpack, every onward type on the serializer's
allowlist, no pickle. The state reads as JSON through ``langgraph_sdk`` (steps and
artifacts included), and a run resumes from an approval."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

from tests.support.common import cli_env
from tests.support.hitl_tools import rows
from tests.support.langgraph_dev import free_port, plain_text
from tests.support.paths import ROOT, SUPPORT

HITL_TOOLS = str(SUPPORT / "hitl_tools.py")


@pytest.fixture
def langgraph_dev(sqlite_url: str, workdir: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``langgraph dev`` on langgraph.json, on a loopback port: (URL, its log file)."""
    langgraph = shutil.which("langgraph", path=str(Path(sys.executable).parent))
    assert langgraph, "langgraph-cli[inmem] is part of the dev extra"
    port = free_port()
    env = cli_env(
        ONWARD_DB=sqlite_url,
        ONWARD_TOOLS=HITL_TOOLS,
        LANGGRAPH_STRICT_MSGPACK="true",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        LANGGRAPH_NO_VERSION_CHECK="true",
    )
    log = tmp_path / "langgraph-dev.log"
    config = str(ROOT / "langgraph.json")
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                langgraph,
                "dev",
                "--no-browser",
                "--no-reload",
                "--port",
                str(port),
                "--config",
                config,
            ],
            cwd=workdir,
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
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "langgraph dev did not start"
            time.sleep(0.25)
        yield url, log
    finally:
        proc.terminate()
        proc.wait(30)


def test_langgraph_dev_reads_steps_as_json_and_resumes_under_strict_msgpack(
    langgraph_dev: tuple[str, Path], workdir: Path
) -> None:
    url, log = langgraph_dev
    client = get_sync_client(url=url, api_key=None)
    (assistant,) = client.assistants.search(graph_id="onward")
    drawn = client.assistants.get_graph(assistant["assistant_id"])
    assert {"plan", "execute", "verify", "approve", "finalize"} <= {n["id"] for n in drawn["nodes"]}
    tid = client.threads.create()["thread_id"]
    run_input = {
        "goal": {"objective": "note, then pay bo"},
        "plan": {
            "steps": [
                {"id": "first", "tool": "noop", "args": {"value": 1}, "output": "first"},
                {
                    "id": "pay",
                    "tool": "pay",
                    "args": {"amount": 5, "to": "bo"},
                    "depends_on": ["first"],
                },
            ]
        },
        "workdir": str(workdir),
        "tool_modules": [HITL_TOOLS],
    }
    waiting = client.runs.wait(tid, "onward", input=run_input)
    assert isinstance(waiting, dict)
    (question,) = waiting["__interrupt__"]
    assert question["value"]["action_requests"][0]["name"] == "pay"
    assert rows(workdir, "payments.jsonl") == []

    values: dict[str, Any] = client.threads.get_state(tid)["values"]  # type: ignore[assignment]
    # The lazy collections read as JSON objects (they were null), their items as fields.
    assert values["steps"]["first"]["status"] == "done"
    assert values["artifacts"]["first"]["sha256"] == values["steps"]["first"]["output"]["sha256"]
    assert values["status"] == "running"
    json.dumps(values)  # plain JSON all the way down

    done = client.runs.wait(tid, "onward", command={"resume": {"decisions": [{"type": "approve"}]}})
    assert isinstance(done, dict)
    assert done["status"] == "done", done
    assert [p["amount"] for p in rows(workdir, "payments.jsonl")] == [5]
    final: dict[str, Any] = client.threads.get_state(tid)["values"]  # type: ignore[assignment]
    assert {k: v["status"] for k, v in final["steps"].items()} == {"first": "done", "pay": "done"}
    assert [d["action"] for d in final["decisions"]] == ["approve"]

    text = plain_text(log)
    # Every onward type is registered: nothing blocked, nothing "unregistered", no pickle.
    assert "Blocked deserialization" not in text
    assert "unregistered type" not in text
    assert "Pickle fallback is disabled" not in text
    assert "Traceback" not in text


def test_langgraph_json_registers_every_onward_checkpoint_type() -> None:
    """The allowlist in langgraph.json (what LangGraph's server reads) is the one onward's
    own stores use; export.allowlist() keeps it on the hosted graph for servers that
    do not read it from langgraph.json."""
    from onward.checkpointing.serde import checkpoint_types

    config = json.loads((ROOT / "langgraph.json").read_text())
    listed = {tuple(t) for t in config["checkpointer"]["serde"]["allowed_msgpack_modules"]}
    assert listed == {(t.__module__, t.__name__) for t in checkpoint_types()}
    assert config["checkpointer"]["serde"]["pickle_fallback"] is False
    assert config["env"]["LANGGRAPH_STRICT_MSGPACK"] == "true"
    assert config["graphs"] == {"onward": "onward.serve.export:graph"}


def test_the_hosted_graph_keeps_its_allowlist_through_the_servers_copy(
    sqlite_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LangGraph's server attaches its checkpointer with ``graph.copy(update=...)``, which
    drops a compiled graph's allowlist; onward's hosted graph keeps it."""
    from onward.checkpointing.serde import checkpoint_types
    from onward.serve.export import make_graph

    graph = make_graph(sqlite_url)
    copied = graph.copy(update={"checkpointer": None})
    assert copied._serde_allowlist == graph._serde_allowlist
    assert {(t.__module__, t.__name__) for t in checkpoint_types()} <= copied._serde_allowlist
    plain = type(graph).__mro__[1].copy(graph, update={"checkpointer": None})
    assert plain._serde_allowlist is None  # what LangGraph's own copy does (why HostedGraph is)
