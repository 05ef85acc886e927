"""Bad input never crashes (issue 21): a clear message, the documented exit code, and the
store as it was. Cases about the CLI run ``onward`` in a new process (forked from the
zygote, tests/support/zygote.py; real ``python -m onward`` where a resource limit is set on the
child, and for ``serve`` on a taken port); each compares the store's runs, checkpoints and
events before and after."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from onward.client import Onward, load_plan_file
from onward.errors import PlanValidationError, StoreError, UsageError
from onward.llm.fake import ScriptedChatModel
from onward.llm.planner import DraftStep, PlanDraft, normalise
from onward.model.state import Plan, PlanStep
from onward.planning.limits import MAX_DEPTH, MAX_PLAN_BYTES, MAX_STEPS, MAX_VALUES
from onward.planning.reading import parse_plan_text
from onward.planning.validate import parse_declared
from onward.store.sql import sqlite_path
from onward.tools.registry import default_registry
from tests.support import zygote
from tests.support.common import CliResult, cli_env, onward_cmd
from tests.support.snapshots import Snapshot, snapshot


def write_plan(path: Path, steps: list[dict[str, Any]], goal: str = "bad input") -> Path:
    path.write_text(json.dumps({"goal": goal, "steps": steps}), encoding="utf-8")
    return path


@pytest.fixture
def stored(db_url: str, workdir: Path) -> Snapshot:
    """A store holding one finished run; returns its snapshot."""
    plan = write_plan(
        workdir / "ok.json",
        [{"id": "w", "tool": "write_file", "args": {"path": "ok.txt", "content": "ok"}}],
    )
    with Onward(db_url) as ow:
        assert ow.run(plan=str(plan)).status == "done"
    return snapshot(db_url)


def refused(result: CliResult, *needles: str) -> None:
    assert result.code == 2, result
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"a": value}
    return value


# -- 1. nesting and sizes -------------------------------------------------------------------


@pytest.mark.parametrize(("levels", "fmt"), [(300, "json"), (500, "json"), (500, "yaml")])
def test_a_plan_nested_past_the_limit_is_refused_before_anything_is_stored(
    run_cli: Any, stored: Snapshot, db_url: str, workdir: Path, levels: int, fmt: str
) -> None:
    step = {
        "id": "deep",
        "tool": "http_post",
        "args": {"url": "http://x/", "payload": nested(levels)},
    }
    doc = {"goal": "deep", "steps": [step]}
    name = f"deep.{fmt}"
    text = json.dumps(doc)
    if fmt == "yaml":  # flow style, written out: yaml.safe_dump itself recurses too deep
        deep = "{a: " * levels + "leaf" + "}" * levels
        step_text = f"{{id: deep, tool: http_post, args: {{url: u, payload: {deep}}}}}"
        text = f"goal: deep\nsteps:\n- {step_text}\n"
    (workdir / name).write_text(text, encoding="utf-8")
    result = run_cli("run", "--plan", name)
    refused(result, f"{name} is invalid", f"nested more than {MAX_DEPTH} levels deep")
    if levels == 300:  # deep enough to read: the location names the step
        assert "steps[0] (deep).args.payload" in result.stderr
    assert snapshot(db_url) == stored


def test_nesting_up_to_the_limit_is_a_valid_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    # The top mapping is level 1, steps 2, a step 3, its args 4, the payload 5: 96 mappings
    # from level 5 end at level 100. (The URL is one the egress policy allows: a refused one
    # is a plan problem too.)
    monkeypatch.setenv("ONWARD_HTTP_ALLOW", "example.com")
    url = "https://example.com/hook"
    payload = nested(MAX_DEPTH - 4)
    doc = {"steps": [{"id": "s", "tool": "http_post", "args": {"url": url, "payload": payload}}]}
    _, plan, _ = parse_declared(doc, default_registry)
    assert plan.steps[0].args["payload"] == payload
    deeper = {"url": url, "payload": nested(MAX_DEPTH - 3)}
    with pytest.raises(PlanValidationError, match="nested more than 100 levels"):
        parse_declared(
            {"steps": [{"id": "s", "tool": "http_post", "args": deeper}]}, default_registry
        )


def test_too_many_steps_values_or_bytes_are_refused(tmp_path: Path) -> None:
    steps = [{"id": f"s{i}", "tool": "noop"} for i in range(MAX_STEPS + 1)]
    with pytest.raises(
        PlanValidationError, match=f"{MAX_STEPS + 1:,} steps; a plan holds at most {MAX_STEPS:,}"
    ):
        parse_declared({"steps": steps}, default_registry)
    # A YAML alias bomb: ten lists of ten, seven deep, is 10^7 values once expanded.
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    for n in range(1, 7):
        bomb += f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]\n"
    doc = yaml.safe_load(bomb)
    doc = {"steps": [{"id": "s", "tool": "http_post", "args": {"url": "u", "payload": doc}}]}
    with pytest.raises(PlanValidationError, match=f"more than {MAX_VALUES:,} values"):
        parse_declared(doc, default_registry)
    # The count is the plan's, not each step's: eleven steps of 10^5 values are too many.
    part = yaml.safe_load(bomb)["a4"]
    many = [
        {"id": f"s{i}", "tool": "http_post", "args": {"url": "u", "payload": part}}
        for i in range(11)
    ]
    with pytest.raises(PlanValidationError, match=f"more than {MAX_VALUES:,} values"):
        parse_declared({"steps": many}, default_registry)
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(MAX_PLAN_BYTES + 1)
    with pytest.raises(PlanValidationError, match="a plan file holds at most 16 MiB"):
        load_plan_file(big)


def test_a_chain_of_the_most_steps_validates_without_recursion() -> None:
    steps = [{"id": "s0", "tool": "noop", "output": "first"}]
    steps += [
        {"id": f"s{i}", "tool": "noop", "depends_on": [f"s{i - 1}"]} for i in range(1, MAX_STEPS)
    ]
    steps[-1]["args"] = {"value": "${first}"}  # upstream through every other step
    _, plan, _ = parse_declared({"steps": steps}, default_registry)
    assert len(plan.steps) == MAX_STEPS
    steps[0]["depends_on"] = [f"s{MAX_STEPS - 1}"]
    with pytest.raises(
        PlanValidationError, match=f"dependency cycle: s0 → s{MAX_STEPS - 1} → s{MAX_STEPS - 2}"
    ):
        parse_declared({"steps": steps}, default_registry)


# -- 2. text: surrogate pairs and lone surrogates --------------------------------------------


def test_a_json_plan_with_escaped_emoji_runs_and_keeps_them(
    run_cli: Any, db_url: str, workdir: Path
) -> None:
    steps = [{"id": "w", "tool": "write_file", "args": {"path": "e.txt", "content": "hi 🎉"}}]
    write_plan(workdir / "emoji.json", steps, goal="party 🎉")
    assert "\\ud83c\\udf89" in (workdir / "emoji.json").read_text()  # json.dump's default
    result = run_cli("run", "--plan", "emoji.json", "--json")
    assert result.code == 0, result
    assert result.json()["objective"] == "party 🎉"
    assert (workdir / "e.txt").read_text(encoding="utf-8") == "hi 🎉"


def test_yaml_surrogate_pair_escapes_are_decoded() -> None:
    doc = parse_plan_text(
        'steps:\n- {id: w, tool: write_file, args: {path: a, content: "\\ud83c\\udf89"}}\n'
    )
    _, plan, _ = parse_declared(doc, default_registry)
    assert plan.steps[0].args["content"] == "🎉"


def test_a_lone_surrogate_is_a_validation_error(
    run_cli: Any, stored: Snapshot, db_url: str, workdir: Path
) -> None:
    (workdir / "lone.json").write_text(
        '{"goal": "g", "steps": [{"id": "w", "tool": "write_file", '
        '"args": {"path": "a.txt", "content": "hi \\ud83c"}}]}',
        encoding="utf-8",
    )
    result = run_cli("run", "--plan", "lone.json")
    refused(result, "steps[0] (w).args.content", "lone surrogate")
    # Quoted in the message (an id, a key), it is printed escaped, never a crash.
    (workdir / "lone-id.json").write_text('{"steps": [{"id": "\\ud83c", "tool": "noop"}]}')
    result = run_cli("run", "--plan", "lone-id.json")
    refused(result, "steps[0] (\\ud83c).id: text '\\ud83c' holds a lone surrogate")
    assert snapshot(db_url) == stored


def test_a_goal_in_another_encoding_is_a_validation_error(
    run_cli: Any, stored: Snapshot, db_url: str, workdir: Path
) -> None:
    goal = os.fsdecode(b"copy every file in caf\xe9/ to out/")  # a Latin-1 name in argv
    (workdir / os.fsdecode(b"caf\xe9")).mkdir()
    (workdir / os.fsdecode(b"caf\xe9") / "a.txt").write_text("a")
    result = run_cli("run", goal)
    refused(result, "goal: text 'copy every file in caf\\udce9/", "bytes that are not UTF-8")
    assert snapshot(db_url) == stored


def test_a_plan_object_too_deep_for_the_store_is_refused_before_it_is_stored(
    db_url: str, stored: Snapshot, workdir: Path
) -> None:
    step = PlanStep(id="s", tool="noop", args={"value": nested(300)})
    with Onward(db_url) as ow, pytest.raises(PlanValidationError, match="nested more than 100"):
        ow.start(plan=Plan(steps=[step]))
    assert snapshot(db_url) == stored


# -- 3. CSVs that are not UTF-8 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            "order_id,amount,order_time\n1,10,2024-01-01 Jos\xe9\n".encode("latin-1"),
            "is not UTF-8 text (byte 0xe9 at offset 46)",
        ),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50, "is a binary file (it holds NUL bytes)"),
    ],
    ids=["latin-1", "binary"],
)
def test_a_csv_that_is_not_utf8_is_refused_at_planning(
    run_cli: Any, stored: Snapshot, db_url: str, workdir: Path, body: bytes, needle: str
) -> None:
    (workdir / "orders.csv").write_bytes(body)
    result = run_cli("run", "Analyze orders.csv, find abnormal orders", "--input", "orders.csv")
    refused(result, f"orders.csv {needle}", "UTF-8")
    assert snapshot(db_url) == stored


# -- 4. a full disk --------------------------------------------------------------------------


def _steps(n: int, size: int) -> list[dict[str, Any]]:
    return [
        {"id": f"s{i}", "tool": "write_file", "args": {"path": f"o{i}.txt", "content": "x" * size}}
        for i in range(n)
    ]


def test_a_full_database_while_a_step_commits_is_a_store_error_and_resume_goes_on(
    sqlite_url: str, workdir: Path
) -> None:
    plan = write_plan(workdir / "fill.json", _steps(30, 20_000))
    with Onward(sqlite_url) as ow:
        thread = ow.start(plan=str(plan))
        conn = ow.store.conn  # the checkpoint saver's connection: a step's writes commit here
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        # Room for a step or two (about 6 KB each), far from the 30 steps' worth the run needs.
        conn.execute(f"PRAGMA max_page_count={pages + 4}")
        with pytest.raises(StoreError, match="cannot grow: the disk is full") as caught:
            ow.resume(thread)
        assert "onward resume" in str(caught.value)
    with Onward(sqlite_url) as ow:  # nothing half-saved: the run goes on from its last step
        assert ow.resume(thread).status == "done"
    assert all((workdir / f"o{i}.txt").stat().st_size == 20_000 for i in range(30))


def test_a_full_database_on_the_store_connections_is_a_store_error(sqlite_url: str) -> None:
    with Onward(sqlite_url) as ow:
        with ow.store.db.use() as db:
            pages = db.execute("PRAGMA page_count").fetchone()[0]
            db.execute(f"PRAGMA max_page_count={pages}")
        with pytest.raises(StoreError, match="cannot grow"):
            ow.store.add_run("t", "x" * 100_000, {"input": {}})
        assert ow.store.get_run("t") is None


def _resume(db: str, thread: str, cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    # The default lease TTL (30 s): a resume after a failed one must not wait it out. The
    # failed drive released its lease (the store's reserve gave it room), or its process
    # exited, which on this host lets its lease go at once.
    args = ["resume", thread, "--db", db, "--no-wait"]
    if kw:  # preexec_fn (a resource limit for the child): a real start, the zygote has none
        return subprocess.run(
            onward_cmd(*args), cwd=cwd, env=cli_env(), capture_output=True, text=True,
            timeout=300, **kw,
        )  # fmt: skip
    return zygote.run(args, cwd=cwd, env=cli_env(), timeout=300)


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs (needs root and the mount capability, else the test is skipped)."""
    where = tmp_path / "tiny"
    where.mkdir()
    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_the_disk_filling_up_during_a_run_exits_2_and_resume_finishes_it(
    tiny_fs: Path, workdir: Path
) -> None:
    db = f"sqlite:///{tiny_fs / 'onward.db'}"
    plan = write_plan(workdir / "fill.json", _steps(40, 4_000))
    with Onward(db) as ow:
        thread = ow.start(plan=str(plan))
    free = os.statvfs(tiny_fs)
    filler = tiny_fs / "filler"
    filler.write_bytes(b"\0" * (free.f_bavail * free.f_frsize - 96_000))  # leave ~96 KB
    result = _resume(db, thread, workdir)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert "the disk is full" in result.stderr or "the disk may be full" in result.stderr
    filler.unlink()
    done = _resume(db, thread, workdir)
    assert done.returncode == 0, done
    assert len(list(workdir.glob("o*.txt"))) == 40


