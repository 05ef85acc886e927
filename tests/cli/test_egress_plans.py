"""A network call the egress policy refuses is refused when the plan is validated, so
nobody is asked to approve a call that can never run: a declared plan fails with exit 2
naming the host and ONWARD_HTTP_ALLOW, a model's draft is sent back, and nothing waits in
the inbox. A URL that comes from an artifact (``${ref}``) is checked when the step runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, Plan, PlanStep
from onward.llm.fake import ScriptedChatModel

REFUSED = "http://127.0.0.1:9/hook"
ALLOWED_HOST = "127.0.0.1:8"


def _plan_file(workdir: Path, url: str) -> None:
    plan = {
        "goal": "tell the hook",
        "steps": [{"id": "tell", "tool": "http_post", "args": {"url": url, "payload": {"a": 1}}}],
    }
    (workdir / "plan.yaml").write_text(json.dumps(plan))


def test_a_declared_call_to_a_refused_host_fails_before_anyone_is_asked(
    workdir: Path, run_cli: Any
) -> None:
    _plan_file(workdir, REFUSED)
    env = {"ONWARD_HTTP_ALLOW": ALLOWED_HOST}
    refused = run_cli("run", "--plan", "plan.yaml", "--thread-id", "e1", env=env)
    assert refused.code == 2, refused.stdout + refused.stderr
    assert "host 127.0.0.1:9 is not allowed" in refused.stderr
    assert "add 127.0.0.1:9 to ONWARD_HTTP_ALLOW" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert "nothing is waiting" in run_cli("inbox").stdout


def test_a_call_to_an_allowed_host_is_put_to_a_person_as_before(
    workdir: Path, run_cli: Any
) -> None:
    _plan_file(workdir, f"http://{ALLOWED_HOST}/hook")
    asked = run_cli(
        "run", "--plan", "plan.yaml", "--thread-id", "e2", env={"ONWARD_HTTP_ALLOW": ALLOWED_HOST}
    )
    assert asked.code == 3, asked.stdout + asked.stderr
    assert "e2" in run_cli("inbox").stdout


def test_a_url_from_an_artifact_is_checked_when_the_step_runs(
    ow: Onward, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONWARD_HTTP_ALLOW", ALLOWED_HOST)
    where = PlanStep(id="where", tool="noop", args={"value": REFUSED}, output="where")
    look = PlanStep(id="look", tool="http_get", args={"url": REFUSED})
    refused = ow.run("look it up", plan=Plan(steps=[look]))
    assert refused.status == "failed"
    assert refused.failure is not None
    assert "host 127.0.0.1:9 is not allowed" in refused.failure.message
    assert [s.attempts for s in refused.steps] == [0]  # never ran
    by_ref = look.model_copy(update={"args": {"url": "${where.value}"}, "depends_on": ["where"]})
    view = ow.run("look it up", plan=Plan(steps=[where, by_ref]))
    failed = {s.id: s for s in view.steps}["look"]
    assert failed.attempts == 1
    assert failed.error is not None
    assert "host 127.0.0.1:9 is not allowed" in failed.error


def test_a_models_draft_calling_a_refused_host_is_sent_back(
    db_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONWARD_HTTP_ALLOW", ALLOWED_HOST)
    draft = {"steps": [{"id": "look", "tool": "http_get", "args": {"url": REFUSED}}]}
    fixed = {"steps": [{"id": "note", "tool": "noop", "args": {"value": 1}}]}
    model = ScriptedChatModel(responses=[draft, fixed])
    with Onward(db_url, model=model) as ow:
        view = ow.run("look something up no template knows")
    assert view.status == "done", view.failure
    told = "\n".join(m.text for m in model.calls[1])
    assert "host 127.0.0.1:9 is not allowed" in told
