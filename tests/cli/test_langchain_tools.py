"""LangChain tools as onward tools: a ``@tool`` function and a ``BaseTool`` subclass run
from a declared plan (``--tools`` in a new process, and from Python); their args schema
validates the plan; one registered without a side-effect class is unsafe (asks first, runs
once after approval); a ``ToolException`` is a deterministic failure."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import BaseTool, ToolException, tool
from pydantic import BaseModel

from onward import (
    Onward,
    PlanValidationError,
    Registry,
    RunPolicy,
    SideEffect,
    default_registry,
    register_langchain_tool,
)

LC_TOOLS = '''\
from langchain_core.tools import BaseTool, ToolException, tool
from pydantic import BaseModel

from onward import register_langchain_tool


@tool
def shout(text: str, times: int = 1) -> str:
    """Shout the text."""
    return (text.upper() + "!") * times


@tool
def append_line(path: str, line: str) -> dict:
    """Append a line to a file (says nothing about its side effect)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\\n")
    return {"path": path}


class Word(BaseModel):
    word: str


class Lookup(BaseTool):
    name: str = "lookup"
    description: str = "Look a word up."
    args_schema: type[BaseModel] = Word

    def _run(self, word: str) -> dict:
        if word == "zzz":
            raise ToolException(f"no entry for {word!r}")
        return {"word": word, "letters": len(word)}


