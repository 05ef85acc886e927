"""The LangGraph-free read of a run's latest state (onward.observe.latest), behind
``onward status`` and ``onward inbox``: on real stores it gives what the full read
(``Onward.get`` / ``Onward.inbox``, through LangGraph) gives, byte for byte; where it
cannot be exact it says so (FullRead) and the CLI reads through LangGraph; a damaged
checkpoint is a clear error (exit 2), never a traceback; and the commands do not import
LangGraph or LangChain."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onward import Onward
from onward.cli.render import print_view
from onward.errors import StoreCorruptError
from onward.model.state import RunStatus
from onward.observe import checkpoint, latest, plain, questions
from onward.policies.run import RunPolicy
from onward.store.tables import Tables
from tests.support.common import cli_env, cli_runner, postgres_schema

HEAVY = ("langchain_core", "langgraph", "langsmith")
TWO_STEPS = {
    "goal": "two noop steps",
    "steps": [
        {"id": "a", "tool": "noop", "args": {"value": 1}},
        {"id": "b", "tool": "noop", "args": {"value": 2}, "depends_on": ["a"]},
    ],
}
APPROVALS = {
    "goal": "Write two notes, each approved by a person first",
    "steps": [
        {"id": f"n{i}", "tool": "write_file", "args": {"path": f"n{i}.txt", "content": "x"}}
        for i in (1, 2)
    ],
}
FAILING = {
    "goal": "read a file that is not there",
    "steps": [
        {"id": "a", "tool": "noop", "args": {"value": 1}},
        {"id": "r", "tool": "read_file", "args": {"path": "missing.txt"}, "depends_on": ["a"]},
    ],
}


def plan_file(workdir: Path, name: str, plan: dict[str, Any]) -> Path:
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(plan))
    return path


@pytest.fixture
def runs(db_url: str, workdir: Path) -> dict[str, str]:
    """Thread ids of real runs: done, waiting for its plan's approval, waiting for two
    step approvals (one batch), failed, and one whose questions were answered."""
    made: dict[str, str] = {}
    with Onward(db_url) as ow:
        made["done"] = ow.run(plan=plan_file(workdir, "two", TWO_STEPS), workdir=workdir).thread_id
        made["plan"] = ow.run(
            plan=plan_file(workdir, "two", TWO_STEPS),
            policy=RunPolicy(approve_plan=True),
            workdir=workdir,
        ).thread_id
        asked = ow.run(
            plan=plan_file(workdir, "notes", APPROVALS),
            policy=RunPolicy(approve_tools={"write_file"}),
            workdir=workdir,
        )
        assert len(asked.pending) == 2
        made["approvals"] = asked.thread_id
        failed = ow.run(
            plan=plan_file(workdir, "fail", FAILING),
            policy=RunPolicy(escalate_failures=False),
            workdir=workdir,
        )
        assert failed.status is RunStatus.FAILED, failed.status
        made["failed"] = failed.thread_id
        one = {**APPROVALS, "steps": APPROVALS["steps"][:1]}
        answered = ow.run(
            plan=plan_file(workdir, "one", one),
            policy=RunPolicy(approve_tools={"write_file"}),
            workdir=workdir,
        )
        done = ow.approve(answered.thread_id, "n1")
        assert done.status is RunStatus.DONE
        assert done.decisions
        made["answered"] = answered.thread_id
    return made


def full(db_url: str, thread_id: str) -> str:
    with Onward(db_url) as ow:
        return ow.get(thread_id).model_dump_json(indent=2)


def printed(view: Any, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    print_view(view)
    return capsys.readouterr().out


def test_the_light_read_gives_the_full_reads_view(
    db_url: str, runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with Onward(db_url) as ow:
        expected = {name: ow.get(tid) for name, tid in runs.items()}
        inbox = [p.model_dump(mode="json") for p in ow.inbox()]
    assert expected["done"].status is RunStatus.DONE
    assert expected["done"].report
    assert expected["plan"].pending
    assert expected["approvals"].pending
    with Tables.open(db_url) as tables:
        for name, tid in runs.items():
            got = latest.view(tables, tid)
            assert got.model_dump_json(indent=2) == expected[name].model_dump_json(indent=2), name
            text = printed(expected[name], capsys)
            assert printed(got, capsys) == text, name
            assert printed(plain.view(tables, tid), capsys) == text, name
        light = latest.questions(tables, tables.unfinished_runs())
        assert [p.model_dump(mode="json") for p in light] == inbox
        asked = questions.inbox(tables, tables.unfinished_runs())
        assert [q.model_dump(mode="json") for q in asked] == inbox
        assert len(inbox) == 3  # the plan's question, and the batch of two


def test_status_and_inbox_print_what_the_full_read_prints(
    db_url: str, runs: dict[str, str], run_cli: Any
) -> None:
    """The CLI's output (text and --json, exit codes) is the API's view of the run."""
    for tid in runs.values():
        shown = run_cli("status", tid, "--json")
        assert shown.code == 0, shown.stderr
        assert shown.stdout.strip() == full(db_url, tid)
    with Onward(db_url) as ow:
        inbox = [p.model_dump(mode="json") for p in ow.inbox()]
    listed = run_cli("inbox", "--json")
    assert (listed.code, listed.json()) == (0, inbox)


def test_a_long_plan_stored_in_chunks_reads_the_same_light_and_full_and_resumes(
    db_url: str, workdir: Path, run_cli: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan whose steps fill more than two chunks (model/lazy.py: a large body is stored
    as deflated chunks): status and inbox read it without LangGraph as the full read does,
    and the run resumes from it."""
    steps: list[dict[str, Any]] = [
        {"id": f"s{i}", "tool": "noop", "args": {"value": i}, "description": f"{i:04d}" * 100}
        for i in range(300)
    ]
    steps.append({"id": "gate", "tool": "wait", "args": {"seconds": 0}, "depends_on": ["s299"]})
    plan = plan_file(workdir, "long", {"goal": "a long plan", "steps": steps})
    with Onward(db_url) as ow:
        policy = RunPolicy(approve_tools={"wait"}, max_plan_steps=301)
        view = ow.run(plan=plan, policy=policy, workdir=workdir)
        tid = view.thread_id
        assert view.pending
        expected = ow.get(tid)
        inbox = [p.model_dump(mode="json") for p in ow.inbox()]
        chunks = ow.state(tid).plan.steps._items.body
    assert type(chunks).__name__ == "ChunkedBody"
    assert len(chunks.starts) > 3
    with Tables.open(db_url) as tables:
        assert latest.view(tables, tid).model_dump_json() == expected.model_dump_json()
        text = printed(expected, capsys)
        assert printed(plain.view(tables, tid), capsys) == text
        asked = questions.inbox(tables, tables.unfinished_runs())
        assert [q.model_dump(mode="json") for q in asked] == inbox
    shown = run_cli("status", tid, "--json")
    assert (shown.code, shown.stdout.strip()) == (0, full(db_url, tid))
    with Onward(db_url) as ow:
        done = ow.approve(tid, "gate")
    assert done.status is RunStatus.DONE
    assert len(done.steps) == 301


