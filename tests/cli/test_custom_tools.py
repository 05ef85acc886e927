"""User tools: a ``my_tools.py`` registering ``@tool`` functions, loaded with ``--tools``
or ``ONWARD_TOOLS``, remembered by the run for ``resume``, and validated like built-ins."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, PlanValidationError, ToolLoadError, default_registry, load_plan_file
from onward.store.sql import store_exists
from onward.tools import load_tool_modules
from tests.support.common import cli_env, onward_cmd

MY_TOOLS = '''\
from __future__ import annotations

from pydantic import BaseModel, Field

from onward import ToolContext, tool


class Greeting(BaseModel):
    name: str
    times: int = Field(ge=1)


@tool
def greet(greeting: Greeting, path: str, ctx: ToolContext) -> dict:
    """Write a greeting file under the run's work directory."""
    assert isinstance(greeting, Greeting), type(greeting)
    ctx.path(path).write_text(f"hello {greeting.name}\\n" * greeting.times, encoding="utf-8")
    return {"path": path, "lines": greeting.times, "step": ctx.step_id, "attempt": ctx.attempt}
'''

PLAN = """\
goal: greet Ada
steps:
  - id: hi
    tool: greet
    args: {greeting: {name: Ada, times: 2}, path: hello.txt}
    output: greeting
"""


@pytest.fixture
def tools_dir(workdir: Path) -> Path:
    (workdir / "my_tools.py").write_text(MY_TOOLS, encoding="utf-8")
    (workdir / "plan.yaml").write_text(PLAN, encoding="utf-8")
    return workdir


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process loads register into the default registry and cache the module; undo both
    so other tests see only the built-ins and a later load imports the file afresh."""
    monkeypatch.setattr(default_registry, "_specs", dict(default_registry._specs))
    for name in [m for m in sys.modules if m.startswith("onward_user_tools_")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [m for m in sys.modules if m.startswith("onward_user_tools_")]:
        del sys.modules[name]


def assert_greeted(view: dict[str, Any], workdir: Path) -> None:
    assert view["status"] == "done"
    assert [(s["id"], s["tool"], s["status"]) for s in view["steps"]] == [("hi", "greet", "done")]
    assert (workdir / "hello.txt").read_text(encoding="utf-8") == "hello Ada\nhello Ada\n"


def test_tools_file_given_with_tools_option_runs_its_tool(
    run_cli: Any, tools_dir: Path, db_url: str
) -> None:
    result = run_cli("run", "--plan", "plan.yaml", "--tools", "my_tools.py", "--json")

    assert result.code == 0, result.stdout + result.stderr
    view = result.json()
    assert_greeted(view, tools_dir)
    with Onward(db_url) as ow:
        output = ow.get(view["thread_id"]).artifact_value(ow, "greeting")
    assert output == {"path": "hello.txt", "lines": 2, "step": "hi", "attempt": 1}


def test_tools_module_named_in_onward_tools_env_runs_its_tool(
    run_cli: Any, tools_dir: Path
) -> None:
    env = {"ONWARD_TOOLS": "my_tools", "PYTHONPATH": str(tools_dir)}

    result = run_cli("run", "--plan", "plan.yaml", "--json", env=env)

    assert result.code == 0, result.stdout + result.stderr
    assert_greeted(result.json(), tools_dir)


@pytest.mark.usefixtures("isolated_registry")
def test_resume_in_a_new_process_reimports_the_runs_tool_modules(
    run_cli: Any, tools_dir: Path, db_url: str
) -> None:
    with Onward(db_url, tool_modules=["my_tools.py"]) as ow:
        tid = ow.start(plan="plan.yaml")
    assert not (tools_dir / "hello.txt").exists(), "start alone runs nothing"

    result = run_cli("resume", tid, "--json")  # no --tools, no ONWARD_TOOLS

    assert result.code == 0, result.stdout + result.stderr
    assert result.json()["thread_id"] == tid
    assert_greeted(result.json(), tools_dir)


@pytest.mark.usefixtures("isolated_registry")
def test_resume_from_another_directory_still_finds_the_runs_tools_file(
    tools_dir: Path, db_url: str, tmp_path: Path
) -> None:
    with Onward(db_url, tool_modules=["my_tools.py"]) as ow:
        tid = ow.start(plan="plan.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    proc = subprocess.run(
        onward_cmd("resume", tid, "--json", "--db", db_url),
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_greeted(json.loads(proc.stdout), tools_dir)


def test_plan_naming_an_unregistered_tool_fails_pointing_at_tools_option(
    run_cli: Any, tools_dir: Path, db_url: str
) -> None:
    result = run_cli("run", "--plan", "plan.yaml")  # my_tools.py exists but is not named

    assert result.code == 2
    assert "unknown tool 'greet'" in result.stderr
    assert "--tools" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tools_dir / "hello.txt").exists()
    # No run was created: a run that fails validation writes nothing, not even a store.
    assert not store_exists(db_url), "nothing was written"


def test_tools_file_that_raises_on_import_fails_naming_the_file(
    run_cli: Any, tools_dir: Path
) -> None:
    (tools_dir / "broken_tools.py").write_text(
        'raise RuntimeError("cannot reach the license server")\n', encoding="utf-8"
    )

    result = run_cli("run", "--plan", "plan.yaml", "--tools", "broken_tools.py")

    assert result.code == 2
    assert "could not import tools from '" in result.stderr
    assert "broken_tools.py'" in result.stderr
    assert "RuntimeError: cannot reach the license server" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tools_dir / "hello.txt").exists()


def test_tools_file_that_does_not_exist_fails_naming_it(tools_dir: Path) -> None:
    with pytest.raises(ToolLoadError, match=r"tools file no_such_tools\.py does not exist"):
        load_tool_modules(["no_such_tools.py"])


def test_custom_tool_arg_of_wrong_type_fails_plan_validation_with_exit_code_2(
    run_cli: Any, tools_dir: Path
) -> None:
    plan = PLAN.replace("times: 2", "times: many")
    (tools_dir / "plan.yaml").write_text(plan, encoding="utf-8")

    result = run_cli("run", "--plan", "plan.yaml", "--tools", "my_tools.py", "--json")

    assert result.code == 2, result.stdout + result.stderr
    error = result.json()
    assert error["error"] == "PlanValidationError"
    assert "steps[0] (hi).args.greeting.times: Input should be a valid integer" in error["message"]
    assert not (tools_dir / "hello.txt").exists()


@pytest.mark.parametrize(
    ("args", "where", "problem"),
    [
        (
            "{greeting: {name: Ada, times: 0}, path: h.txt}",
            "greeting.times",
            "greater than or equal to 1",
        ),
        ("{greeting: {times: 2}, path: h.txt}", "greeting.name", "required field is missing"),
        ("{greeting: {name: Ada, times: 1}}", "path", "required field is missing"),
        ("{greeting: {name: Ada, times: 1}, path: h.txt, mood: x}", "mood", "unknown field"),
        ("{greeting: Ada, path: h.txt}", "greeting", "valid dictionary or instance of Greeting"),
    ],
    ids=["out-of-range", "missing-model-field", "missing-arg", "extra-arg", "not-a-model"],
)
@pytest.mark.usefixtures("isolated_registry")
def test_custom_tool_args_are_checked_against_the_tool_signature(
    tools_dir: Path, args: str, where: str, problem: str
) -> None:
    load_tool_modules(["my_tools.py"])
    (tools_dir / "plan.yaml").write_text(
        PLAN.replace("{greeting: {name: Ada, times: 2}, path: hello.txt}", args), encoding="utf-8"
    )

    with pytest.raises(PlanValidationError) as info:
        load_plan_file("plan.yaml")

    [found] = info.value.problems
    assert found.location == f"steps[0] (hi).args.{where}"
    assert problem in found.message


THREADS = """\
import threading

from onward import tool


@tool
def bounded() -> dict:
    return {"thread": threading.current_thread().name}


@tool(timeout=None)
def unbounded() -> dict:
    return {"thread": threading.current_thread().name}
"""


def test_a_tool_with_a_timeout_runs_on_a_worker_and_one_without_on_the_steps_thread(
    tmp_path: Path,
) -> None:
    """A timeout needs a call it can abandon (a worker thread); ``timeout=None`` runs the
    call on the step's own thread, without the hand-off (docs/tools.md)."""
    from onward import Plan, PlanStep

    tools = tmp_path / "thread_tools.py"
    tools.write_text(THREADS, encoding="utf-8")
    plan = Plan(
        steps=[
            PlanStep(id="b", tool="bounded", output="b"),
            PlanStep(id="u", tool="unbounded", output="u", depends_on=["b"]),
        ]
    )
    with Onward(str(tmp_path / "o.db"), model=None, tool_modules=[str(tools)]) as ow:
        tid = ow.start(plan=plan, workdir=tmp_path)
        assert ow.drive(tid).status == "done"
        ran = {e.step_id: e.detail["summary"] for e in ow.timeline(tid, kinds=["tool_called"])}
    assert ran["b"] == "thread='onward-tool'"
    assert ran["u"] != "thread='onward-tool'"
    assert ran["u"].startswith("thread=")
