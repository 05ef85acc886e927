"""A person approves what will run: a step whose args refer to an artifact (``${notes.text}``)
is shown with the referenced values resolved (bounded, the reference named) in the CLI's
inbox, the question every face renders (chat cards, notebook, web page: its description),
``inbox --json``, and the audit trail (the approval events)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onward import Onward, Plan, PlanStep
from onward.model.state import ArtifactRef
from onward.people.approvals import SHOWN_CHARS, resolved_args
from onward.policies.run import RunPolicy

PLAN = """\
goal: send the note on
steps:
  - id: notes
    tool: read_file
    args: {path: note.txt}
    output: notes
  - id: send
    tool: write_file
    args: {path: out/sent.txt, content: "${notes.text}"}
    depends_on: [notes]
"""


def test_the_inbox_shows_the_value_a_reference_stands_for(workdir: Path, run_cli: Any) -> None:
    (workdir / "note.txt").write_text("ship it\n")
    (workdir / "plan.yaml").write_text(PLAN)
    waits = run_cli(
        "run", "--plan", "plan.yaml", "--approve-tools", "write_file", "--thread-id", "t1"
    )
    assert waits.code == 3, waits.stderr
    inbox = run_cli("inbox")
    assert inbox.code == 0, inbox.stderr
    assert 'content = "ship it\\n" (from notes.text)' in " ".join(inbox.stdout.split())
    [item] = run_cli("inbox", "--json").json()
    assert item["resolved"] == [{"arg": "content", "from": "notes.text", "value": '"ship it\\n"'}]
    assert 'content = "ship it\\n" (from notes.text)' in item["description"]
    assert item["args"]["content"] == "${notes.text}"  # the args as written, as bound
    done = run_cli("approve", "t1", "--step", "send")
    assert done.code == 0, done.stderr
    assert (workdir / "out" / "sent.txt").read_text() == "ship it\n"


def test_the_audit_trail_records_the_values_that_were_approved(ow: Onward, workdir: Path) -> None:
    (workdir / "note.txt").write_text("ship it\n")
    steps = [
        PlanStep(id="notes", tool="read_file", args={"path": "note.txt"}, output="notes"),
        PlanStep(
            id="send",
            tool="write_file",
            args={"path": "out/sent.txt", "content": "${notes.text}"},
            depends_on=["notes"],
        ),
    ]
    policy = RunPolicy(approve_tools=frozenset({"write_file"}))
    view = ow.run("send the note on", plan=Plan(steps=steps), policy=policy)
    [question] = ow.pending(view.thread_id)
    assert question.resolved == [{"arg": "content", "from": "notes.text", "value": '"ship it\\n"'}]
    ow.approve(view.thread_id, step="send", by="ada")
    wanted = [{"arg": "content", "from": "notes.text", "value": '"ship it\\n"'}]
    events = ow.timeline(view.thread_id, kinds=["approval_requested", "approval_decided"])
    assert [e.kind for e in events] == ["approval_requested", "approval_decided"]
    assert all(e.detail["resolved"] == wanted for e in events)


def test_a_long_or_unreadable_value_is_bounded_and_says_so() -> None:
    long = {"text": "x" * 5_000, "rows": [1, 2]}
    ref = ArtifactRef(name="big", uri="artifact://sha256/0", sha256="0", size=1)
    step = PlanStep(
        id="s",
        tool="write_file",
        args={"a": "${big.text}", "b": ["${big.rows[1]}"], "c": "${big.nothing}", "d": "${gone}"},
    )
    shown = resolved_args(step, {"big": ref}, lambda _ref: long)
    by_arg = {r["arg"]: r for r in shown}
    assert by_arg["a"]["value"].endswith("(5002 characters in all)")
    assert len(by_arg["a"]["value"]) < SHOWN_CHARS + 40
    assert by_arg["b[0]"] == {"arg": "b[0]", "from": "big.rows[1]", "value": "2"}
    assert "has no field 'nothing'" in by_arg["c"]["value"]
    assert "not produced yet" in by_arg["d"]["value"]