def commands_load(workdir: Path, db_url: str, *argv: str) -> tuple[int, str, set[str]]:
    """``onward ARGV --db`` in a new interpreter: exit code, stdout, top-level packages."""
    code = (
        "import json, sys\n"
        "from onward.cli import main\n"
        f"sys.argv = ['onward', *{[*argv, '--db', db_url]!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code or 0\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    loaded = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    return proc.returncode, proc.stdout, loaded


def test_status_and_inbox_load_neither_langgraph_nor_langchain(db_url: str, workdir: Path) -> None:
    with Onward(db_url) as ow:
        done = ow.run(plan=plan_file(workdir, "two", TWO_STEPS), workdir=workdir).thread_id
        waiting = ow.run(
            plan=plan_file(workdir, "two", TWO_STEPS),
            policy=RunPolicy(approve_plan=True),
            workdir=workdir,
        ).thread_id
    # pydantic may load: Typer coerces the arguments with it since onward's own coercion
    # (a reach into Typer's private modules) is gone (issue 40's allowance for reads).
    cases = [("status", done), ("status", waiting), ("inbox",), ("inbox", "--json")]
    for argv in [*cases, ("status", waiting, "--json")]:
        code, out, loaded = commands_load(workdir, db_url, *argv)
        assert (code, bool(out.strip())) == (0, True), argv
        assert not loaded & set(HEAVY), (argv, loaded & set(HEAVY))
        assert "onward" in loaded  # the list is the process's own


def tamper(path: Path, thread_id: str, sql: str) -> None:
    with sqlite3.connect(path) as conn:
        latest_id = conn.execute(
            "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ?", (thread_id,)
        ).fetchone()[0]
        conn.execute(sql, (thread_id, latest_id))


def read_as_damaged(url: str, thread_id: str, run_cli: Any) -> Any:
    """Both light reads refuse the damaged checkpoint, and ``onward status`` says so with
    exit 2 and no traceback; returns what it printed."""
    with Tables.open(url) as tables:
        with pytest.raises(StoreCorruptError):
            latest.view(tables, thread_id)
        with pytest.raises(StoreCorruptError):
            plain.view(tables, thread_id)
    shown = run_cli("status", thread_id, db=url)
    assert shown.code == 2, shown.stderr
    assert "a checkpoint cannot be read" in shown.stderr
    assert "Traceback" not in shown.stderr
    return shown


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE checkpoints SET checkpoint = X'c1c1c1' WHERE thread_id = ? AND checkpoint_id = ?",
        "UPDATE checkpoints SET type = 'msgpack-z1', checkpoint = X'00ff00' "
        "WHERE thread_id = ? AND checkpoint_id = ?",
        "UPDATE checkpoints SET checkpoint = X'93010203' WHERE thread_id = ? AND checkpoint_id = ?",
    ],
    ids=["not-msgpack", "bad-deflate", "wrong-shape"],
)
def test_a_damaged_checkpoint_is_a_clear_error(
    sqlite_url: str, workdir: Path, run_cli: Any, damage: str
) -> None:
    with Onward(sqlite_url) as ow:
        tid = ow.run(plan=plan_file(workdir, "two", TWO_STEPS), workdir=workdir).thread_id
    tamper(Path(sqlite_url.removeprefix("sqlite:///")), tid, damage)
    shown = read_as_damaged(sqlite_url, tid, run_cli)
    as_json = run_cli("status", tid, "--json", db=sqlite_url)
    assert as_json.code == 2
    assert as_json.json()["error"] == "StoreCorruptError"
    if "msgpack-z1" in damage:  # the serializer's own check: the full read says the same
        full = in_process(workdir, ["status", tid, "--db", sqlite_url], {}, FORCE_FULL)
        assert (full.returncode, full.stderr) == (2, shown.stderr)


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE checkpoint_blobs SET blob = '\\xc1c1c1'::bytea WHERE thread_id = %s",
        "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{channel_values}', '[1]') "
        "WHERE thread_id = %s",
    ],
    ids=["blob-not-msgpack", "values-not-a-mapping"],
)
def test_a_damaged_postgres_checkpoint_is_a_clear_error(workdir: Path, damage: str) -> None:
    """On Postgres the values live in checkpoint_blobs and the JSON checkpoint row."""
    import psycopg

    with postgres_schema() as url:
        with Onward(url) as ow:
            tid = ow.run(plan=plan_file(workdir, "two", TWO_STEPS), workdir=workdir).thread_id
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(damage, (tid,)).rowcount > 0
        read_as_damaged(url, tid, cli_runner(workdir, url))


