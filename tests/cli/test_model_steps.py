"""Model steps (the built-in ``model_step``): one model call inside a step, its inputs by
reference and fenced, its output verified like any step's; an output that fails its
contract or a check goes back to the model with the findings; refusals and outages fail
the step clearly; the answer is recorded in the effect ledger, so a resume after a kill
does not ask the model again. Every model here is ``ScriptedChatModel``."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.messages import BaseMessage

from onward import Budget, Onward, PlanValidationError, RunPolicy, ScriptedChatModel
from tests.support.common import cli_env
from tests.support.model_steps import NOTES, plan, prompt


def fenced(messages: Sequence[BaseMessage], label: str) -> list[str]:
    """The bodies of the prompt's fences with ``label``, between markers that carry the
    prompt's nonce."""
    text = prompt(messages)
    [nonce] = set(re.findall(r"<<<END UNTRUSTED DATA ([0-9a-f]{16})>>>", text))
    pattern = (
        rf"<<<UNTRUSTED DATA {nonce}: {re.escape(label)}>>>\n(.*?)\n"
        rf"<<<END UNTRUSTED DATA {nonce}>>>"
    )
    return re.findall(pattern, text, re.S)


def notes(workdir: Path) -> None:
    (workdir / "notes.txt").write_text(NOTES, encoding="utf-8")


def test_an_answer_that_fails_its_schema_goes_back_with_the_findings_and_the_next_passes(
    db_url: str, workdir: Path
) -> None:
    notes(workdir)
    model = ScriptedChatModel(
        responses=[{"title": "A title far too long for the schema"}, {"title": "Revenue up 20 %"}]
    )
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())
        state = ow.state(view.thread_id)
        value = view.artifact_value(ow, "title")

    assert view.status == "done", view
    assert value == {"title": "Revenue up 20 %"}
    assert len(model.calls) == 2
    first, second = model.calls
    assert fenced(first, "your previous answer") == []
    too_long = '{"title": "A title far too long for the schema"}'
    assert fenced(second, "your previous answer") == [too_long]
    [findings] = fenced(second, "what the checks found wrong with it")
    assert "title: String should have at most 20 characters" in findings
    assert "Answer again, fixing every finding" in prompt(second)
    step = next(s for s in view.steps if s.id == "title")
    assert [f.failure_class for f in step.failures] == ["validation"]
    [decision] = [d for d in view.decisions if d.action == "replan"]
    assert decision.by == "onward-replanner"
    assert "model_step.fix_args" in decision.reason
    assert state.plan.step("title").args["round"] == 2
    assert state.usage.calls == 2  # both of the step's calls count in the run's usage
    assert state.usage.input_tokens > 0


def test_an_answer_that_fails_a_step_check_goes_back_to_the_model(
    db_url: str, workdir: Path
) -> None:
    notes(workdir)
    checks = [{"check": "matches", "pattern": "(?i)revenue"}]
    model = ScriptedChatModel(responses=[{"text": "Costs are flat"}, "Revenue grew"])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan("text", checks))
        value = view.artifact_value(ow, "title")

    assert view.status == "done", view
    assert value == "Revenue grew"  # a text answer may come bare or in its envelope
    assert fenced(model.calls[1], "your previous answer") == ["Costs are flat"]
    [findings] = fenced(model.calls[1], "what the checks found wrong with it")
    assert "matches" in findings
    assert "revenue" in findings


def test_inputs_come_from_an_artifact_by_reference_and_travel_fenced(
    db_url: str, workdir: Path
) -> None:
    notes(workdir)
    model = ScriptedChatModel(responses=[{"title": "Revenue up"}])
    with Onward(db_url, model=model) as ow:
        view = ow.run(plan=plan())

    assert view.status == "done", view
    [call] = model.calls
    assert fenced(call, "artifact") == ["notes: " + json.dumps(NOTES)]
    [instruction] = fenced(call, "instruction of the step (from the plan)")
    assert instruction == "Give the notes a short title."
    assert call[0].text.startswith("You do the work of one step of a plan inside onward")


