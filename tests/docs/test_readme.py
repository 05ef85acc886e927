"""The README and the docs stay true: the README's graph is the compiled graph, its test
command is what CI runs, and the examples of the docs' tools, plans and approvals pages
run (tests/docs/test_docs.py runs every other example)."""

from __future__ import annotations

import re
from pathlib import Path

from onward.graph.build import flow_mermaid, mermaid
from tests.support.paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


DOCS = ROOT / "docs"


def _block(after: str, lang: str, page: Path | None = None) -> str:
    text = README if page is None else page.read_text(encoding="utf-8")
    start = text.index(after)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert match, f"no {lang} block after {after!r}"
    return match.group(1)


def _between(text: str, name: str) -> str:
    return text.split(f"<!-- {name}:start -->")[1].split(f"<!-- {name}:end -->")[0].strip()


def test_readme_flow_is_drawn_from_the_route_table() -> None:
    assert _between(README, "flow") == f"```mermaid\n{flow_mermaid()}```", (
        "README flow view is stale: replace the block with `onward graph --flow`"
    )


def test_readme_graph_is_the_compiled_graph() -> None:
    """The exact graph lives on the docs' graph page (the README shows the flow view)."""
    block = _between((DOCS / "concepts" / "graph.md").read_text(encoding="utf-8"), "graph")
    assert block == f"```mermaid\n{mermaid()}```", (
        "docs graph is stale: replace the block with the output of `onward graph`"
    )


def test_readme_test_command_is_what_ci_runs() -> None:
    commands = _block("## Tests", "bash").strip().splitlines()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-len(commands) :] == commands


def test_readme_custom_tool_example_runs(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "my_tools.py").write_text(_block("## Custom tools", "python", DOCS / "tools.md"))
    (workdir / "plan.yaml").write_text(
        "steps:\n  - id: s\n    tool: stamp\n    args: {path: stamp.txt, text: hi}\n"
        "    checks: [{check: equals, field: chars, value: 2}]\n",
        encoding="utf-8",
    )
    result = run_cli("run", "--plan", "plan.yaml", "--tools", "my_tools.py", "--json")
    assert result.code == 0, result.stderr
    assert (workdir / "stamp.txt").read_text() == "hi"


def test_readme_declared_plan_example_is_valid(workdir: Path) -> None:
    from onward import load_plan_file

    plan_yaml = _block("## Declared plans", "yaml", DOCS / "plans.md")
    (workdir / "plan.yaml").write_text(plan_yaml, encoding="utf-8")
    goal, plan, concurrency = load_plan_file(workdir / "plan.yaml")
    assert goal.objective == "Copy the inbox into the archive"
    assert [s.id for s in plan.steps] == ["copy-a", "confirm"]
    assert concurrency == 4


def test_example_plan_runs(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    shutil.copytree(ROOT / "examples", workdir / "examples")
    result = run_cli(
        "run", "--plan", "examples/archive-plan.yaml", "--workdir", "examples", "--json"
    )
    assert result.code == 0, result.stderr
    assert sorted(p.name for p in (workdir / "examples" / "archive").iterdir()) == [
        "a.txt",
        "b.txt",
        "c.txt",
        "manifest.json",
    ]


def test_readme_policy_example_loads(workdir: Path) -> None:
    from datetime import timedelta

    from onward.policies.run import load_policy_file

    policy_yaml = _block("# Approvals and people", "yaml", DOCS / "approvals.md")
    (workdir / "policy.yaml").write_text(policy_yaml)
    policy = load_policy_file(workdir / "policy.yaml")
    assert policy.approve_tools == {"write_file"}
    assert policy.auto_approve == {"notify"}
    assert policy.allow_tools is not None
    assert "pay" in policy.allow_tools
    assert policy.deadline.expire_after == timedelta(hours=24)
    assert policy.deadline_for("pay").expire_after == timedelta(minutes=30)