def _lease_rows(db: str, thread: str) -> list[tuple[Any, ...]]:
    import sqlite3

    path = sqlite_path(db)
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as conn:
        leases = conn.execute(
            "SELECT owner FROM onward_leases WHERE thread_id = ?", (thread,)
        ).fetchall()
        events = conn.execute(
            "SELECT kind FROM onward_events WHERE thread_id = ? AND kind LIKE 'lease%' ORDER BY id",
            (thread,),
        ).fetchall()
    return [*leases, *events]


def test_a_drive_the_full_disk_ended_releases_its_lease_and_resume_goes_on_at_once(
    tiny_fs: Path, workdir: Path
) -> None:
    """The release itself needs room on a full disk: the store's reserve makes it. The
    lease row is gone when the failed process exits (the default 30 s TTL is never waited
    for), and the next resume acquires the lease; it takes nothing over."""
    db = f"sqlite:///{tiny_fs / 'onward.db'}"
    plan = write_plan(workdir / "fill.json", _steps(40, 4_000))
    with Onward(db) as ow:
        thread = ow.start(plan=str(plan))
    free = os.statvfs(tiny_fs)
    filler = tiny_fs / "filler"
    filler.write_bytes(b"\0" * (free.f_bavail * free.f_frsize - 96_000))
    failed = zygote.run(["resume", thread, "--db", db], cwd=workdir, env=cli_env(), timeout=300)
    assert failed.returncode == 2, failed
    assert "the disk is full" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert _lease_rows(db, thread) == [("lease_acquired",), ("lease_released",)]
    filler.unlink()
    done = zygote.run(
        ["resume", thread, "--db", db, "--no-wait"], cwd=workdir, env=cli_env(), timeout=300
    )
    assert done.returncode == 0, done
    assert len(list(workdir.glob("o*.txt"))) == 40
    kinds = [k for (k,) in _lease_rows(db, thread)]
    assert "lease_taken_over" not in kinds
    assert kinds.count("lease_released") == 2