def test_a_refusal_fails_the_step_with_the_models_words(db_url: str, workdir: Path) -> None:
    notes(workdir)
    model = ScriptedChatModel(responses=["I'm sorry, I can't help with that."])
    with Onward(db_url, model=model) as ow:
        view = ow.run(
            plan=plan(),
            budget=Budget(max_replans=0),
            policy=RunPolicy(escalate_failures=False),
        )

    assert view.status == "failed", view
    step = next(s for s in view.steps if s.id == "title")
    assert step.status == "failed"
    assert step.error is not None
    assert "the model refused: I'm sorry, I can't help with that." in step.error
    assert "(was deterministic)" in step.error
    assert view.usage.calls == 1


def test_a_model_outage_fails_the_step_as_transient_after_its_retries(
    db_url: str, workdir: Path
) -> None:
    notes(workdir)
    model = ScriptedChatModel(default=ConnectionError("the provider is down"))
    with Onward(db_url, model=model, sleep=lambda s: None) as ow:
        view = ow.run(plan=plan(), policy=RunPolicy(escalate_failures=False))

    assert view.status == "failed", view
    step = next(s for s in view.steps if s.id == "title")
    assert step.error is not None
    assert "model call failed: ConnectionError: the provider is down" in step.error
    assert "(was transient)" in step.error
    *retried, last = [f.failure_class for f in step.failures]
    assert set(retried) == {"transient"}
    assert last == "non_convergent"
    assert view.usage.calls == len(model.calls)  # every failed attempt is counted


def test_a_model_step_without_a_model_says_how_to_get_one(db_url: str, workdir: Path) -> None:
    notes(workdir)
    with Onward(db_url, model=None) as ow:
        view = ow.run(plan=plan(), policy=RunPolicy(escalate_failures=False))

    assert view.status == "failed"
    step = next(s for s in view.steps if s.id == "title")
    assert step.error is not None
    assert "a model step needs a model" in step.error


def test_a_contract_onward_cannot_check_is_a_plan_validation_error(
    db_url: str, workdir: Path
) -> None:
    notes(workdir)
    bad = {"type": "object", "properties": {"a": {"$ref": "#/defs/x"}}}
    with Onward(db_url, model=None) as ow, pytest.raises(PlanValidationError, match=r"\$ref"):
        ow.start(plan=plan(bad))


# -- killed and resumed -------------------------------------------------------------------

KILLED_RUN = """
import json, os, signal, sys
from onward import Onward, ScriptedChatModel

plan = json.loads(sys.argv[2])
answer = {"title": "Revenue up"}
if sys.argv[3] == "inside":  # the process dies while the model answers
    answer = lambda messages: os.kill(os.getpid(), signal.SIGKILL)
model = ScriptedChatModel(responses=[answer])
with Onward(sys.argv[1], model=model) as ow:
    ow.run(plan=plan, thread_id="t")
"""


def kill_run(db_url: str, workdir: Path, where: str) -> None:
    (workdir / "killed.py").write_text(KILLED_RUN, encoding="utf-8")
    env = cli_env(ONWARD_FAULT_KILL="after_record:title" if where == "after" else "")
    proc = subprocess.run(
        [sys.executable, "killed.py", db_url, json.dumps(plan()), where],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_finished_model_step_is_not_asked_again_after_a_kill(db_url: str, workdir: Path) -> None:
    """Killed after the ledger recorded the answer and before the checkpoint: the resume
    takes the answer from the ledger."""
    notes(workdir)
    kill_run(db_url, workdir, "after")
    model = ScriptedChatModel()  # no answers: a call would fail the step
    with Onward(db_url, model=model) as ow:
        view = ow.resume("t")
        value = view.artifact_value(ow, "title")
        [effect] = [e for e in ow.store.ledger.for_thread("t") if e.step_id == "title"]

    assert view.status == "done", view
    assert model.calls == []
    assert value == {"title": "Revenue up"}
    assert (effect.tool, effect.status.value) == ("model_step", "completed")


def test_a_model_step_killed_while_the_model_answers_asks_again_once(
    db_url: str, workdir: Path
) -> None:
    """Killed before the answer was recorded: the call is idempotent, so the resume asks
    again (with the same key), once."""
    notes(workdir)
    kill_run(db_url, workdir, "inside")
    model = ScriptedChatModel(responses=[{"title": "Revenue up"}])
    with Onward(db_url, model=model) as ow:
        view = ow.resume("t")

    assert view.status == "done", view
    assert len(model.calls) == 1
