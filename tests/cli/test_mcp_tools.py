"""MCP tools: a real MCP server (tests/support/mcp_server.py, the ``mcp`` SDK's MCPServer) started
by the test, its tools used from a plan through ``onward run --mcp`` and from Python, with
their annotations honoured (read-only runs, idempotent runs once under its key across a
kill, destructive and unannotated ask first); the server is started once per driver and
again by a resumed run; streamable HTTP on 127.0.0.1 when the egress policy allows it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onward import (
    Onward,
    PlanValidationError,
    RunPolicy,
    SideEffect,
    ToolLoadError,
    default_registry,
)
from onward.tools.mcp import close_servers, mcp_server
from tests.support.common import read_jsonl, start_run
from tests.support.mcp_tools import COMMAND, SERVER, calls, starts, wait_gone


@pytest.fixture(autouse=True)
def mcp_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ONWARD_MCP_COMMANDS", COMMAND)
    yield
    close_servers()


@pytest.fixture
def log(workdir: Path) -> Path:
    return workdir / "calls.jsonl"


def entry(log: Path) -> str:
    return f"t={COMMAND} --log {log}"


PLAN = """\
goal: look a price up and write it down
steps:
  - {id: look, tool: mcp__t__lookup, args: {key: apple}, output: price}
  - {id: write, tool: mcp__t__write_note, args: {path: note.txt, text: "apple 3"},
     depends_on: [look], output: wrote}