def test_a_release_that_fails_even_so_lets_this_process_take_the_run_over_at_once(
    sqlite_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No reserve helps (a per-file size limit, or Postgres): the drive that could not let
    go is known to have ended, so the same process's next drive takes its lease over at
    once, logged like any takeover, instead of refusing the run as busy for the TTL."""
    from onward.store.leases import Leases

    plan = write_plan(workdir / "two.json", _steps(2, 10))
    with Onward(sqlite_url) as ow:
        thread = ow.start(plan=str(plan))
        release = Leases.release

        def full(self: Leases, thread_id: str, owner: str) -> None:
            raise StoreError("the database cannot grow: the disk is full")

        monkeypatch.setattr(Leases, "release", full)
        with pytest.raises(StoreError, match="disk is full"):
            ow.resume(thread)
        assert ow.store.leases.get(thread) is not None  # the row could not be deleted
        monkeypatch.setattr(Leases, "release", release)
        assert ow.resume(thread).status == "done"
        kinds = [k for _, k, _ in ow.store.leases.events(thread)]
    assert kinds.count("lease_taken_over") == 1
    assert "its drive in this process ended" in str(ow.store.leases.events(thread))


def test_a_file_size_limit_during_a_run_exits_2_and_resume_finishes_it(
    sqlite_url: str, workdir: Path
) -> None:
    plan = write_plan(workdir / "fill.json", _steps(40, 4_000))
    with Onward(sqlite_url) as ow:
        thread = ow.start(plan=str(plan))
    path = sqlite_path(sqlite_url)
    limit = max(p.stat().st_size for p in path.parent.glob("onward.db*")) + 96_000

    def cap() -> None:  # Python ignores SIGXFSZ: a write past the limit fails instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = _resume(sqlite_url, thread, workdir, preexec_fn=cap)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert "nothing of this save was written" in result.stderr
    done = _resume(sqlite_url, thread, workdir)
    assert done.returncode == 0, done
    assert len(list(workdir.glob("o*.txt"))) == 40


# -- 5. keys and durations -------------------------------------------------------------------


def test_a_malformed_base64_key_is_an_encryption_key_error(
    run_cli: Any, stored: Snapshot, db_url: str
) -> None:
    result = run_cli("list", env={"ONWARD_AES_KEY": "base64:!!!!"})
    refused(result, "ONWARD_AES_KEY is not valid base64 after 'base64:'", "make one with")
    assert snapshot(db_url) == stored


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("--remind-after", "inf", "--remind-after: 'inf' is not a duration; write a finite one"),
        ("--max-run-time", "1e400", "--max-run-time: '1e400' is not a duration"),
        ("--max-run-time", "nan", "--max-run-time: 'nan' is not a duration"),
        ("--expire-after", "-5h", "--expire-after: duration '-5h' is negative"),
        ("--expire-after", "1e300", "--expire-after: duration '1e300' is too long"),
        ("--remind-after", "9999999d", "at most 36500d"),
    ],
)
def test_a_duration_that_is_negative_infinite_or_too_long_is_a_usage_error(
    run_cli: Any, stored: Snapshot, db_url: str, option: str, value: str, needle: str
) -> None:
    result = run_cli("run", "--plan", "ok.json", option, value)
    refused(result, needle)
    assert snapshot(db_url) == stored


def test_a_policy_file_deadline_out_of_range_is_a_usage_error(
    run_cli: Any, stored: Snapshot, db_url: str, workdir: Path
) -> None:
    (workdir / "policy.yaml").write_text("deadline: {expire_after: -5}\n")
    refused(run_cli("run", "--plan", "ok.json", "--policy", "policy.yaml"), "out of range")
    (workdir / "policy.yaml").write_text("deadline: {remind_after: -2h}\n")
    refused(
        run_cli("run", "--plan", "ok.json", "--policy", "policy.yaml"),
        "policy file policy.yaml: duration '-2h' is negative",
    )
    assert snapshot(db_url) == stored


# -- 6. what validation must see -------------------------------------------------------------


def test_a_duplicate_step_id_does_not_hide_a_cycle() -> None:
    steps = [
        {"id": "a", "tool": "noop", "depends_on": ["b"]},
        {"id": "b", "tool": "noop", "depends_on": ["a"]},
        {"id": "a", "tool": "noop"},
    ]
    with pytest.raises(PlanValidationError) as caught:
        parse_declared({"steps": steps}, default_registry)
    found = [str(p) for p in caught.value.problems]
    assert "steps[2] (a).id: duplicate step id 'a' (first used by steps[0])" in found
    assert any(p.startswith("steps: dependency cycle: a → b → a") for p in found), found


def test_an_output_name_references_cannot_match_is_refused(
    run_cli: Any, stored: Snapshot, db_url: str, workdir: Path
) -> None:
    write_plan(
        workdir / "names.json",
        [
            {"id": "make", "tool": "noop", "output": "résultat_🎉"},
            {
                "id": "use",
                "tool": "noop",
                "args": {"value": "${résultat_🎉}"},
                "depends_on": ["make"],
            },
        ],
    )
    result = run_cli("run", "--plan", "names.json")
    refused(result, "steps[0] (make).output: output name 'résultat_🎉' cannot be referenced")
    assert snapshot(db_url) == stored
    _, plan, _ = parse_declared(  # letters of any script are fine; ids and names
        {"steps": [{"id": "m", "tool": "noop", "output": "résultat_1"}]}, default_registry
    )
    assert plan.steps[0].output == "résultat_1"


# -- 7. reading commands never create a store ------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["status", "t"],
        ["show", "t"],
        ["history", "t"],
        ["inbox"],
        ["timeline", "t"],
        ["summary", "t"],
        ["replay", "t"],
        ["report", "t", "--html", "r.html"],
    ],
    ids=lambda c: c[0],
)
def test_a_reading_command_on_a_missing_store_creates_nothing(
    workdir: Path, command: list[str]
) -> None:
    db = f"sqlite:///{workdir / 'nodir' / 'sub' / 'x.db'}"
    result = zygote.run([*command, "--db", db], cwd=workdir, env=cli_env(), timeout=120)
    refused(CliResult(result.returncode, result.stdout, result.stderr), "no store at ")
    assert not (workdir / "nodir").exists()


def test_a_reading_command_on_an_empty_postgres_schema_creates_nothing(workdir: Path) -> None:
    from tests.support.common import postgres_schema

    if "postgres" not in os.environ.get("ONWARD_TEST_BACKENDS", "sqlite,postgres"):
        pytest.skip("Postgres not among ONWARD_TEST_BACKENDS")
    import psycopg

    with postgres_schema() as url:
        result = zygote.run(["list", "--db", url], cwd=workdir, env=cli_env(), timeout=120)
        refused(CliResult(result.returncode, result.stdout, result.stderr), "no store at ")
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT to_regclass('onward_meta')").fetchone() == (None,)


def _tables(url: str) -> int:
    """How many tables the store at ``url`` holds (0: none, or no file at all)."""
    if url.startswith("sqlite"):
        path = sqlite_path(url)
        if not path.exists():
            return 0
        import sqlite3

        with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])
    import psycopg

    with psycopg.connect(url) as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchone()[0]
        )


@pytest.fixture
def no_store(db_url: str, tmp_path: Path) -> str:
    """A URL where no store is: a SQLite file in directories that do not exist, or an
    empty Postgres schema."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'nodir' / 'sub' / 'x.db'}"
    return db_url


def test_the_python_api_reading_a_missing_store_creates_nothing(
    no_store: str, tmp_path: Path
) -> None:
    """Onward(url) followed only by reads: clear errors, and no file, directory or table."""
    from onward.errors import UnknownThreadError

    with Onward(no_store) as ow:
        for read in (ow.list_runs, ow.inbox, ow.stalled_threads):
            with pytest.raises(StoreError, match=r"no store at .*nothing was created"):
                read()
        for on_thread in (ow.get, ow.state, ow.pending, ow.history, ow.timeline, ow.summary):
            with pytest.raises(UnknownThreadError, match=r"no run with thread id 't1'.*no store"):
                on_thread("t1")
        with pytest.raises(UnknownThreadError):
            ow.resume("t1")
    assert not (tmp_path / "nodir").exists()
    assert _tables(no_store) == 0
    with Onward(no_store) as ow:  # the first write makes the store, as before
        tid = ow.start(plan=Plan(steps=[PlanStep(id="a", tool="noop")]))
        assert [r.thread_id for r in ow.list_runs()] == [tid]


# -- 8. serve on a taken port ----------------------------------------------------------------


def test_serve_on_a_taken_port_says_so_before_serving_and_exits_2(workdir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        db = f"sqlite:///{workdir / 'store' / 'x.db'}"
        result = subprocess.run(
            onward_cmd("serve", "--port", str(port), "--db", db),
            cwd=workdir,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    refused(
        CliResult(result.returncode, result.stdout, result.stderr),
        f"cannot listen on 127.0.0.1:{port}",
        "pass another --port",
    )
    assert "serving" not in result.stdout + result.stderr
    assert not (workdir / "store").exists()  # nothing opened either


# -- 9. the model's draft: args as an object -------------------------------------------------


def test_a_model_draft_may_send_args_as_an_object(db_url: str, workdir: Path) -> None:
    draft = {
        "steps": [{"id": "w", "tool": "write_file", "args": {"path": "m.txt", "content": "hi"}}]
    }
    model = ScriptedChatModel(responses=[draft])
    with Onward(db_url, model=model) as ow:
        view = ow.run("write hi to m.txt")
    assert view.status == "done", view
    assert (workdir / "m.txt").read_text() == "hi"


def test_args_and_args_json_that_disagree_are_a_problem(workdir: Path) -> None:
    both = DraftStep.model_validate(
        {"id": "w", "tool": "noop", "args": {"value": 1}, "args_json": '{"value": 2}'}
    )
    swapped = DraftStep.model_validate({"id": "v", "tool": "noop", "args_json": {"value": 3}})
    plan, problems = normalise(PlanDraft(steps=[both, swapped]), default_registry, workdir)
    assert [str(p) for p in problems] == [
        "steps[0] (w).args: args and args_json differ; send one of them"
    ]
    assert plan.steps[0].args == {"value": 3}


def test_a_store_given_as_a_pathlib_path_opens_that_file(tmp_path: Path) -> None:
    db = tmp_path / "store" / "onward.db"
    db.parent.mkdir()
    with Onward(db, model=None) as ow:
        assert ow.run(plan=Plan(steps=[PlanStep(id="a", tool="noop")])).status.value == "done"
    assert db.is_file()


@pytest.mark.parametrize("db", [5, 0, b"onward.db", b"", ["onward.db"], []])
def test_a_store_that_is_not_a_url_or_path_is_a_usage_error(db: Any) -> None:
    with pytest.raises(UsageError, match="database URL or a file path"):
        Onward(db, model=None)
