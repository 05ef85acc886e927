"""``approve --no-continue`` (``decide(..., continue_run=False)``) about a call inside a
tool-calling step records the answer and stops before the call runs; the question is no
longer pending, and ``resume`` goes on from inside the step: the recorded turns and calls
replayed, the answer taken, the approved call run once, no turn asked twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import tests.support.tool_calling_tools  # registers lookup, save_note, publish
from onward import Onward
from tests.support.openai_fake import FakeOpenAI, Reply
from tests.support.tool_calling_steps import effects, plan, scripted, turn_of


def test_an_answer_without_continuing_is_recorded_and_resume_goes_on_inside_the_step(
    db_url: str, workdir: Path
) -> None:
    model = scripted()
    with Onward(db_url, model=model) as ow:
        ow.run(plan=plan(), thread_id="t")
        stopped = ow.decide("t", {"type": "approve"}, by="ann", continue_run=False)
        ran_before_resume = effects(workdir)["publish"]
        pending = ow.pending("t")
        done = ow.resume("t")
        ledger = ow.store.ledger.for_thread("t")

    assert stopped.status != "done", stopped
    assert ran_before_resume == 0  # only recorded
    assert pending == []  # answered: nothing asked until the run goes on
    assert done.status == "done", done
    assert effects(workdir) == {"save_note": 1, "publish": 1}
    [approval] = [e for e in ledger if e.tool == "tool_calling.approval"]
    assert (approval.result["by"], approval.calls) == ("ann", 1)
    asked = [turn_of(m) for m in model.calls if "You may call the tools" in m[0].text]
    assert Counter(asked) == {0: 1, 1: 1, 2: 1, 3: 1}  # no turn asked twice


def test_onward_approve_no_continue_records_and_exits_0_and_resume_finishes(
    run_cli: Any, workdir: Path
) -> None:
    tools = str(Path(tests.support.tool_calling_tools.__file__))
    (workdir / "plan.json").write_text(json.dumps(plan()), encoding="utf-8")
    with FakeOpenAI() as api:
        api.script = [
            Reply(tool_args={"key": "revenue"}, tool_name="lookup"),
            Reply(tool_args={"path": "note.txt", "text": "Up 20 %."}, tool_name="save_note"),
            Reply(tool_args={"title": "Revenue up 20 %"}, tool_name="publish"),
            Reply(text="Published."),
        ]
        env = {
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": api.base_url,
            "ONWARD_MODEL": "gpt-4o-mini",
        }
        asked = run_cli(
            "run", "--plan", "plan.json", "--tools", tools, "--thread-id", "t", "--json", env=env
        )
        recorded = run_cli("approve", "t", "--no-continue", "--json", env=env)
        published_before_resume = effects(workdir)["publish"]
        resumed = run_cli("resume", "t", "--json", env=env)

    assert asked.code == 3, asked.stdout + asked.stderr
    assert recorded.code == 0, recorded.stdout + recorded.stderr
    assert recorded.json()["pending"] == []
    assert published_before_resume == 0
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert resumed.json()["status"] == "done"
    assert effects(workdir) == {"save_note": 1, "publish": 1}
    assert len(api.requests) == 4  # each turn asked once across the three processes
