"""A step a person rejects is a decision, not a failure: a copy of three files with one
rejected ends ``done`` (exit 0), its final message says which step was skipped and why,
and the goal's acceptance check follows what was approved (two files expected, not
three). A check about steps that did not run for another reason still fails the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from onward.verification.checks import FileCount, FileExists, following

GOAL = "copy every file in inbox/ to archive/"


def _inbox(workdir: Path) -> None:
    (workdir / "inbox").mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (workdir / "inbox" / name).write_text(name)


def test_a_copy_a_person_rejects_ends_done_and_says_so(workdir: Path, run_cli: Any) -> None:
    _inbox(workdir)
    asked = run_cli("run", GOAL, "--approve-tools", "copy_file", "--thread-id", "c1")
    assert asked.code == 3, asked.stderr
    ids = [s["id"] for s in run_cli("status", "c1", "--json").json()["steps"]]
    rejected = next(i for i in ids if "b" in i)
    no = run_cli("reject", "c1", "--step", rejected, "--reason", "not this one")
    assert no.code in (0, 3), no.stderr
    for sid in ids:
        if sid != rejected:
            yes = run_cli("approve", "c1", "--step", sid)
            assert yes.code in (0, 3), yes.stderr
    view = run_cli("status", "c1", "--json").json()
    assert view["status"] == "done", view["failure"]
    assert sorted(p.name for p in (workdir / "archive").iterdir()) == ["a.txt", "c.txt"]
    report = view["report"]
    assert f"**1 step skipped by decision:** {rejected} (rejected by" in report
    assert "not this one" in report
    assert "Acceptance: 1 check(s) passed." in report
    assert run_cli("status", "c1").code == 0


def test_a_count_follows_the_skipped_steps_it_is_about() -> None:
    count = FileCount(path="archive", min=3, steps=["a", "b", "c"])
    assert following(count, set()) is count
    assert following(count, {"b", "x"}) == count.model_copy(update={"min": 2})
    assert following(FileCount(path="d", equals=2, steps=["a", "b"]), {"a", "b"}) == FileCount(
        path="d", equals=0, steps=["a", "b"]
    )
    exists = FileExists(path="archive/a.txt", steps=["a"])
    assert following(exists, {"a"}) is None
    assert following(FileExists(path="x", steps=["a", "b"]), {"a"}) is not None
    plain = FileCount(path="archive", min=3)  # about no step: never changed
    assert following(plain, {"a", "b"}) is plain


def test_a_check_still_fails_when_its_file_is_missing_for_another_reason(
    workdir: Path, run_cli: Any
) -> None:
    plan = {
        "goal": "copy a",
        "acceptance": [{"check": "file_count", "path": "out", "min": 2, "steps": ["a"]}],
        "steps": [{"id": "a", "tool": "copy_file", "args": {"src": "a.txt", "dst": "out/a.txt"}}],
    }
    (workdir / "a.txt").write_text("a")
    (workdir / "plan.yaml").write_text(json.dumps(plan))
    failed = run_cli("run", "--plan", "plan.yaml", "--thread-id", "c2")
    assert failed.code == 1, failed.stderr
    view = run_cli("status", "c2", "--json").json()
    assert "expected at least 2, got 1" in view["failure"]["message"]