"""


def test_mcp_tools_run_from_a_plan_given_mcp_one_server_per_driver(
    run_cli: Any, workdir: Path, log: Path, db_url: str
) -> None:
    (workdir / "plan.yaml").write_text(PLAN, encoding="utf-8")
    env = {"ONWARD_MCP_COMMANDS": COMMAND}

    result = run_cli("run", "--plan", "plan.yaml", "--mcp", entry(log), "--json", env=env)

    assert result.code == 0, result.stdout + result.stderr
    view = result.json()
    assert [(s["id"], s["status"]) for s in view["steps"]] == [("look", "done"), ("write", "done")]
    assert calls(log, "lookup") == [{"key": "apple"}]
    assert calls(log, "write_note") == [{"path": "note.txt", "text": "apple 3"}]
    [pid] = starts(log)  # one server for the run's two calls, not one per call
    assert wait_gone(pid)  # stopped with its driver
    with Onward(db_url, model=None) as ow:
        run = ow.get(view["thread_id"])
        assert run.artifact_value(ow, "price") == {"key": "apple", "price": 3}
        assert run.artifact_value(ow, "wrote") == "wrote 7 characters"


def test_a_destructive_mcp_tool_asks_first_and_the_answer_starts_the_server_again(
    run_cli: Any, workdir: Path, log: Path
) -> None:
    (workdir / "doomed.txt").write_text("x", encoding="utf-8")
    plan = "goal: g\nsteps:\n  - {id: rm, tool: mcp__t__delete_note, args: {path: doomed.txt}}\n"
    (workdir / "plan.yaml").write_text(plan, encoding="utf-8")
    env = {"ONWARD_MCP_COMMANDS": COMMAND}

    asked = run_cli(
        "run", "--plan", "plan.yaml", "--mcp", entry(log), "--thread-id", "t", "--json", env=env
    )

    assert asked.code == 3, asked.stdout + asked.stderr
    [question] = asked.json()["pending"]
    assert (question["kind"], question["tool"]) == ("approval", "mcp__t__delete_note")
    assert question["args"] == {"path": "doomed.txt"}
    assert (workdir / "doomed.txt").exists()
    assert calls(log, "delete_note") == []

    approved = run_cli("approve", "t", "--json", env=env)  # no --mcp: the run kept its server

    assert approved.code == 0, approved.stdout + approved.stderr
    assert approved.json()["status"] == "done"
    assert not (workdir / "doomed.txt").exists()
    assert calls(log, "delete_note") == [{"path": "doomed.txt"}]
    assert len(starts(log)) == 2  # the answering process started it again


def test_mcp_tools_from_python_with_their_annotations_as_side_effect_classes(
    db_url: str, workdir: Path, log: Path
) -> None:
    ref = mcp_server("t", [sys.executable, str(SERVER), "--log", str(log)])
    plan = {
        "goal": "g",
        "steps": [
            {"id": "look", "tool": "mcp__t__lookup", "args": {"key": "pear"}, "output": "p"},
            {"id": "n", "tool": "mcp__t__stamp", "args": {}, "output": "n"},
        ],
    }

    with Onward(db_url, tool_modules=[ref], model=None) as ow:
        classes = {
            name: (spec.side_effect, spec.requires_approval)
            for name in ("lookup", "write_note", "delete_note", "stamp", "fail")
            if (spec := default_registry.get(f"mcp__t__{name}")) is not None
        }
        view = ow.run(plan=plan, policy=RunPolicy(auto_approve=frozenset({"mcp__t__stamp"})))
        price = view.artifact_value(ow, "p")

    assert classes == {
        "lookup": (SideEffect.PURE, False),  # readOnlyHint
        "write_note": (SideEffect.IDEMPOTENT, False),  # idempotentHint, destructiveHint false
        "delete_note": (SideEffect.UNSAFE, True),  # destructiveHint
        "stamp": (SideEffect.UNSAFE, True),  # no annotations
        "fail": (SideEffect.PURE, False),
    }
    assert view.status == "done", view
    assert price == {"key": "pear", "price": 5}
    assert [c for c in read_jsonl(log) if c.get("tool") == "stamp"] == [
        {"tool": "stamp", "args": {}}
    ]


def test_an_mcp_error_result_is_a_deterministic_failure_with_its_text(
    db_url: str, workdir: Path, log: Path
) -> None:
    ref = mcp_server("t", f"{COMMAND} --log {log}")
    plan = {"goal": "g", "steps": [{"id": "f", "tool": "mcp__t__fail", "args": {"reason": "no"}}]}

    with Onward(db_url, tool_modules=[ref], model=None) as ow:
        view = ow.run(plan=plan, policy=RunPolicy(escalate_failures=False))

    step = view.steps[0]
    assert (step.status, step.failure_class) == ("failed", "deterministic")
    assert "cannot: no" in (step.error or "")
    assert len(calls(log, "fail")) == 1  # deterministic: not retried


def test_an_unknown_arg_of_an_mcp_tool_is_refused_before_anything_runs(
    db_url: str, workdir: Path, log: Path
) -> None:
    ref = mcp_server("t", f"{COMMAND} --log {log}")
    plan = {"goal": "g", "steps": [{"id": "l", "tool": "mcp__t__lookup", "args": {"ky": "x"}}]}

    with (
        Onward(db_url, tool_modules=[ref], model=None) as ow,
        pytest.raises(PlanValidationError, match="ky"),
    ):
        ow.start(plan=plan)
    assert calls(log, "lookup") == []


def test_an_idempotent_mcp_call_is_in_the_ledger_once_across_a_kill_and_a_resume(
    run_cli: Any, workdir: Path, log: Path, db_url: str
) -> None:
    (workdir / "plan.yaml").write_text(PLAN, encoding="utf-8")
    (workdir / "none.py").write_text("", encoding="utf-8")
    env = {"ONWARD_MCP_COMMANDS": COMMAND}
    proc = start_run(
        workdir,
        db_url,
        "k",
        "none.py",
        "--mcp",
        entry(log),
        ONWARD_FAULT_KILL="after_record:write",
        **env,
    )
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert len(calls(log, "write_note")) == 1  # its effect recorded, then the driver died

    resumed = run_cli("resume", "k", "--json", env=env)

    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert resumed.json()["status"] == "done"
    assert len(calls(log, "write_note")) == 1  # replayed from the ledger, never called again
    assert len(starts(log)) == 2  # the resumed run (a new process) started its server again
    with Onward(db_url, model=None) as ow:
        ledger = [e for e in ow.store.ledger.for_thread("k") if e.step_id == "write"]
    assert [(e.status.value, e.calls) for e in ledger] == [("completed", 1)]
    assert (workdir / "note.txt").read_text(encoding="utf-8") == "apple 3"


# -- streamable HTTP ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(workdir: Path, log: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--log", str(log), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120  # a loaded machine starts Python slowly
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "the MCP server exited before it listened"
                assert time.monotonic() < deadline, "the MCP server did not listen in 120 s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        close_servers()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_streamable_http_mcp_server_the_egress_policy_allows_serves_a_plan(
    db_url: str, workdir: Path, log: Path, http_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = http_server.split(":")[2].split("/")[0]
    monkeypatch.setenv("ONWARD_HTTP_ALLOW", f"127.0.0.1:{port}")
    plan = {
        "goal": "g",
        "steps": [{"id": "l", "tool": "mcp__web__lookup", "args": {"key": "apple"}, "output": "p"}],
    }

    with Onward(db_url, tool_modules=[mcp_server("web", http_server)], model=None) as ow:
        view = ow.run(plan=plan)
        price = view.artifact_value(ow, "p")

    assert view.status == "done", view
    assert price == {"key": "apple", "price": 3}
    assert calls(log, "lookup") == [{"key": "apple"}]


def test_a_streamable_http_mcp_server_outside_the_egress_policy_is_refused(
    db_url: str, workdir: Path, log: Path, http_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONWARD_HTTP_ALLOW", "127.0.0.1:1")

    with pytest.raises(ToolLoadError, match=r"not allowed.*ONWARD_HTTP_ALLOW"):
        Onward(db_url, tool_modules=[mcp_server("web", http_server)], model=None)

    assert calls(log, "lookup") == []


# -- per serve assistant --------------------------------------------------------------------


def test_a_serve_assistant_with_its_own_mcp_server_runs_its_tools_and_only_it_loads_them(
    db_url: str, workdir: Path, log: Path
) -> None:
    import httpx

    from tests.support.serve import serve

    config = workdir.parent / "serve.yaml"
    config.write_text(
        "assistants:\n  research:\n    mcp: [" + json.dumps(entry(log)) + "]\n", encoding="utf-8"
    )
    plan = {
        "goal": "price",
        "plan": {
            "steps": [
                {"id": "l", "tool": "mcp__t__lookup", "args": {"key": "apple"}, "output": "p"}
            ]
        },
    }
    with (
        serve(db_url, workdir, "--config", str(config), ONWARD_MCP_COMMANDS=COMMAND) as url,
        httpx.Client(base_url=url, timeout=60) as api,
    ):
        assert starts(log) == []  # not started before a run of its assistant needs it
        tid = api.post("/threads", json={}).json()["thread_id"]
        ran = api.post(
            f"/threads/{tid}/runs/wait", json={"assistant_id": "research", "input": plan}
        )
        assert ran.status_code == 200, ran.text

    with Onward(db_url, model=None) as ow:
        assert ow.get(tid).status == "done"
    assert calls(log, "lookup") == [{"key": "apple"}]
    assert len(starts(log)) == 1


def test_a_serve_assistants_mcp_server_that_is_not_allowed_stops_the_server_at_start(
    run_cli: Any, workdir: Path, log: Path, db_url: str
) -> None:
    config = workdir.parent / "serve.yaml"
    config.write_text(
        "assistants:\n  research:\n    mcp: [" + json.dumps(entry(log)) + "]\n", encoding="utf-8"
    )

    result = run_cli("serve", "--config", str(config), "--port", "1", env={})

    assert result.code == 2, result.stdout + result.stderr
    assert "assistant 'research': mcp: MCP server 't' is not allowed" in result.stderr
    assert starts(log) == []


# -- to a model: a tool-calling step, a model step ------------------------------------------


def test_a_tool_calling_step_calls_mcp_tools_and_gets_their_results_fenced(
    db_url: str, workdir: Path, log: Path
) -> None:
    from onward import ScriptedChatModel
    from onward.llm.fake import tool_calls

    model = ScriptedChatModel(
        responses=[
            tool_calls(("mcp__t__lookup", {"key": "apple"})),
            tool_calls(("mcp__t__write_note", {"path": "note.txt", "text": "apple 3"})),
            "Noted: apple costs 3.",
        ]
    )
    step = {
        "id": "agent",
        "tool": "tool_calling",
        "output": "answer",
        "args": {
            "instruction": "Look the apple's price up and write it down.",
            "tools": ["mcp__t__lookup", "mcp__t__write_note"],
            "max_calls": 4,
        },
    }
    ref = mcp_server("t", f"{COMMAND} --log {log}")

    with Onward(db_url, tool_modules=[ref], model=model) as ow:
        view = ow.run(plan={"goal": "note the price", "steps": [step]})
        answer = view.artifact_value(ow, "answer")

    assert view.status == "done", view
    assert answer == "Noted: apple costs 3."
    assert model.tools_offered[0] == ["mcp__t__lookup", "mcp__t__write_note"]
    assert calls(log, "lookup") == [{"key": "apple"}]
    assert calls(log, "write_note") == [{"path": "note.txt", "text": "apple 3"}]
    [result] = [m for m in model.calls[1] if m.type == "tool"]
    assert '"price": 3' in result.text
    assert "UNTRUSTED DATA" in result.text  # the server's answer reaches the model as data


def test_an_mcp_tools_output_reaches_a_model_step_fenced(
    db_url: str, workdir: Path, log: Path
) -> None:
    from onward import ScriptedChatModel

    model = ScriptedChatModel(responses=["Apples cost 3."])
    plan = {
        "goal": "describe the price",
        "steps": [
            {"id": "look", "tool": "mcp__t__lookup", "args": {"key": "apple"}, "output": "p"},
            {
                "id": "say",
                "tool": "model_step",
                "depends_on": ["look"],
                "output": "said",
                "args": {"instruction": "Say the price.", "inputs": {"price": "${p}"}},
            },
        ],
    }
    ref = mcp_server("t", f"{COMMAND} --log {log}")

    with Onward(db_url, tool_modules=[ref], model=model) as ow:
        view = ow.run(plan=plan)

    assert view.status == "done", view
    prompt = "\n".join(m.text for m in model.calls[0])
    fence = prompt[prompt.index("UNTRUSTED DATA") :]
    assert '"price": 3' in fence


# -- configuration --------------------------------------------------------------------------


def test_an_mcp_servers_json_file_gives_each_server_as_given_inline(workdir: Path) -> None:
    from onward.tools.mcp import refs_of

    (workdir / "servers.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "t": {"command": sys.executable, "args": [str(SERVER), "--log", "x"]},
                    "web": {"url": "http://127.0.0.1:8123/mcp"},
                }
            }
        ),
        encoding="utf-8",
    )

    assert refs_of(["servers.json"]) == [
        mcp_server("t", [sys.executable, str(SERVER), "--log", "x"]),
        mcp_server("web", "http://127.0.0.1:8123/mcp"),
    ]
    assert refs_of(["servers.json"]) == refs_of(
        [f"t={COMMAND} --log x", "web=http://127.0.0.1:8123/mcp"]
    )


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        ({"read_only_hint": True, "destructive_hint": True}, (SideEffect.PURE, False)),
        ({"idempotent_hint": True, "destructive_hint": False}, (SideEffect.IDEMPOTENT, False)),
        ({"idempotent_hint": True}, (SideEffect.IDEMPOTENT, True)),  # destructive by default
        ({"destructive_hint": False}, (SideEffect.UNSAFE, True)),  # may add: not idempotent
        ({"open_world_hint": True}, (SideEffect.UNSAFE, True)),
    ],
)
def test_annotations_map_to_a_side_effect_class_and_whether_a_person_approves(
    hints: dict[str, bool], expected: tuple[SideEffect, bool]
) -> None:
    from mcp.types import Tool, ToolAnnotations

    from onward import Registry
    from onward.tools.mcp import MCPServer, register_tool

    found = Tool(name="t", input_schema={"type": "object"}, annotations=ToolAnnotations(**hints))
    spec = register_tool(MCPServer("s", url="http://127.0.0.1:1/mcp"), found, Registry())

    assert (spec.name, (spec.side_effect, spec.requires_approval)) == ("mcp__s__t", expected)
