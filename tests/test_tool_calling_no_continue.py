"""``approve --no-continue`` about a call inside a tool-calling step should record the
answer and stop, and ``resume`` go on from inside the step with no call repeated. Today
the answer drives the step and the run to their end (docs/model-steps.md, "Not yet"):
this test is the target, marked as an expected failure until the driver can stop inside
a step (strict, so it says when it starts passing)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import tests.tool_calling_tools  # noqa: F401  (registers lookup, save_note, publish)
from onward import Onward
from tests.test_tool_calling_steps import effects, plan, scripted, turn_of


@pytest.mark.xfail(
    strict=True,
    reason="an answer inside a tool-calling step cannot yet stop the drive after it is "
    "recorded: continue_run=False runs the step and the run to their end",
)
def test_an_answer_without_continuing_is_recorded_and_resume_goes_on_inside_the_step(
    db_url: str, workdir: Path
) -> None:
    model = scripted()
    with Onward(db_url, model=model) as ow:
        ow.run(plan=plan(), thread_id="t")
        stopped = ow.decide("t", {"type": "approve"}, by="ann", continue_run=False)
        ran_before_resume = effects(workdir)["publish"]
        done = ow.resume("t")
        ledger = ow.store.ledger.for_thread("t")

    assert stopped.status != "done", stopped
    assert ran_before_resume == 0  # only recorded
    assert done.status == "done", done
    assert effects(workdir) == {"save_note": 1, "publish": 1}
    [approval] = [e for e in ledger if e.tool == "tool_calling.approval"]
    assert (approval.result["by"], approval.calls) == ("ann", 1)
    asked = [turn_of(m) for m in model.calls if "You may call the tools" in m[0].text]
    assert Counter(asked) == {0: 1, 1: 1, 2: 1, 3: 1}  # no turn asked twice
