"""A milestone's expansion answer is recorded in the effect ledger as it arrives (like a
tool-calling step's turns): a SIGKILL between the model's answer and the checkpoint of the
plan revision resumes with the recorded answer, so the model is asked once, the plan is
expanded once and the answer's usage is counted once. A person's retry after a failed
expansion is a new conversation (asked again, not replayed)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from onward import Onward, ScriptedChatModel
from tests.support.common import cli_env
from tests.support.milestones import EXPANSION, KILLED_RUN, plan, section, sources


def killed_after_the_answer(db_url: str, workdir: Path) -> None:
    """A run killed when the expansion's answer is recorded and its plan revision is not
    yet checkpointed (ONWARD_FAULT_KILL=after_record:m1)."""
    (workdir / "killed.py").write_text(KILLED_RUN, encoding="utf-8")
    args = [db_url, json.dumps(plan()), json.dumps(EXPANSION), "after"]
    proc = subprocess.run(
        [sys.executable, "killed.py", *args],
        cwd=workdir,
        env=cli_env(ONWARD_FAULT_KILL="after_record:m1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_an_expansion_answered_but_not_checkpointed_is_replayed_not_asked_again(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    killed_after_the_answer(db_url, workdir)
    with Onward(db_url, model=None) as ow:
        before = ow.state("t")
    assert before.plan.version == 1  # the kill came before the revision's checkpoint
    assert [s.id for s in before.plan.steps] == ["s1", "m1", "final"]

    other = {"steps": [section("x"), section("y")]}  # a second answer would differ
    model = ScriptedChatModel(responses=[other])
    with Onward(db_url, model=model) as ow:
        view = ow.resume("t")
        state = ow.state("t")
        recorded = [e for e in ow.store.ledger.for_thread("t") if e.tool == "planner.answer"]

    assert view.status == "done", view.failure
    assert model.calls == []  # the killed process's answer was replayed
    assert [s.id for s in state.plan.steps] == ["s1", "sec-a", "sec-b", "final"]
    assert state.plan.version == 2
    assert len([d for d in view.decisions if d.action == "expand"]) == 1
    assert sorted(p.name for p in (workdir / "sections").iterdir()) == ["a.md", "b.md"]
    assert [(e.calls, e.status.value) for e in recorded] == [(1, "completed")]
    assert state.usage.calls == 1  # the replayed answer's usage, counted once


def test_a_persons_retry_of_a_failed_expansion_asks_the_model_again(
    db_url: str, workdir: Path
) -> None:
    sources(workdir)
    bad = {"steps": [{"id": "x", "tool": "no_such_tool", "args": {}, "depends_on": ["s1"]}]}
    model = ScriptedChatModel(responses=[bad, bad, bad, EXPANSION])
    with Onward(db_url, model=model) as ow:
        waiting = ow.run(plan=plan(), thread_id="t")
        done = ow.decide("t", {"type": "retry"}, by="ann")
        recorded = [e for e in ow.store.ledger.for_thread("t") if e.tool == "planner.answer"]

    assert waiting.status == "waiting_for_human", waiting
    assert done.status == "done", done.failure
    assert len(model.calls) == 4  # three drafts, then the retry's own
    assert len(recorded) == 4
