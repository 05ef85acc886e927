"""Start-up: ``--help`` and the commands that read only onward's own tables load neither
LangChain nor LangGraph. Structural (the process's own import log, ``-X importtime``),
never a wall-clock time; bench/startup.py measures the times."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onward import Onward, RunPolicy, RunStatus
from tests.support.common import CliResult, cli_env

HEAVY = ("langchain_core", "langgraph", "langsmith")


def traced(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[CliResult, set[str]]:
    """``onward ARGS`` in a new process, and the top-level packages it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "onward", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=cli_env(**(env or {})),
        timeout=120,
    )
    log = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    packages = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in log[1:]}  # 1: header
    assert "onward" in packages, proc.stderr[-2000:]  # the log is there to read
    rest = "\n".join(
        line for line in proc.stderr.splitlines() if not line.startswith("import time:")
    )
    return CliResult(proc.returncode, proc.stdout, rest), packages


def heavy(packages: set[str]) -> set[str]:
    return packages & set(HEAVY)


def test_help_loads_neither_langgraph_nor_pydantic(tmp_path: Path) -> None:
    result, packages = traced("--help", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert "timeline" in result.stdout
    assert "inbox" in result.stdout
    assert not heavy(packages)
    assert "pydantic" not in packages  # Typer itself imports it only to run a command


def test_import_onward_loads_nothing_heavy(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import json, sys, onward; print(json.dumps(list(sys.modules)))"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=cli_env(),
        check=True,
    )
    loaded = {m.split(".")[0] for m in json.loads(proc.stdout)}
    assert not heavy(loaded)
    assert "pydantic" not in loaded


@pytest.fixture
def done_run(workdir: Path, db_url: str) -> str:
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("a")
    with Onward(db_url) as ow:
        view = ow.run("copy every file in inbox/ to archive/")
    assert view.status is RunStatus.DONE
    return view.thread_id


def test_list_timeline_and_an_empty_inbox_read_the_tables_only(
    workdir: Path, db_url: str, done_run: str
) -> None:
    """Same answers as the API (which opens the whole store), without LangGraph."""
    with Onward(db_url) as ow:
        runs = ow.list_runs(50)
        events = ow.timeline(done_run, kinds=["step_done"])
    listed, packages = traced("list", "--json", "--db", db_url, cwd=workdir)
    assert listed.code == 0, listed.stderr
    assert not heavy(packages)
    assert [(r["thread_id"], r["status"], r["objective"], r["stalled"]) for r in listed.json()] == [
        (r.thread_id, r.status.value, r.objective, False) for r in runs
    ]
    shown, packages = traced(
        "timeline", done_run, "--kind", "step_done", "--json", "--db", db_url, cwd=workdir
    )
    assert shown.code == 0, shown.stderr
    assert not heavy(packages)
    assert shown.json() == [e.model_dump(mode="json") for e in events] != []
    inbox, packages = traced("inbox", "--json", "--db", db_url, cwd=workdir)
    assert (inbox.code, inbox.json()) == (0, [])
    assert not heavy(packages)
    unknown, packages = traced("timeline", "nope", "--db", db_url, cwd=workdir)
    assert unknown.code == 2
    assert "no run with thread id 'nope'" in unknown.stderr
    assert not heavy(packages)


def test_a_waiting_run_is_read_from_its_checkpoint(workdir: Path, db_url: str) -> None:
    """The inbox's questions live in checkpoints: with a run unfinished they are read from
    its latest checkpoint, without LangGraph (onward.observe.questions), on either backend."""
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("a")
    with Onward(db_url) as ow:
        view = ow.run("copy every file in inbox/ to archive/", policy=RunPolicy(approve_plan=True))
        pending = ow.inbox()
    assert view.status is RunStatus.WAITING_FOR_HUMAN
    inbox, packages = traced("inbox", "--json", "--db", db_url, cwd=workdir)
    assert inbox.code == 0, inbox.stderr
    assert inbox.json() == [p.model_dump(mode="json") for p in pending] != []
    assert "langgraph" not in packages


def test_an_encrypted_store_reads_with_its_key_and_refuses_without(
    workdir: Path, db_url: str
) -> None:
    key = {"ONWARD_AES_KEY": "k" * 32}
    missing, _ = traced("list", "--json", "--db", db_url, cwd=workdir, env=key)
    assert missing.code == 2  # reading never creates a store; the run below does
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("a")
    goal = "copy every file in inbox/ to archive/"
    ran = subprocess.run(
        [sys.executable, "-m", "onward", "run", goal, "--json", "--db", db_url],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=cli_env(**key),
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    listed, packages = traced("list", "--json", "--db", db_url, cwd=workdir, env=key)
    assert [r["objective"] for r in listed.json()] == [goal]
    assert not heavy(packages)
    refused, _ = traced("list", "--db", db_url, cwd=workdir)
    assert refused.code == 2
    assert "is encrypted; set ONWARD_AES_KEY to its key" in refused.stderr
    wrong, _ = traced("list", "--db", db_url, cwd=workdir, env={"ONWARD_AES_KEY": "w" * 32})
    assert wrong.code == 2
    assert "is not the key the store" in wrong.stderr


def test_what_the_light_paths_copy_stays_equal_to_its_source() -> None:
    """The values the table reader and the CLI declare so they need not import the models."""
    from onward.cli.options import OnExpiry
    from onward.model.state import RunStatus
    from onward.policies.run import ExpiryAction
    from onward.store import tables
    from onward.store.database import STORE_SCHEMA_VERSION

    assert tables.SCHEMA_VERSION == STORE_SCHEMA_VERSION
    assert set(tables.FINISHED) == {s.value for s in RunStatus if s.finished}
    assert [e.value for e in OnExpiry] == [e.value for e in ExpiryAction]


def test_each_command_runs_in_an_app_of_its_own_group() -> None:
    """``onward CMD`` builds only CMD's group; help and unknown words get the whole CLI."""
    import typer

    from onward import cli

    whole = typer.main.get_command(cli.app)
    assert isinstance(whole, typer.core.TyperGroup)
    for name in whole.commands:
        narrow = typer.main.get_command(cli.for_command([name, "--json"]))
        assert isinstance(narrow, typer.core.TyperGroup)
        assert name in narrow.commands
        assert set(narrow.commands) < set(whole.commands)
        assert [(p.name, p.opts) for p in narrow.commands[name].params] == [
            (p.name, p.opts) for p in whole.commands[name].params
        ]
    for argv in ([], ["--help"], ["--help", "status"]):
        assert cli.for_command(argv) is cli.index()  # the group's help: the index
    for argv in (["lis"], ["--bogus"]):
        assert cli.for_command(argv) is cli.app


def test_the_command_table_is_what_the_modules_register() -> None:
    """``onward CMD`` imports CMD's module from the table; it must name every command."""
    from typer.main import get_command_name

    from onward import cli

    registered = {
        info.name or get_command_name(info.callback.__name__): name
        for name in cli.GROUPS
        for info in cli.group(name).commands.registered_commands
        if info.callback
    }
    assert registered == cli.COMMANDS


def test_a_command_imports_only_its_own_group(workdir: Path, db_url: str, done_run: str) -> None:
    _, packages = traced("list", "--db", db_url, cwd=workdir)  # the top-level names only
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "onward", "list", "--db", db_url],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = {ln.rsplit("|", 1)[1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    groups = {m for m in loaded if m.startswith("onward.cli.")} - {
        "onward.cli.options",
        "onward.cli.render",
        "onward.cli.helptext",
    }
    assert groups == {"onward.cli.inspecting"}
    assert not heavy(packages)


def test_the_help_index_lists_each_command_as_its_own_docstring_does() -> None:
    """``onward --help`` prints the index (cli.SUMMARIES) instead of every command: it
    must name the same commands, in the same order, with the help they say themselves."""
    import inspect

    from onward import cli

    whole = typer_group(cli.app)
    assert list(cli.SUMMARIES) == list(whole.commands)
    for name, command in whole.commands.items():
        shown = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0]
        assert cli.SUMMARIES[name] == shown, name
    index = typer_group(cli.index())
    assert list(index.commands) == list(whole.commands)
    assert all(not c.params for c in index.commands.values())  # nothing built for help


def typer_group(app: object) -> Any:
    import typer

    group = typer.main.get_command(app)  # type: ignore[arg-type]
    assert isinstance(group, typer.core.TyperGroup)
    return group


WHOLE = "from onward.cli import whole\n"
"""The whole CLI (every command built, Typer renders every help), after a prelude."""


def loaded_modules(stderr: bytes) -> set[str]:
    return {
        ln.rsplit("|", 1)[1].strip()
        for ln in stderr.decode().splitlines()
        if ln.startswith("import time:")
    }


@pytest.mark.parametrize(
    ("argv", "env", "colour"),
    [
        (["--help"], {"COLUMNS": "40"}, False),
        (["--help"], {"COLUMNS": "52"}, False),  # click wraps the usage line here
        (["--help"], {"COLUMNS": "80"}, False),
        (["--help"], {"COLUMNS": "200"}, False),
        (["--help"], {"COLUMNS": "120", "NO_COLOR": "", "FORCE_COLOR": "1"}, True),
        (["--help"], {"COLUMNS": "40", "NO_COLOR": "", "FORCE_COLOR": "1"}, True),
        (["--help"], {"COLUMNS": "90", "FORCE_COLOR": "1"}, True),  # NO_COLOR: bold, dim
        (["--help"], {"COLUMNS": "90", "NO_COLOR": "", "GITHUB_ACTIONS": "true"}, True),
        (["--help"], {"COLUMNS": "90", "NO_COLOR": "", "PY_COLORS": "1"}, True),
        (["--help"], {"TERMINAL_WIDTH": "60", "COLUMNS": "150"}, False),
        (["--help"], {"COLUMNS": "100", "TYPER_USE_RICH": "0"}, False),  # click's plain help
        ([], {"COLUMNS": "80"}, False),
        (["--help", "status"], {"COLUMNS": "100"}, False),
    ],
)
def test_onward_help_prints_what_the_whole_cli_prints(
    tmp_path: Path, argv: list[str], env: dict[str, str], colour: bool
) -> None:
    """The real entry point and the whole CLI, byte for byte, plain and in colour, at
    several widths. ``onward --help`` is drawn without Typer (cli/grouphelp.py), so this is
    what keeps it equal to Typer's rendering; the rest go to the index, and none imports
    a command module."""
    script = WHOLE + "whole()(sys.argv[1:], prog_name='python -m onward')\n"
    full = subprocess.run(
        [sys.executable, "-c", "import sys\n" + script, *argv],
        cwd=tmp_path,
        capture_output=True,
        env=cli_env(**env),
        timeout=120,
    )
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "onward", *argv],
        cwd=tmp_path,
        capture_output=True,
        env=cli_env(**env),
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (full.returncode, full.stdout)
    assert b"Usage:" in proc.stdout  # the help, not an error
    assert b"timeline" in proc.stdout
    assert (b"\x1b[" in proc.stdout) == colour
    loaded = loaded_modules(proc.stderr)
    fast = argv == ["--help"] and "TYPER_USE_RICH" not in env
    assert ("typer" in loaded) != fast  # the page above came from grouphelp, not Typer
    assert not {m for m in loaded if m.startswith("onward.cli.")} - {
        "onward.cli.grouphelp",
        "onward.cli.helptext",
    }


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("onward", {"COLUMNS": "80"}),
        ("onward", {"COLUMNS": "52"}),
        ("onward-" + "x" * 30, {"COLUMNS": "52"}),  # click puts the usage's words below
        ("onward-" + "x" * 30, {"COLUMNS": "100"}),
        ("onward", {"COLUMNS": "80", "_ONWARD_COMPLETE": "bash_source"}),  # Typer answers
    ],
)
def test_the_installed_script_prints_what_the_whole_cli_prints(
    tmp_path: Path, name: str, env: dict[str, str]
) -> None:
    """As the ``onward`` script (the program's name detected from argv[0], as click does)."""
    prelude = f"import sys\nsys.argv[0] = {f'/bin/{name}'!r}\n"
    outputs = [
        subprocess.run(
            [sys.executable, "-c", prelude + entry, "--help"],
            cwd=tmp_path,
            capture_output=True,
            env=cli_env(**env),
            timeout=120,
        )
        for entry in ("from onward.cli import main\nmain()\n", WHOLE + "whole()()\n")
    ]
    fast, full = ((p.returncode, p.stdout, p.stderr) for p in outputs)
    assert fast == full
    assert (b"Usage: " + name.encode() in fast[1]) == ("_ONWARD_COMPLETE" not in env)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX pseudo-terminal")