def test_a_postgres_snapshot_without_its_blob_goes_through_langgraph(workdir: Path) -> None:
    """The plan is a delta channel snapshotted at every write: PostgresSaver leaves
    ``true`` inline in its place and the value in checkpoint_blobs. Without that row the
    light read cannot be exact, and leaves the run to the full read."""
    import psycopg

    with postgres_schema() as url:
        with Onward(url) as ow:
            tid = ow.run(plan=plan_file(workdir, "two", TWO_STEPS), workdir=workdir).thread_id
        with Tables.open(url) as tables:
            latest.view(tables, tid)  # exact while the blob is there
        with psycopg.connect(url, autocommit=True) as conn:
            deleted = conn.execute(
                "DELETE FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'plan'", (tid,)
            )
            assert deleted.rowcount > 0
        with Tables.open(url) as tables:
            with pytest.raises(latest.FullRead, match="placeholder without its blob"):
                latest.view(tables, tid)
            with pytest.raises(checkpoint.FullRead, match="placeholder without its blob"):
                plain.view(tables, tid)


def test_what_it_cannot_read_exactly_goes_through_langgraph(
    sqlite_url: str, workdir: Path, run_cli: Any
) -> None:
    """A run with no checkpoint yet (queued) is read through LangGraph, same answer."""
    with Onward(sqlite_url) as ow:
        queued = ow.submit(plan=plan_file(workdir, "two", TWO_STEPS), workdir=workdir)
        expected = ow.get(queued).model_dump_json(indent=2)
    with Tables.open(sqlite_url) as tables:
        with pytest.raises(latest.FullRead):
            latest.view(tables, queued)
        with pytest.raises(checkpoint.FullRead):
            plain.view(tables, queued)
    shown = run_cli("status", queued, "--json", db=sqlite_url)
    assert (shown.code, shown.stdout.strip()) == (0, expected)


