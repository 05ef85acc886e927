"""An MCP server that goes away during a run does not fail it: the server's process is
SIGKILLed between two calls of a run, and the next call starts it again (a read-only
tool's call is sent to the new server at once; an unsafe tool's call on the closed
session may have reached the server before it died, so a person says whether it happened,
and its retry reconnects), so the run finishes with each call run once. A server the
operator no longer allows is not started again."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from onward import Onward, RunPolicy, ToolContext, TransientToolError, default_registry, tool
from onward.tools.mcp import close_servers, load_server, mcp_server
from tests.support.common import read_jsonl
from tests.support.mcp_tools import COMMAND, SERVER, calls, starts, wait_gone


@pytest.fixture(autouse=True)
def mcp_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ONWARD_MCP_COMMANDS", COMMAND)
    yield
    close_servers()


@tool(side_effect="idempotent")
def kill_mcp_server(log: str, ctx: ToolContext) -> int:
    """SIGKILL the newest MCP test server that ``log`` says was started; its pid."""
    [*_, pid] = [e["started"] for e in read_jsonl(Path(log)) if "started" in e]
    os.kill(pid, signal.SIGKILL)
    return int(pid)


def test_a_killed_mcp_server_is_started_again_by_the_next_call_and_the_run_finishes(
    db_url: str, workdir: Path
) -> None:
    log = workdir / "calls.jsonl"
    ref = mcp_server("t", [sys.executable, str(SERVER), "--log", str(log)])
    plan = {
        "goal": "look prices up across a server crash",
        "steps": [
            {"id": "a", "tool": "mcp__t__lookup", "args": {"key": "apple"}, "output": "a"},
            {
                "id": "kill",
                "tool": "kill_mcp_server",
                "args": {"log": str(log)},
                "depends_on": ["a"],
                "output": "killed",
            },
            {
                "id": "b",
                "tool": "mcp__t__lookup",
                "args": {"key": "pear"},
                "depends_on": ["kill"],
                "output": "b",
            },
            {
                "id": "kill2",
                "tool": "kill_mcp_server",
                "args": {"log": str(log)},
                "depends_on": ["b"],
            },
            {
                "id": "n",
                "tool": "mcp__t__stamp",
                "args": {},
                "depends_on": ["kill2"],
                "output": "n",
            },
        ],
    }
    policy = RunPolicy(auto_approve=frozenset({"mcp__t__stamp"}))
    with Onward(db_url, tool_modules=[ref], model=None, sleep=lambda s: None) as ow:
        asked = ow.run(plan=plan, policy=policy, thread_id="t")
        # The unsafe call found its session closed: onward cannot tell whether the server
        # got it before it died, so a person says (here: it did not happen, run it again).
        ow.resolve("t", "n", "retry")
        view = ow.resume("t")
        b = view.artifact_value(ow, "b")
        killed = view.artifact_value(ow, "killed")

    assert asked.status == "waiting_for_human", asked
    assert [q.step_id for q in asked.pending] == ["n"]
    assert "outcome unknown" in (asked.pending[0].reason or "")
    assert view.status == "done", view
    assert b == {"key": "pear", "price": 5}
    first, second, third = starts(log)  # started again after each kill
    assert killed == first
    assert wait_gone(first)
    assert wait_gone(second)
    assert calls(log, "lookup") == [{"key": "apple"}, {"key": "pear"}]  # each once
    assert calls(log, "stamp") == [{}]  # the unsafe call reached a server once
    n = next(s for s in view.steps if s.id == "n")
    assert [f.failure_class for f in n.failures] == ["transient"]  # its first try
    assert third != second


def test_a_killed_server_the_operator_no_longer_allows_is_not_started_again(
    monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    log = workdir / "calls.jsonl"
    load_server(mcp_server("t", [sys.executable, str(SERVER), "--log", str(log)]))
    lookup = default_registry.get("mcp__t__lookup")
    assert lookup is not None
    ctx = ToolContext(workdir=workdir, thread_id="t", step_id="s", attempt=1)
    assert lookup.fn(ctx, key="apple") == {"key": "apple", "price": 3}
    [pid] = starts(log)
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid)
    monkeypatch.setenv("ONWARD_MCP_COMMANDS", "/bin/true")

    with pytest.raises(TransientToolError, match="not allowed"):
        lookup.fn(ctx, key="pear")

    assert starts(log) == [pid]  # nothing started
    assert calls(log, "lookup") == [{"key": "apple"}]


def test_an_unsafe_call_that_times_out_is_not_sent_again_but_asked_about(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sent and not answered in time (the tool's timeout, which is the MCP call's), an
    unsafe call may have acted: its retry finds the ledger's claim started and asks a
    person (outcome unknown) instead of calling again."""
    monkeypatch.setattr("onward.tools.mcp.CALL_TIMEOUT", 0.5)
    log = workdir / "calls.jsonl"
    ref = mcp_server("t", [sys.executable, str(SERVER), "--log", str(log)])
    plan = {
        "goal": "stamp slowly",
        "steps": [{"id": "n", "tool": "mcp__t__slow_stamp", "args": {"seconds": 3}}],
    }
    policy = RunPolicy(auto_approve=frozenset({"mcp__t__slow_stamp"}))
    with Onward(db_url, tool_modules=[ref], model=None, sleep=lambda s: None) as ow:
        view = ow.run(plan=plan, policy=policy, thread_id="t")

    assert view.status == "waiting_for_human", view
    [question] = view.pending
    assert question.step_id == "n"
    assert "outcome unknown" in (question.reason or "")
    assert calls(log, "slow_stamp") == [{"seconds": 3}]  # sent once, never again