@pytest.mark.parametrize("columns", [40, 100])
@pytest.mark.parametrize("term", ["xterm-256color", "dumb"])
def test_help_on_a_terminal_is_what_the_whole_cli_prints(
    tmp_path: Path, columns: int, term: str
) -> None:
    """On a terminal (Rich finds its width and colours there, not in the environment)."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    env = {k: v for k, v in cli_env().items() if k not in ("COLUMNS", "NO_COLOR")}
    env["TERM"] = term

    def on_a_terminal(code: str) -> tuple[int, bytes]:
        leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "--help"],
            cwd=tmp_path,
            stdin=follower,
            stdout=follower,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the follower closed (Linux: EIO)
                break
            if not chunk:
                break
            out += chunk
        os.close(leader)
        return proc.wait(timeout=120), out

    prelude = "import sys\nsys.argv[0] = '/bin/onward'\n"
    fast = on_a_terminal(prelude + "from onward.cli import main\nmain()\n")
    full = on_a_terminal(prelude + WHOLE + "whole()()\n")
    assert fast == full
    assert fast[0] == 0
    assert (b"\x1b[" in fast[1]) == (term != "dumb")
    if term != "dumb":  # Rich takes a dumb terminal as 80 columns wide
        plain = re.sub(r"\x1b\[[0-9;]*m", "", fast[1].decode())
        assert max(len(line) for line in plain.splitlines()) == columns  # the terminal's


def test_read_commands_with_options_load_no_langgraph(
    workdir: Path, db_url: str, done_run: str
) -> None:
    """list, timeline and an empty inbox, options given, need neither LangGraph nor
    LangChain; a value out of range is refused in Typer's words."""
    for argv in (
        ["list", "--limit", "5"],
        ["timeline", done_run, "--kind", "step_done", "--step", "x"],
        ["inbox", "--user", "ann"],
    ):
        result, packages = traced(*argv, "--db", db_url, cwd=workdir)
        assert result.code == 0, result.stderr
        assert not heavy(packages), argv
    refused, packages = traced("list", "--limit", "0", "--db", db_url, cwd=workdir)
    assert refused.code == 2
    assert "Input should be greater than or equal to 1" in refused.stderr
    assert not heavy(packages)