def test_the_readers_copies_of_the_format_are_the_serializers() -> None:
    """The constants and types the light read knows are the ones the write path uses."""
    from typing import get_type_hints

    from langgraph.channels import DeltaChannel
    from langgraph.checkpoint.serde import jsonplus

    from onward.checkpointing import serde, tags
    from onward.model.state import RunState

    for name in (
        "EXT_CONSTRUCTOR_SINGLE_ARG",
        "EXT_CONSTRUCTOR_POS_ARGS",
        "EXT_CONSTRUCTOR_KW_ARGS",
        "EXT_METHOD_SINGLE_ARG",
        "EXT_PYDANTIC_V2",
        "EXT_DELTA_SNAPSHOT",
    ):
        assert getattr(checkpoint, name) == getattr(jsonplus, name), name
    stored = set(tags.stored_names())  # every name the write path writes or once wrote
    assert {tags.tag_of(name) for name in stored} == set(tags.TAGS)
    assert set(serde.checkpoint_types()) == {tags.resolve(tag) for tag in tags.TAGS}
    onwards = {key for key in latest._types() if key not in checkpoint.STDLIB}
    assert onwards | {("onward.model.state", "RunState"), ("onward.state", "RunState")} == stored
    hints = get_type_hints(RunState, include_extras=True)
    deltas = {
        name: meta
        for name, hint in hints.items()
        for meta in getattr(hint, "__metadata__", ())
        if isinstance(meta, DeltaChannel)
    }
    assert set(deltas) == set(latest.DELTA_DEFAULTS) == set(latest.REDUCERS)
    assert set(deltas) == checkpoint.DELTA_CHANNELS
    reduced = {
        name
        for name, hint in hints.items()
        for meta in getattr(hint, "__metadata__", ())
        if callable(meta) and not isinstance(meta, DeltaChannel)
    }
    assert reduced == checkpoint.REDUCED
    defaults = RunState()
    for name in latest.DELTA_DEFAULTS:
        assert latest.DELTA_DEFAULTS[name]() == getattr(defaults, name), name
    snap = latest.Snapshot()
    for name in latest.FIELD_TYPES:
        assert getattr(snap, name) == getattr(defaults, name), name


def test_the_plain_questions_are_pending_decisions() -> None:
    """questions.Question mirrors PendingDecision: its fields in order, the enums' values,
    and pydantic's JSON form of a time."""
    from datetime import UTC, datetime, timedelta, timezone

    from pydantic import TypeAdapter

    from onward.model.state import WaitKind
    from onward.people.inbox import PendingDecision
    from onward.policies.run import ExpiryAction

    assert list(questions.Question.__slots__) == list(PendingDecision.model_fields)
    assert {k.value for k in WaitKind} == questions.WAIT_KINDS
    assert {a.value for a in ExpiryAction} == questions.EXPIRY_ACTIONS
    times = TypeAdapter(datetime)
    for at in (
        datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 120000),
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    ):
        assert questions.json_time(at) == times.dump_python(at, mode="json"), at


def test_the_plain_defaults_are_the_models() -> None:
    """observe.plain reads a field not stored as the model's default."""
    from onward.model import state

    for name, defaults in plain.DEFAULTS.items():
        fields = getattr(state, name).model_fields
        for field, default in defaults.items():
            assert fields[field].get_default(call_default_factory=True) == default, (name, field)


FORCE_FULL = """
from onward.observe import checkpoint, latest, plain, questions
def refuse(*args, **kwargs):
    raise checkpoint.FullRead("the full read, for comparison")
latest.latest_checkpoint = plain.latest_checkpoint = refuse
latest.latest_id = questions.latest_id = refuse
"""
"""Makes every light read give up: the CLI reads through LangGraph."""
SAY_LOADED = """
import atexit
atexit.register(lambda: print("langgraph" in sys.modules, file=sys.stderr))
"""
"""Says at exit (stderr's last line) whether the process loaded LangGraph."""


def in_process(workdir: Path, argv: list[str], env: dict[str, str], prefix: str = "") -> Any:
    """``onward ARGV`` in a new interpreter, after ``prefix`` (code) ran."""
    code = f"import sys\n{prefix}\nfrom onward.cli import main\n"
    code += f"sys.argv = ['onward', *{argv!r}]\nmain()\n"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=cli_env(**env),
        timeout=120,
    )


def test_an_encrypted_store_is_read_with_its_key(sqlite_url: str, workdir: Path) -> None:
    """Checkpoints sealed with ONWARD_AES_KEY are opened with it by the light reads."""
    key = {"ONWARD_AES_KEY": "k" * 32}
    plan_file(workdir, "two", TWO_STEPS)
    argv = ["run", "--plan", "two.json", "--json", "--approve-plan", "--db", sqlite_url]
    ran = in_process(workdir, argv, key)
    assert ran.returncode == 3, ran.stderr
    tid = json.loads(ran.stdout)["thread_id"]
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        types = {t for (t,) in conn.execute("SELECT type FROM checkpoints")}
    assert all("+" in t for t in types), types  # sealed
    for args in (["status", tid], ["status", tid, "--json"], ["inbox", "--json"]):
        light = in_process(workdir, [*args, "--db", sqlite_url], key, SAY_LOADED)
        full = in_process(workdir, [*args, "--db", sqlite_url], key, FORCE_FULL + SAY_LOADED)
        assert (light.returncode, full.returncode) == (0, 0), (light.stderr, full.stderr)
        assert light.stdout == full.stdout != "", args
        loaded = [p.stderr.strip().splitlines()[-1] for p in (light, full)]
        assert loaded == ["False", "True"], args  # the light read did read it
