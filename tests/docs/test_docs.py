"""Every example in the docs runs. The README and each page of docs/ are read top to
bottom in a fresh work directory (an SQLite store under tmp, no network, no model key):

* a ```python block runs in a new interpreter, with the work directory as cwd;
* a ```bash block runs with ``bash -euo pipefail``: it is a sequence a reader can paste,
  so every line must succeed (a command expected to stop with a code says ``|| test $? = 3``);
* a block right after ``<!-- file: NAME -->`` is first written to NAME in the work
  directory (a plan, a policy, a tool module), for the blocks after it to use; a python
  one is then run too, a bash one only written;
* a block right after ``<!-- serve: ARGS -->`` runs while ``onward serve ARGS`` serves the
  page's store and work directory on a free port; the block's ``127.0.0.1:8420`` (the
  default address) is replaced by that port;
* a block right after ``<!-- not-run: REASON -->`` is not run; the reason is required and
  says why (it needs a server, a model key, the test suite itself). Use it sparingly;
* ```text blocks are synopses (placeholders such as THREAD, [--step ID]); they are not
  run, but every ``onward COMMAND --option`` they name must exist in the CLI.

A page's blocks share its work directory, so a later block sees what an earlier one made.

The examples' processes are forked from the pre-imported zygote (``tests/support/zygote.py``): a
python block runs as ``python SCRIPT`` would, and the ``onward`` a bash block finds first on
its PATH is a stub that forks the console script (:func:`tests.support.zygote.shim_bin`). What is
tested is what the examples do; tests/cli/test_cli.py starts every command through the real
console script and ``python -m onward`` (``ONWARD_TEST_FORK=off`` starts these for real too).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import zygote
from tests.support.common import cli_env
from tests.support.docs import cli_options
from tests.support.paths import ROOT

PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")],
    key=lambda p: p.relative_to(ROOT).as_posix(),
)
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
MARKER = re.compile(r"<!--\s*(?P<kind>not-run|file|serve):\s*(?P<arg>.*?)\s*-->\s*$")
TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    body: str
    marker: str | None = None
    arg: str = ""

    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        indent = len(match.group("indent"))
        body = "".join(line[indent:] + "\n" for line in match.group("body").splitlines())
        found.append(
            Block(
                page,
                text.count("\n", 0, match.start()) + 1,
                match.group("lang"),
                body,
                marker.group("kind") if marker else None,
                marker.group("arg") if marker else "",
            )
        )
    return found


DEFAULT_ADDRESS = "127.0.0.1:8420"


@contextmanager
def serving(args: str, workdir: Path, env: dict[str, str]) -> Iterator[str]:
    """``onward serve ARGS`` on a free port until the block is done: its address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (workdir.parent / f"serve-{port}.log").open("w")
    argv = ["serve", "--port", str(port), *args.split()]
    proc = zygote.spawn(argv, cwd=workdir, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ok", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    tail = Path(log.name).read_text()[-4000:]
                    raise AssertionError(f"onward serve {args} did not start:\n{tail}") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def run_page(page: Path, workdir: Path) -> int:
    """Run a page's examples in order in ``workdir``; return how many ran. Fails on the
    first example that fails, naming it and showing its output."""
    path = [str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    shim: dict[str, str] = {}
    if zygote.forking():
        path.insert(0, str(zygote.shim_bin()))
        shim = zygote.shim_env()
    env = cli_env(
        ONWARD_DB=f"sqlite:///{workdir.parent / 'store' / 'onward.db'}",
        PATH=os.pathsep.join(path),
        **shim,
    )
    ran = 0
    for n, block in enumerate(blocks(page)):
        if block.marker == "not-run":
            assert block.arg, f"{block.where()}: a not-run block must say why"
            continue
        if block.marker == "file":
            target = workdir / block.arg
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body, encoding="utf-8")
        if block.lang not in ("python", "bash") or (block.lang, block.marker) == ("bash", "file"):
            continue
        server = serving(block.arg, workdir, env) if block.marker == "serve" else nullcontext()
        with server as address:
            body = block.body.replace(DEFAULT_ADDRESS, address) if address else block.body
            if block.lang == "python":
                script = workdir / f".doc_example_{n}.py"
                script.write_text(body, encoding="utf-8")
                proc = zygote.run(
                    [script.name], cwd=workdir, env=env, timeout=TIMEOUT, mode="script"
                )
            else:
                proc = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", body],
                    cwd=workdir,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=TIMEOUT,
                )
        assert proc.returncode == 0, (
            f"the example at {block.where()} failed (exit {proc.returncode}):\n{block.body}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
        ran += 1
    return ran


def runnable(page: Path) -> bool:
    return any(
        b.marker != "not-run" and (b.lang == "python" or (b.lang == "bash" and b.marker is None))
        for b in blocks(page)
    )


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if runnable(p)],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_every_example_on_the_page_runs(page: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    assert run_page(page, workdir) > 0


def test_a_failing_example_fails_its_page(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nonward graph > /dev/null\n```\n\n```python\nraise SystemExit(3)\n```\n",
        encoding="utf-8",
    )
    (tmp_path / "work").mkdir()
    with pytest.raises(AssertionError, match=r"page\.md:5 failed \(exit 3\)"):
        run_page(page, tmp_path / "work")


def test_not_run_blocks_are_few_and_say_why() -> None:
    skipped = [b for p in PAGES for b in blocks(p) if b.marker == "not-run"]
    assert all(b.arg for b in skipped)
    examples = [b for p in PAGES for b in blocks(p) if b.lang in ("python", "bash")]
    assert len(skipped) * 3 <= len(examples), [b.where() for b in skipped]


def test_readme_setup_is_one_install_and_the_offline_demo(tmp_path: Path) -> None:
    """The two-command set-up (not run by the page runner: it installs) is an install and
    `onward demo`, and the demo runs offline on the embedded store."""
    [setup] = [b for b in blocks(ROOT / "README.md") if "pip install" in b.body]
    commands = [line.split("#")[0].strip() for line in setup.body.splitlines()]
    assert commands == ['pip install -e ".[dev]"', "onward demo"]
    proc = subprocess.run(
        [sys.executable, "-m", "onward", "demo"],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "onward-demo" / "orders-report.md").is_file()
    assert (tmp_path / ".onward" / "onward.db").is_file()


# -- synopses name real commands and options -------------------------------------------


def cli_lines() -> list[tuple[Block, list[str]]]:
    found = []
    for page in PAGES:
        for block in blocks(page):
            if block.lang not in ("bash", "text"):
                continue
            for line in block.body.splitlines():
                words = line.split("#", 1)[0].split()
                while words and "=" in words[0]:  # VAR=value onward ...
                    words.pop(0)
                if len(words) >= 2 and words[0] == "onward":
                    found.append((block, words))
    return found


def test_synopses_name_real_commands_and_options() -> None:
    lines = cli_lines()
    assert lines
    commands = cli_options()
    assert {"run", "resume", "approve", "serve", "graph"} <= commands.keys()
    problems = []
    for block, words in lines:
        for cmd in words[1].split("|"):
            if cmd not in commands:
                problems.append(f"{block.where()}: the CLI has no command {cmd!r}")
                continue
            for word in words[2:]:
                for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", word):
                    if option not in commands[cmd]:
                        problems.append(f"{block.where()}: onward {cmd} has no {option}")
    assert not problems, "\n".join(problems)


# -- the API reference is the public door ------------------------------------------------


def test_api_reference_renders_exactly_the_public_names() -> None:
    """docs/api.md renders every name `onward` exports, through the top-level package
    (never a module path: modules are internal and move)."""
    import onward

    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rendered = re.findall(r"^::: (\S+)$", page, re.M)
    assert sorted(rendered) == sorted(f"onward.{name}" for name in onward.__all__)
