"""MCP servers are a new way to run code: every server that is not allowed is refused
before anything starts, and nothing changes. An HTTP server outside the egress policy, a
stdio command no allowed command line begins (from Python and from ``onward run
--mcp``), and, over ``onward serve``, a token holder naming a server or a command
anywhere in a request: only the servers the operator configured are usable over HTTP,
and their command lines are not shown to it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from onward import Onward, ToolLoadError
from onward.tools.mcp import close_servers, mcp_server
from tests.support.common import read_jsonl
from tests.support.paths import SUPPORT
from tests.support.security import TOKENS, auth, start
from tests.support.serve import serve

SERVER = SUPPORT / "mcp_server.py"
ALLOWED = f"{sys.executable} {SERVER}"


def evil(workdir: Path) -> list[str]:
    """A command that leaves a mark if it ever runs."""
    return [sys.executable, "-c", f"open({str(workdir / 'pwned')!r}, 'w')"]


@pytest.fixture(autouse=True)
def allowed_commands(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ONWARD_MCP_COMMANDS", ALLOWED)
    yield
    close_servers()


@pytest.mark.parametrize(
    "command",
    [
        "evil",  # another program's arguments
        "bare",  # the allowed program, other arguments
        "prefix",  # the allowed command line's program alone
        "sibling",  # a file next to the allowed one
    ],
)
def test_a_stdio_command_no_allowed_line_begins_is_refused_and_never_started(
    db_url: str, workdir: Path, command: str
) -> None:
    (workdir / "mcp_server.py.evil").write_text("open('pwned', 'w')\n", encoding="utf-8")
    argv = {
        "evil": evil(workdir),
        "bare": [sys.executable, "-c", f"open({str(workdir / 'pwned')!r}, 'w')", str(SERVER)],
        "prefix": [sys.executable],
        "sibling": [sys.executable, str(workdir / "mcp_server.py.evil")],
    }[command]

    with pytest.raises(ToolLoadError, match=r"not allowed.*ONWARD_MCP_COMMANDS"):
        Onward(db_url, tool_modules=[mcp_server("x", argv)], model=None)

    assert not (workdir / "pwned").exists()


def test_an_http_server_outside_the_egress_policy_is_refused_before_any_request(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONWARD_HTTP_ALLOW", "127.0.0.1:9")
    for url in (
        "http://127.0.0.1:8/mcp",  # another port
        "http://localhost:9/mcp",  # another spelling: names are not resolved
        "http://127.0.0.1:9@evil.example/mcp",  # user info hiding the real host
        "https://evil.example/mcp",
    ):
        with pytest.raises(ToolLoadError, match="MCP server 'x'"):
            Onward(db_url, tool_modules=[mcp_server("x", url)], model=None)


def test_onward_run_refuses_an_mcp_command_that_is_not_allowed(run_cli: Any, workdir: Path) -> None:
    (workdir / "plan.yaml").write_text(
        "goal: g\nsteps:\n  - {id: a, tool: mcp__x__anything, args: {}}\n", encoding="utf-8"
    )
    command = " ".join(f"'{w}'" for w in evil(workdir))

    result = run_cli(
        "run", "--plan", "plan.yaml", "--mcp", f"x={command}", env={"ONWARD_MCP_COMMANDS": ALLOWED}
    )

    assert result.code == 2, result.stdout + result.stderr
    assert "not allowed" in result.stderr
    assert "ONWARD_MCP_COMMANDS" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (workdir / "pwned").exists()


# -- over onward serve ----------------------------------------------------------------------


@pytest.fixture
def mcp_api(db_url: str, workdir: Path) -> Iterator[httpx.Client]:
    """``onward serve`` with tokens and one MCP server the operator configured (``t``)."""
    log = workdir / "calls.jsonl"
    with (
        serve(
            db_url,
            workdir,
            ONWARD_API_TOKENS=TOKENS,
            ONWARD_MCP=f"t={ALLOWED} --log {log}",
            ONWARD_MCP_COMMANDS=ALLOWED,
        ) as url,
        httpx.Client(base_url=url, headers=auth(), timeout=60) as client,
    ):
        yield client


def lookup_plan(tool: str = "mcp__t__lookup") -> dict[str, Any]:
    return {"goal": "price", "steps": [{"id": "l", "tool": tool, "args": {"key": "apple"}}]}


def test_a_token_holder_uses_only_the_servers_the_operator_configured(
    mcp_api: httpx.Client, workdir: Path
) -> None:
    ref = mcp_server("x", evil(workdir))
    tid, used = start(mcp_api, {"goal": "price", "plan": lookup_plan()})
    assert used.status_code == 200, used.text
    assert [c["args"] for c in read_jsonl(workdir / "calls.jsonl") if "tool" in c] == [
        {"key": "apple"}
    ]
    shown = mcp_api.get(f"/threads/{tid}/state")
    before = shown.json()["values"]
    # The operator's command line (its paths, any key in its args) never reaches a user.
    assert "(server tools)/mcp:t" in before["tool_modules"]
    assert str(SERVER) not in shown.text
    assert "calls.jsonl" not in shown.text

    run = f"/threads/{tid}/runs/wait"
    attacks = [
        (run, {"assistant_id": "onward", "input": {"goal": "g", "tool_modules": [ref]}}),
        (run, {"assistant_id": "onward", "input": {"goal": "g", "plan": lookup_plan("mcp__x__a")}}),
        (run, {"assistant_id": "onward", "config": {"configurable": {"tool_modules": [ref]}}}),
        (f"/threads/{tid}/state", {"values": {"tool_modules": [ref]}}),
        ("/assistants", {"graph_id": "onward", "context": {"mcp": [ref]}}),
        ("/assistants", {"graph_id": "onward", "context": {"tool_modules": [ref]}}),
    ]
    for path, body in attacks:
        res = mcp_api.post(path, json=body)
        assert res.status_code in (403, 422), (body, res.text)

    assert not (workdir / "pwned").exists()
    assert mcp_api.get(f"/threads/{tid}/state").json()["values"] == before
    calls = [c for c in read_jsonl(workdir / "calls.jsonl") if "tool" in c]
    assert len(calls) == 1  # nothing else reached the configured server either
