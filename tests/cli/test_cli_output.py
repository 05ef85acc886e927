"""What the CLI prints (issue 21): tables fit 80 columns with ids whole, help reads as
sentences, a run's result is said once, summaries are well-formed, and stdout / stderr
stay in order in one pipe. Output cases run ``onward`` at COLUMNS=80 (forked from a zygote
imported at that width) and check that the store is as it was; the pipe-order case starts
a real ``python -m onward`` (its streams are the interpreter's own)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from onward.client import Onward
from onward.model.state import Plan, PlanStep, StepStatus
from onward.policies.run import RunPolicy
from onward.store.artifacts import summarize
from tests.support import zygote
from tests.support.common import cli_env, onward_cmd
from tests.support.paths import SUPPORT
from tests.support.snapshots import snapshot

HITL_TOOLS = str(SUPPORT / "hitl_tools.py")
CUT = re.compile(r"…\s*(?:[│┃]|$)")
"""A cell Rich cut to fit: an ellipsis at the end of a cell or line."""


def cli(workdir: Path, db: str, *args: str, columns: int = 80) -> Any:
    """``onward ARGS --db DB`` in a new process on a terminal of ``columns`` (forked from a
    zygote whose imports saw that width: tests/support/zygote.py's IMPORT_ENV)."""
    return zygote.run(
        [*args, "--db", db], cwd=workdir, env=cli_env(COLUMNS=str(columns)), timeout=120
    )


def fits(text: str, width: int = 80) -> None:
    for line in text.splitlines():
        assert len(line) <= width, f"wider than {width}: {line!r}"
        assert not CUT.search(line), f"a cell was cut: {line!r}"


LONG_STEPS = ("draft_the_first_note_for_review", "draft_the_second_note_for_review")


@pytest.fixture
def waiting(db_url: str, workdir: Path) -> str:
    """A run with two questions (approvals) and some history; returns its thread id."""
    steps = [
        {"id": sid, "tool": "write_file", "args": {"path": f"{sid}.txt", "content": "a draft " * 9}}
        for sid in LONG_STEPS
    ]
    goal = "Write two notes, each approved by a person before it is written to disk"
    (workdir / "notes.json").write_text(json.dumps({"goal": goal, "steps": steps}))
    with Onward(db_url) as ow:
        policy = RunPolicy(approve_tools={"write_file"})
        view = ow.run(plan=workdir / "notes.json", policy=policy, workdir=workdir)
        assert len(view.pending) == 2
        return view.thread_id


def test_inbox_history_list_timeline_and_status_fit_80_columns_with_ids_whole(
    db_url: str, workdir: Path, waiting: str
) -> None:
    before = snapshot(db_url)
    with Onward(db_url) as ow:
        checkpoints = [h["checkpoint_id"] for h in ow.history(waiting)]
    shown = {}
    for command in (["inbox"], ["history", waiting], ["list"], ["timeline", waiting]):
        result = cli(workdir, db_url, *command)
        assert result.returncode == 0, result.stderr
        fits(result.stdout)
        shown[command[0]] = result.stdout
    status = cli(workdir, db_url, "status", waiting)
    assert status.returncode == 0, status.stderr
    fits(status.stdout)
    words = {name: set(re.findall(r"[\w-]+", text)) for name, text in shown.items()}
    words["status"] = set(re.findall(r"[\w-]+", status.stdout))
    for name in ("inbox", "list", "status"):
        assert waiting in words[name], name
    for name in ("inbox", "timeline", "status"):
        assert set(LONG_STEPS) <= words[name], name
    assert set(checkpoints) <= words["history"]
    # Not three-letter stubs: every value is there in full.
    assert {"approval", "write_file"} <= words["inbox"]
    assert "waiting_for_human" in words["list"]
    assert snapshot(db_url) == before


def test_a_wide_terminal_still_gets_tables(db_url: str, workdir: Path, waiting: str) -> None:
    result = cli(workdir, db_url, "inbox", columns=200)
    assert result.returncode == 0
    header = result.stdout.splitlines()[0]
    assert re.search(r"thread id\s+┃\s+step\s+┃\s+kind", header), result.stdout
    fits(result.stdout, 200)


# -- help -----------------------------------------------------------------------------------


def help_of(*args: str) -> str:
    from onward.cli import app

    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def test_help_has_placeholders_not_type_tags_and_fits_80_columns() -> None:
    import typer.main

    from onward.cli import app

    names = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert {"run", "inbox", "history", "fork", "worker"} <= set(names)
    for name in ["", *names]:
        text = help_of(*([name] if name else []))
        assert not re.search(r"<(?:bool|str|int|float|path|list\[[^>]*\])[^>]*>", text), name
        assert not re.search(r"\[x[<>]=", text), name
        assert all(len(line) <= 80 for line in text.splitlines()), name
    run = help_of("run")
    assert re.search(r"--plan\s+FILE\s+Declared plan", run)
    assert re.search(r"--max-steps\s+N\s+Step executions", run)
    assert "At least 1." in run
    assert re.search(r"--db\s+URL", run)
    fork = help_of("fork")
    assert "Only create the new run" in fork
    assert "Only record the decision" not in fork


def test_the_command_list_breaks_lines_only_where_the_column_is_full() -> None:
    """A docstring's line break never splits a sentence: each wrapped description line
    was full (the next word would not have fitted)."""
    text = help_of()
    panel = text[text.index("Commands") :].splitlines()[1:]
    rows = [line for line in panel if line.startswith("│")]
    start = re.match(r"│ \S+\s+", rows[0])
    assert start is not None
    col = start.end()
    width = len(rows[0]) - 2 - col  # "…text │": the border and its pad
    for prev, line in itertools.pairwise(rows):
        first = line[col:-1].split()
        if line[1:col].strip() or not first:  # a new command, or the panel's end
            continue
        used = len(prev[col:-1].rstrip())
        assert used + 1 + len(first[0]) > width, f"broken early:\n{prev}\n{line}"


# -- a run's result, once ------------------------------------------------------------------------


def test_a_finished_run_prints_each_step_and_its_thread_once(db_url: str, workdir: Path) -> None:
    plan = {
        "goal": "two notes",
        "steps": [
            {"id": "first_note", "tool": "write_file", "args": {"path": "a.txt", "content": "a"}},
            {"id": "second_note", "tool": "write_file", "args": {"path": "b.txt", "content": "b"}},
        ],
    }
    (workdir / "plan.json").write_text(json.dumps(plan))
    result = cli(workdir, db_url, "run", "--plan", "plan.json", "--thread-id", "once-1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("first_note") == 1, out
    assert out.count("second_note") == 1, out
    assert out.count("once-1") == 1, out
    assert "Run done:" not in out  # the execution report repeats the table: not printed
    assert "status done" in out
    assert "once-1" in result.stderr  # said before the run, to resume it if it is killed


def test_reject_of_a_payment_says_done_with_skipped_steps_in_the_headline(
    db_url: str, workdir: Path
) -> None:
    plan = Plan(
        steps=[
            PlanStep(id="pay", tool="pay", args={"amount": 5, "to": "al"}),
            PlanStep(id="receipt", tool="slow", args={"value": 1}, depends_on=["pay"]),
        ]
    )
    with Onward(db_url, tool_modules=[HITL_TOOLS]) as ow:
        tid = ow.run(plan=plan, workdir=workdir).thread_id
    result = cli(
        workdir, db_url, "reject", tid, "--step", "pay", "--reason", "no", "--tools", HITL_TOOLS
    )
    assert result.returncode == 0, result.stderr
    headline = result.stdout.splitlines()[0]
    assert f"thread {tid}  status done, 2 steps skipped" in headline, result.stdout
    with Onward(db_url, tool_modules=[HITL_TOOLS]) as ow:
        steps = {s.id: s.status for s in ow.get(tid).steps}
    assert steps == {"pay": StepStatus.SKIPPED, "receipt": StepStatus.SKIPPED}
    assert not (workdir / "payments.jsonl").exists()


# -- summaries ------------------------------------------------------------------------------------


def test_summaries_count_collections_in_words_and_keep_quotes_closed() -> None:
    assert summarize({"path": "orders.csv", "columns": list(range(6)), "fields": {"a": 1}}) == (
        "path='orders.csv', columns=6 items, fields=1 key"
    )
    title = "Order anomaly report: orders.csv, 19 of 200 rows abnormal"
    text = summarize({"path": "r.md", "title": title, "bytes": 3004})
    assert re.search(r"title='Order anomaly report: [^']*…'", text), text
    assert text.endswith("bytes=3004")
    many = summarize({f"key{i}": "x" * 30 for i in range(10)})
    assert len(many) <= 120, many
    assert many.endswith("more"), many
    assert many.count("'") % 2 == 0
    assert summarize(list(range(3))) == "3 items"
    assert summarize({}) == "no keys"


def test_the_order_templates_summaries_are_well_formed(ow: Onward, workdir: Path) -> None:
    from onward.demo import write_sample_orders

    write_sample_orders(workdir / "orders.csv", rows=60)
    view = ow.run(
        "Analyze orders.csv, find abnormal orders", inputs=["orders.csv"], workdir=workdir
    )
    assert view.status == "done"
    for step in view.steps:
        assert step.output is not None
        summary = step.output.summary
        assert not re.search(r"=[\[{]", summary), summary
        assert summary.count("'") % 2 == 0, summary  # no quote left open
    assert "rows=60 items" in view.steps[0].output.summary  # type: ignore[union-attr]


# -- streams --------------------------------------------------------------------------------------


def test_stdout_and_stderr_keep_their_order_in_one_pipe(db_url: str, workdir: Path) -> None:
    """Results on stdout, progress and hints on stderr, each flushed as written: piped
    into one file, the lines come in the order they were said."""
    plan = {
        "goal": "a note",
        "steps": [{"id": "note", "tool": "write_file", "args": {"path": "n", "content": "x"}}],
    }
    (workdir / "plan.json").write_text(json.dumps(plan))
    both = workdir / "both.txt"
    with both.open("w") as sink:
        ran = subprocess.run(
            onward_cmd(
                "run", "--plan", "plan.json", "--approve-tools", "write_file", "--thread-id",
                "piped", "--db", db_url,
            ),
            cwd=workdir, env=cli_env(COLUMNS="80"), stdout=sink, stderr=subprocess.STDOUT,
            timeout=120,
        )  # fmt: skip
    assert ran.returncode == 3
    lines = both.read_text().splitlines()

    def at(prefix: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    # stderr (thread id, progress) → stdout (the view) in that order
    assert at("thread id: piped") < at("running") < at("thread piped  status") < at("waiting:")
    with both.open("w") as sink:
        answered = subprocess.run(
            onward_cmd("approve", "piped", "--step", "note", "--no-continue", "--db", db_url),
            cwd=workdir, env=cli_env(COLUMNS="80"), stdout=sink, stderr=subprocess.STDOUT,
            timeout=120,
        )  # fmt: skip
    assert answered.returncode == 0
    lines = both.read_text().splitlines()
    # stdout (the view) → stderr (the hint): the hint is last
    assert lines[0].startswith("thread piped  status")
    assert lines[-1] == "recorded; continue with `onward resume piped`"