lookup = Lookup()
register_langchain_tool(shout, side_effect="pure")
register_langchain_tool(lookup, side_effect="pure")
'''

PURE_PLAN = """\
goal: shout and look up
steps:
  - {id: loud, tool: shout, args: {text: hi, times: 2}, output: loud}
  - {id: look, tool: lookup, args: {word: onward}, output: entry,
     checks: [{check: equals, field: letters, value: 6}]}
"""
UNSAFE_PLAN = """\
goal: log a line
steps:
  - {id: log, tool: append_line, args: {path: log.txt, line: shipped}}
"""


@pytest.fixture
def lc_dir(workdir: Path) -> Path:
    (workdir / "lc_tools.py").write_text(LC_TOOLS, encoding="utf-8")
    return workdir


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(default_registry, "_specs", dict(default_registry._specs))
    for name in [m for m in sys.modules if m.startswith("onward_user_tools_")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [m for m in sys.modules if m.startswith("onward_user_tools_")]:
        del sys.modules[name]


def test_a_tool_function_and_a_basetool_run_from_a_plan_given_tools(
    run_cli: Any, lc_dir: Path, db_url: str
) -> None:
    (lc_dir / "plan.yaml").write_text(PURE_PLAN, encoding="utf-8")

    result = run_cli("run", "--plan", "plan.yaml", "--tools", "lc_tools.py", "--json")

    assert result.code == 0, result.stdout + result.stderr
    view = result.json()
    assert [(s["id"], s["status"]) for s in view["steps"]] == [("loud", "done"), ("look", "done")]
    with Onward(db_url, model=None) as ow:
        run = ow.get(view["thread_id"])
        assert run.artifact_value(ow, "loud") == "HI!HI!"
        assert run.artifact_value(ow, "entry") == {"word": "onward", "letters": 6}


def test_a_langchain_tool_that_says_nothing_asks_first_and_runs_once_approved(
    run_cli: Any, lc_dir: Path
) -> None:
    (lc_dir / "plan.yaml").write_text(UNSAFE_PLAN, encoding="utf-8")
    tools = ("--tools", "lc_tools.py")

    asked = run_cli("run", "--plan", "plan.yaml", *tools, "--thread-id", "t", "--json")

    assert asked.code == 3, asked.stdout + asked.stderr
    [question] = asked.json()["pending"]
    assert (question["kind"], question["tool"]) == ("approval", "append_line")
    assert question["args"] == {"path": "log.txt", "line": "shipped"}
    assert not (lc_dir / "log.txt").exists()

    approved = run_cli("approve", "t", "--json", *tools)

    assert approved.code == 0, approved.stdout + approved.stderr
    assert approved.json()["status"] == "done"
    assert (lc_dir / "log.txt").read_text(encoding="utf-8") == "shipped\n"  # exactly once


@pytest.mark.parametrize(
    ("args", "named"),
    [("{text: hi, loud: true}", "loud"), ("{text: hi, times: many}", "times")],
)
def test_the_tools_args_schema_validates_the_plan(
    run_cli: Any, lc_dir: Path, args: str, named: str
) -> None:
    plan = f"goal: shout\nsteps:\n  - {{id: s, tool: shout, args: {args}}}\n"
    (lc_dir / "plan.yaml").write_text(plan, encoding="utf-8")

    result = run_cli("run", "--plan", "plan.yaml", "--tools", "lc_tools.py", "--json")

    assert result.code == 2, result.stdout + result.stderr
    assert named in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


# -- from Python --------------------------------------------------------------------------


class Word(BaseModel):
    word: str


class Lookup(BaseTool):
    name: str = "lookup"
    description: str = "Look a word up."
    args_schema: type[BaseModel] = Word
    calls: int = 0

    def _run(self, word: str) -> dict[str, Any]:
        self.calls += 1
        if word == "zzz":
            raise ToolException(f"no entry for {word!r}")
        return {"word": word, "letters": len(word)}


@tool
def shout(text: str) -> str:
    """Shout the text."""
    return text.upper() + "!"


def registry_with(*tools: BaseTool, side_effect: str = "pure") -> Registry:
    registry = Registry(default_registry)  # the built-ins, and these
    for t in tools:
        register_langchain_tool(t, side_effect=side_effect, registry=registry)
    return registry


def lookup_plan(word: str) -> dict[str, Any]:
    return {
        "goal": "look a word up",
        "steps": [
            {"id": "s", "tool": "shout", "args": {"text": word}, "output": "loud"},
            {"id": "look", "tool": "lookup", "args": {"word": word}, "output": "entry"},
        ],
    }


def test_langchain_tools_run_from_python_with_their_declared_class(
    db_url: str, workdir: Path
) -> None:
    lookup = Lookup()
    registry = registry_with(lookup, shout)
    assert registry.get("lookup") is not None
    assert registry.get("lookup").side_effect is SideEffect.PURE  # type: ignore[union-attr]

    with Onward(db_url, registry=registry, model=None) as ow:
        view = ow.run(plan=lookup_plan("ada"))
        entry = view.artifact_value(ow, "entry")

    assert view.status == "done", view
    assert entry == {"word": "ada", "letters": 3}
    assert lookup.calls == 1


def test_a_tool_exception_is_a_deterministic_failure(db_url: str, workdir: Path) -> None:
    registry = registry_with(Lookup(), shout)

    with Onward(db_url, registry=registry, model=None) as ow:
        view = ow.run(plan=lookup_plan("zzz"), policy=RunPolicy(escalate_failures=False))

    assert view.status == "failed"
    step = next(s for s in view.steps if s.id == "look")
    assert (step.status, step.failure_class) == ("failed", "deterministic")
    assert step.error == "lookup: no entry for 'zzz'"


def test_an_unknown_arg_of_a_python_registered_tool_is_refused_before_the_run(
    db_url: str, workdir: Path
) -> None:
    registry = registry_with(Lookup(), shout)
    plan = {"goal": "g", "steps": [{"id": "s", "tool": "lookup", "args": {"wrd": "x"}}]}

    with (
        Onward(db_url, registry=registry, model=None) as ow,
        pytest.raises(PlanValidationError, match="wrd"),
    ):
        ow.start(plan=plan)


@pytest.mark.usefixtures("isolated_registry")
def test_a_tools_module_adopts_its_unregistered_langchain_tools_as_unsafe(lc_dir: Path) -> None:
    from onward.tools import load_tool_modules

    load_tool_modules([str(lc_dir / "lc_tools.py")])

    classes = {n: default_registry.get(n).side_effect for n in ("shout", "lookup", "append_line")}  # type: ignore[union-attr]
    assert classes == {
        "shout": SideEffect.PURE,
        "lookup": SideEffect.PURE,
        "append_line": SideEffect.UNSAFE,
    }
    assert default_registry.get("append_line").requires_approval  # type: ignore[union-attr]


def test_a_tool_calling_step_calls_langchain_tools_and_the_unsafe_one_asks_inside(
    lc_dir: Path, db_url: str, isolated_registry: None
) -> None:
    from onward import ScriptedChatModel
    from onward.llm.fake import tool_calls

    model = ScriptedChatModel(
        responses=[
            tool_calls(("lookup", {"word": "onward"})),
            tool_calls(("append_line", {"path": "log.txt", "line": "onward: 6 letters"})),
            "Looked it up and logged it.",
        ]
    )
    step = {
        "id": "agent",
        "tool": "tool_calling",
        "output": "answer",
        "args": {
            "instruction": "Look 'onward' up and log its length.",
            "tools": ["lookup", "append_line"],
            "max_calls": 4,
        },
    }
    modules = [str(lc_dir / "lc_tools.py")]
    with Onward(db_url, tool_modules=modules, model=model) as ow:
        view = ow.run(plan={"goal": "log a word", "steps": [step]}, thread_id="lc", workdir=lc_dir)
        assert view.status == "waiting_for_human", view
        [question] = ow.pending("lc")
        # append_line said nothing of its side effect: unsafe, asked inside the step.
        assert (question.step_id, question.tool) == ("agent", "append_line")
        assert question.args == {"path": "log.txt", "line": "onward: 6 letters"}
        assert not (lc_dir / "log.txt").exists()
        done = ow.decide("lc", {"type": "approve"})
        answer = done.artifact_value(ow, "answer")
    assert done.status == "done", done
    assert answer == "Looked it up and logged it."
    assert (lc_dir / "log.txt").read_text(encoding="utf-8") == "onward: 6 letters\n"
    [result] = [m for m in model.calls[1] if m.type == "tool"]
    assert '"letters": 6' in result.text  # the pure lookup ran without asking
