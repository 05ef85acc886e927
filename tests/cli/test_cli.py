"""The CLI end to end, in real processes: demo, template goals (English and Chinese),
--json output, status/list, exit codes, and bad input that must lose nothing.

The tests that take ``real_cli`` start the real entry point (``python -m onward``): demo,
run, status, list, resume; every other command starts once through the real ``onward``
console script (:data:`REAL_STARTS`), so every command is started for real at least once.
The others fork their processes from the pre-imported zygote (``tests/support/zygote.py``), as the
rest of the suite does (the docs' examples included): they are about what a command does,
not how the interpreter starts."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from onward import Onward
from onward.demo import DEMO_GOAL, write_sample_orders
from tests.support import zygote
from tests.support.common import cli_env, cli_runner

ZH_GOAL = "分析 orders.csv，找出异常订单并生成汇总"
RULES = (
    "non_positive_amount",
    "ship_before_order",
    "duplicate_order_id",
    "missing_required_fields",
    "invalid_value",
)


@pytest.fixture
def real_cli(workdir: Path, db_url: str):  # type: ignore[no-untyped-def]
    """``python -m onward ARGS`` in a new process, not a fork: the real entry point. On
    SQLite; on PostgreSQL the same commands fork from the zygote (what is tested there is
    the backend: the start is the same)."""
    return cli_runner(workdir, db_url, real=db_url.startswith("sqlite"))


def test_demo_runs_offline_and_prints_thread_report_and_counts(real_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    result = real_cli("demo", "--workdir", "d", "--rows", "120")
    assert result.code == 0, result.stderr
    expected = write_sample_orders(workdir / "expected.csv", rows=120)
    report = workdir / "d" / "orders-report.md"
    assert report.is_file()
    # The thread id is said before the run (stderr, to resume a killed run) and once in
    # the result (its headline), not again under the counts.
    [thread] = [ln.split()[-1] for ln in result.stderr.splitlines() if ln.startswith("thread id:")]
    assert result.stdout.count(thread) == 1
    assert result.stdout.startswith(f"thread {thread}  status done")
    assert str(report) in result.stdout
    for rule in RULES:
        line = next(ln for ln in result.stdout.splitlines() if rule in ln)
        assert line.split()[-1] == str(expected[rule])
        assert f"| {rule} |" in report.read_text()


def test_demo_json_names_every_step(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("demo", "--workdir", "d", "--rows", "50", "--json")
    assert result.code == 0, result.stderr
    status = result.json()
    assert status["status"] == "done"
    assert [(s["id"], s["tool"]) for s in status["steps"]] == [
        ("read", "read_csv"),
        ("validate", "validate_fields"),
        ("detect", "find_anomalies"),
        ("aggregate", "aggregate"),
        ("report", "render_report"),
    ]
    assert all(s["status"] == "done" and s["attempts"] == 1 for s in status["steps"])


@pytest.mark.parametrize("goal", [DEMO_GOAL, ZH_GOAL], ids=["english", "chinese"])
def test_order_goal_in_english_or_chinese_plans_the_same_template(
    run_cli,
    workdir: Path,
    goal: str,  # type: ignore[no-untyped-def]
) -> None:
    write_sample_orders(workdir / "orders.csv", rows=80)
    result = run_cli("run", goal, "--input", "orders.csv", "--json")
    assert result.code == 0, result.stderr
    assert [s["tool"] for s in result.json()["steps"]] == [
        "read_csv",
        "validate_fields",
        "find_anomalies",
        "aggregate",
        "render_report",
    ]
    digest = hashlib.sha256((workdir / "orders-report.md").read_bytes()).hexdigest()
    reference = workdir.parent / "ref"
    reference.mkdir(exist_ok=True)
    write_sample_orders(reference / "orders.csv", rows=80)
    with Onward(f"sqlite:///{reference}/db.db") as ow:
        view = ow.run(DEMO_GOAL, inputs=["orders.csv"], workdir=reference)
    assert view.status == "done"
    assert hashlib.sha256((reference / "orders-report.md").read_bytes()).hexdigest() == digest


def test_copy_goal_in_chinese_makes_one_step_per_file(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "inbox").mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (workdir / "inbox" / name).write_text(name)
    result = run_cli("run", "把 inbox 里的文件同步到 archive", "--json")
    assert result.code == 0, result.stderr
    assert [s["tool"] for s in result.json()["steps"]] == ["copy_file"] * 3
    assert sorted(p.name for p in (workdir / "archive").iterdir()) == ["a.txt", "b.txt", "c.txt"]


def test_declared_plan_runs_and_status_and_list_report_it(real_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("hello")
    (workdir / "plan.yaml").write_text(
        "goal: Copy the inbox into the archive\n"
        "acceptance:\n  - {check: file_count, path: archive, equals: 1}\n"
        "steps:\n"
        "  - id: copy-a\n    tool: copy_file\n"
        "    args: {src: inbox/a.txt, dst: archive/a.txt}\n"
        "    output: copied_a\n"
        "    checks:\n      - {check: file_exists, path: archive/a.txt}\n"
        "  - id: confirm\n    tool: noop\n    args: {value: '${copied_a.sha256}'}\n"
        "    depends_on: [copy-a]\n"
        "    checks:\n      - {check: equals, field: value, artifact: copied_a,"
        " artifact_field: sha256}\n",
        encoding="utf-8",
    )
    result = real_cli("run", "--plan", "plan.yaml", "--json")
    assert result.code == 0, result.stderr
    status = result.json()
    assert {"thread_id", "status", "steps"} <= status.keys()
    assert status["status"] == "done"
    shown = real_cli("status", status["thread_id"], "--json").json()
    assert shown["steps"] == status["steps"]
    listed = real_cli("list", "--json").json()
    assert [(r["thread_id"], r["status"]) for r in listed] == [(status["thread_id"], "done")]


def test_failed_acceptance_check_fails_the_run_with_exit_code_1(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "plan.yaml").write_text(
        "goal: impossible\nacceptance:\n  - {check: file_exists, path: never.txt}\n"
        "steps:\n  - {id: a, tool: noop}\n",
        encoding="utf-8",
    )
    result = run_cli("run", "--plan", "plan.yaml", "--json")
    assert result.code == 1
    status = result.json()
    assert status["status"] == "failed"
    assert "never.txt does not exist" in status["failure"]["message"]


def test_failed_step_check_fails_the_run_and_records_findings(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "plan.yaml").write_text(
        "steps:\n  - id: a\n    tool: noop\n    args: {value: 3}\n"
        "    checks: [{check: equals, field: value, value: 4}]\n"
        "  - {id: b, tool: noop, depends_on: [a]}\n",
        encoding="utf-8",
    )
    result = run_cli("run", "--plan", "plan.yaml", "--json", "--no-escalate")
    assert result.code == 1
    steps = {s["id"]: s for s in result.json()["steps"]}
    assert steps["a"]["status"] == "failed"
    assert steps["a"]["failure_class"] == "validation"
    assert steps["a"]["findings"] == ["equals: value is 3, expected 4"]
    assert steps["b"]["status"] == "pending"  # never started after a failure


def test_unknown_goal_says_to_pass_a_plan(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("run", "bake a cake")
    assert result.code == 2
    assert "--plan" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_input_file_is_a_usage_error(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("run", DEMO_GOAL, "--input", "orders.csv")
    assert result.code == 2
    assert "orders.csv not found" in result.stderr
    listed = run_cli("list", "--json")  # nothing was written: not even a store
    assert listed.code == 2
    assert "nothing was created" in listed.json()["message"]


def test_csv_with_malformed_rows_is_reported_not_a_crash(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "orders.csv").write_text(
        "order_id,amount,order_time\nA1,10,2026-01-01 10:00\nA2,broken\n"
        "A3,5,2026-01-01 11:00,extra\nA4,-1,2026-01-01 12:00\n",
        encoding="utf-8",
    )
    result = run_cli("run", DEMO_GOAL, "--input", "orders.csv")
    assert result.code == 0, result.stderr
    report = (workdir / "orders-report.md").read_text()
    assert "2 malformed line(s) could not be read and were left out: lines 3, 4." in report
    assert "| non_positive_amount | amount is zero or negative | 1 |" in report


def test_empty_csv_and_missing_column_get_clear_messages(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "orders.csv").write_text("", encoding="utf-8")
    empty = run_cli("run", DEMO_GOAL, "--input", "orders.csv")
    assert empty.code == 2
    assert "orders.csv is empty" in empty.stderr
    (workdir / "orders.csv").write_text("order_id,amount,order_time\n", encoding="utf-8")
    no_rows = run_cli("run", DEMO_GOAL, "--input", "orders.csv", "--json")
    assert no_rows.code == 3  # a failed check with no replan rule: a person decides
    [question] = no_rows.json()["pending"]
    assert "expected at least 1, got 0" in question["reason"]
    (workdir / "orders.csv").write_text("order_id,price_usd,order_time\nA,1,2026-01-01\n")
    no_amount = run_cli("run", DEMO_GOAL, "--input", "orders.csv")
    assert no_amount.code == 2
    assert "no column for required field(s) amount" in no_amount.stderr
    assert "金额" in no_amount.stderr  # the accepted aliases are listed


def test_resume_of_an_unknown_thread_is_a_usage_error(real_cli) -> None:  # type: ignore[no-untyped-def]
    result = real_cli("resume", "no-such-thread")
    assert result.code == 2
    assert "no run with thread id 'no-such-thread'" in result.stderr
    assert "onward list" in result.stderr


def test_corrupt_database_is_reported_and_left_untouched(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    bad = workdir / "bad.db"
    bad.write_bytes(b"this is not a database" * 100)
    before = bad.read_bytes()
    result = run_cli("list", db=f"sqlite:///{bad}")
    assert result.code == 2
    assert "is not a usable onward database" in result.stderr
    assert "Traceback" not in result.stderr
    assert bad.read_bytes() == before
    assert not (workdir / "bad.db-wal").exists()


def test_locked_database_is_reported_as_busy_and_nothing_is_lost(
    run_cli,
    workdir: Path,
    sqlite_url: str,  # type: ignore[no-untyped-def]
) -> None:
    db_url = sqlite_url  # a SQLite file locked by another connection
    with Onward(db_url) as ow:
        (workdir / "inbox").mkdir()
        (workdir / "inbox" / "a.txt").write_text("a")
        done = ow.run("copy every file in inbox/ to archive/")
    path = db_url.removeprefix("sqlite:///")
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")
    busy = {"ONWARD_BUSY_TIMEOUT": "0.2"}
    try:
        # WAL: readers are not blocked by a writer, so status still answers ...
        read = run_cli("status", done.thread_id, "--json", env=busy, db=db_url)
        # ... but a new run cannot be written.
        write = run_cli("run", "copy every file in inbox/ to archive2/", env=busy, db=db_url)
    finally:
        holder.rollback()
        holder.close()
    assert read.code == 0
    assert read.json()["status"] == "done"
    assert write.code == 4
    assert "locked by another process" in write.stderr
    assert "Nothing was written" in write.stderr
    with Onward(db_url) as ow:
        assert [r.thread_id for r in ow.list_runs()] == [done.thread_id]
        assert ow.get(done.thread_id).status == "done"


def test_schema_is_created_once_when_processes_start_together(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/fresh/onward.db"
    # Workers, not `list`: a command that only reads never creates a store.
    # Forked from the zygote: they start within milliseconds of each other.
    procs = [
        zygote.spawn(
            ["worker", "--exit-when-idle", "--json", "--db", db],
            cwd=tmp_path,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [e for _, e in results]
    listed = zygote.run(["list", "--json", "--db", db], cwd=tmp_path, env=cli_env(), timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "[]"


def test_every_command_takes_db_and_json(workdir: Path) -> None:
    run_cli = cli_runner(workdir, "")  # --help reads no store: one run, not one per backend
    for command in ("run", "resume", "status", "list", "demo"):
        help_text = run_cli(command, "--help", db=None).stdout
        assert "--db" in help_text
        assert "--json" in help_text


REAL_STARTS = {
    # command: (arguments, exit code, what its output says)
    "fork": (("fork", "nope", "--at", "x", "--json"), 2, "no run with thread id 'nope'"),
    "replay": (("replay", "nope"), 2, "no run with thread id 'nope'"),
    "resolve": (("resolve", "nope", "--step", "a", "--as", "skip", "--json"), 2, "'nope'"),
    "respond": (("respond", "nope", "feedback", "--step", "a", "--json"), 2, "'nope'"),
    "approve": (("approve", "nope", "--step", "a", "--json"), 2, "'nope'"),
    "reject": (("reject", "nope", "--step", "a", "--reason", "no", "--json"), 2, "'nope'"),
    "cancel": (("cancel", "nope", "--json"), 2, "no run with thread id 'nope'"),
    "history": (("history", "nope", "--json"), 2, "no run with thread id 'nope'"),
    "timeline": (("timeline", "nope", "--json"), 2, "no run with thread id 'nope'"),
    "show": (("show", "nope", "--json"), 2, "no run with thread id 'nope'"),
    "summary": (("summary", "nope", "--json"), 2, "no run with thread id 'nope'"),
    "report": (("report", "nope", "--html", "r.html", "--json"), 2, "'nope'"),
    "submit": (("submit", "--plan", "missing.yaml", "--json"), 2, "missing.yaml not found"),
    "inbox": (("inbox", "--json"), 0, "[]"),
    "graph": (("graph",), 0, "flowchart"),
    "prune": (("prune", "--older-than", "30d", "--json"), 0, ""),
    "sweep": (("sweep", "--json"), 0, '"rejected": []'),
    "worker": (("worker", "--exit-when-idle", "--json"), 0, '"drives": 0'),
}
"""Every command the tests above do not start through ``python -m onward`` (demo, run,
status, list, resume; serve: tests/server/test_serve.py's CORS test and
tests/cli/test_bad_input.py)."""


def test_every_other_command_starts_from_the_real_console_script(
    workdir: Path, sqlite_url: str
) -> None:
    """Each command through the ``onward`` console script, in a real new interpreter (the
    rest of the suite forks them, the docs' examples included): each reaches its command
    and the store (an unknown run is a usage error naming it; an empty store has nothing
    to sweep, prune, drive or ask). On one backend: what is tested is the start, and every
    command runs on both backends elsewhere."""
    from tests.support.docs import cli_options

    options = cli_options()
    assert set(REAL_STARTS) | {"demo", "run", "status", "list", "resume", "serve"} == set(
        options
    ), "a new command needs a real start here"
    script = Path(sys.executable).with_name("onward")
    assert script.is_file(), "the onward console script is installed (pip install -e .)"
    with Onward(sqlite_url) as ow:
        assert ow.store.list_runs() == []  # a store, without the run: unknown thread errors

    def start(name: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                str(script),
                *REAL_STARTS[name][0],
                *(["--db", sqlite_url] * ("--db" in options[name])),
            ],
            cwd=workdir,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def check(name: str, proc: subprocess.Popen[str]) -> None:
        out, err = proc.communicate(timeout=300)
        _, code, says = REAL_STARTS[name]
        assert proc.returncode == code, (name, out, err)
        assert says in out + err, (name, out, err)

    # Those that only read (or fail before writing) all at once; then the writers.
    writers = ("prune", "sweep", "worker")
    readers = {name: start(name) for name in REAL_STARTS if name not in writers}
    for name, proc in readers.items():
        check(name, proc)
    for name in writers:
        check(name, start(name))
