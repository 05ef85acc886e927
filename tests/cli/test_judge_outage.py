"""A judge that gives no verdict is not a finding about the output: an outage, a refused key
or an unreadable verdict pauses the run for a person (or passes the output, by policy),
never crashes it, never leaves it ``running`` and never runs the tool again; the goal's
review that could not run is said in the result; and the judge sees what a step wrote."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from onward import Onward, Plan, PlanStep, RunPolicy
from onward.errors import DeterministicToolError
from onward.llm.fake import ScriptedChatModel
from tests.support.openai_fake import FakeOpenAI, Reply

OK = {"ok": True, "findings": []}

APPEND_TOOL = '''
from onward import ToolContext, tool


@tool
def append_line(path: str, text: str, ctx: ToolContext) -> dict:
    """Appends one line: every call leaves a trace in the file."""
    with ctx.path(path).open("a", encoding="utf-8") as f:
        f.write(text + "\\n")
    return {"path": path, "text": text}
'''


def _prompt(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(m.text for m in messages)


def _review_prompts(model: ScriptedChatModel, needle: str) -> list[str]:
    return [p for p in map(_prompt, model.calls) if needle in p]


def test_a_judge_outage_waits_for_a_person_and_resume_finishes_it_with_one_tool_call(
    run_cli: Any, workdir: Path
) -> None:
    (workdir / "append_tools.py").write_text(APPEND_TOOL)
    (workdir / "plan.yaml").write_text(
        "goal: log the release\nsteps:\n  - id: log\n    tool: append_line\n"
        "    args: {path: log.txt, text: released}\n    output: entry\n"
    )
    with FakeOpenAI(default=Reply(status=500)) as api:
        env = {"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": api.base_url}
        tools = ("--tools", "append_tools.py")
        run = run_cli(
            "run", "--plan", "plan.yaml", *tools, "--judge", "--thread-id", "t", "--json", env=env
        )
        assert (run.code, "Traceback" in run.stderr) == (3, False), run.stderr
        [question] = run.json()["pending"]
        assert question["kind"] == "judge"
        assert "the judge could not run" in question["reason"]
        assert "HTTP 500" in question["reason"]
        assert run.json()["usage"]["calls"] == 3  # the failed attempts are counted
        status = run_cli("status", "t", "--json", env=env)
        assert status.json()["status"] == "waiting_for_human"
        assert "HTTP 500" in status.json()["pending"][0]["reason"]
        [item] = run_cli("inbox", "--json", env=env).json()
        assert (item["kind"], item["step_id"]) == ("judge", "log")
        assert "HTTP 500" in item["reason"]

        api.default = Reply(status=401)  # a refused key: asked again, not retried
        refused = run_cli("resume", "t", "--json", *tools, env=env)
        assert (refused.code, "Traceback" in refused.stderr) == (3, False), refused.stderr
        assert "HTTP 401" in refused.json()["pending"][0]["reason"]

        api.default = Reply(json=OK)  # the model answers again
        done = run_cli("resume", "t", "--json", *tools, env=env)
    assert done.code == 0, done.stderr
    view = done.json()
    assert view["status"] == "done"
    assert (workdir / "log.txt").read_text() == "released\n"  # the tool ran once
    assert view["steps"][0]["attempts"] == 1
    retries = [d for d in view["decisions"] if d["kind"] == "judge"]
    assert [(d["action"], d["by"]) for d in retries] == [("retry", "onward resume")] * 2


def test_an_unreadable_verdict_twice_asks_a_person_and_never_reruns_the_tool(
    db_url: str, workdir: Path
) -> None:
    model = ScriptedChatModel(
        responses=["looks fine to me", "really, it is fine", "fine!", "fine."], default=OK
    )
    plan = Plan(
        steps=[PlanStep(id="w", tool="write_file", args={"path": "a.txt", "content": "hi"})]
    )
    with Onward(db_url, model=model) as ow:
        view = ow.run("write a.txt", plan=plan, judge=True)
        assert view.status == "waiting_for_human"
        [question] = view.pending
        assert question.kind == "judge"
        assert "unreadable twice" in (question.reason or "")
        assert view.usage.calls == 2
        assert (view.steps[0].status, view.steps[0].attempts) == ("produced", 1)
        again = ow.decide(view.thread_id, {"type": "retry"})  # unreadable twice more
        assert again.status == "waiting_for_human"
        assert again.steps[0].attempts == 1
        done = ow.decide(view.thread_id, {"type": "approve", "message": "I read it"})
        state = ow.state(view.thread_id)
    assert done.status == "done"
    assert done.steps[0].attempts == 1
    unjudged = state.record("w").unjudged or ""
    assert "unreadable twice" in unjudged
    assert "passed without review by" in unjudged
    assert len(_review_prompts(model, "Review the output")) == 4  # the goal's review is next


def test_by_policy_a_judge_that_cannot_run_passes_the_step_with_its_review_missing(
    db_url: str, workdir: Path
) -> None:
    refused = DeterministicToolError("model call refused: HTTP 401: invalid key")
    model = ScriptedChatModel(responses=[refused, OK])
    plan = Plan(steps=[PlanStep(id="n", tool="noop", args={"value": 1}, judge=True)])
    with Onward(db_url, model=model) as ow:
        view = ow.run("count", plan=plan, policy=RunPolicy(judge_failure="pass"))
        state = ow.state(view.thread_id)
    assert view.status == "done"
    assert "HTTP 401" in (state.record("n").unjudged or "")
    assert "judge_failure: pass" in (view.steps[0].note or "")


def test_a_goal_review_that_cannot_run_is_asked_and_said_in_the_result(
    db_url: str, workdir: Path
) -> None:
    refused = DeterministicToolError("model call refused: HTTP 403: forbidden")
    model = ScriptedChatModel(responses=[OK, refused])  # the step's review, the goal's
    plan = Plan(steps=[PlanStep(id="n", tool="noop", args={"value": 1})])
    with Onward(db_url, model=model) as ow:
        view = ow.run("count", plan=plan, judge=True)
        assert view.status == "waiting_for_human"
        [question] = view.pending
        assert (question.kind, question.step_id) == ("judge", None)
        assert "the goal review did not run: model call refused: HTTP 403" in (
            question.reason or ""
        )
        done = ow.decide(view.thread_id, {"type": "approve", "message": "checked by hand"})
    assert done.status == "done"
    assert "the goal review did not run" in done.report
    assert "passed the run without it: checked by hand" in done.report
    assert len(model.calls) == 2  # the answer is applied, the review not asked again


def test_by_policy_a_goal_review_that_cannot_run_ends_the_run_with_a_warning(
    db_url: str, workdir: Path
) -> None:
    model = ScriptedChatModel(responses=[OK, "no idea", "still no idea"])
    plan = Plan(steps=[PlanStep(id="n", tool="noop", args={"value": 1})])
    with Onward(db_url, model=model) as ow:
        view = ow.run("count", plan=plan, judge=True, policy=RunPolicy(judge_failure="pass"))
    assert view.status == "done"
    assert "**Warning:** the goal review did not run: the judge's verdict was unreadable" in (
        view.report
    )
    [logged] = [d for d in view.decisions if d.kind == "judge"]
    assert logged.by == "onward (run policy judge_failure: pass)"
    assert logged.reason.startswith("the goal review did not run")


def test_the_judges_see_the_text_a_step_wrote_from_a_reference(db_url: str, workdir: Path) -> None:
    model = ScriptedChatModel(responses=[], default=OK)
    plan = Plan(
        steps=[
            PlanStep(id="n", tool="noop", args={"value": "Quarterly report"}, output="notes"),
            PlanStep(
                id="w",
                tool="write_file",
                args={"path": "title.txt", "content": "${notes.value}"},
                depends_on=["n"],
                output="title",
            ),
        ]
    )
    with Onward(db_url, model=model) as ow:
        view = ow.run("write the title", plan=plan, judge=True)
        assert view.status == "done"
    [step_review] = [p for p in _review_prompts(model, "Review the output") if "write_file" in p]
    assert "title.txt:\nQuarterly report" in step_review  # the written file's head
    assert json.dumps({"path": "title.txt", "content": "Quarterly report"}) in step_review
    assert "UNTRUSTED DATA" in step_review.split("title.txt:\nQuarterly report")[0]
    [goal_review] = _review_prompts(model, "Judge the outcome")
    assert json.dumps({"value": "Quarterly report"}) in goal_review  # an excerpt, not a summary
    assert "title.txt:\nQuarterly report" in goal_review
