"""Kills between execute and verify, and inside verify: the tool is never called again,
and the run ends byte-identical to an uninterrupted one.

execute saves a step's output as produced (its writes are committed); verify decides done
or failed, and its superstep is committed with the next step's writes. A SIGKILL at the
start of verify, or after its checks, must resume at verify: the execution journal
(``ONWARD_EXECUTION_LOG``, written outside the checkpoint) shows each tool call once.
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest

from onward import Onward
from tests.support import zygote
from tests.support.common import cli_env, read_jsonl

pytestmark = pytest.mark.crash

PLAN = """\
steps:
  - id: a
    tool: write_file
    args: {path: out/a.txt, content: "first"}
    output: wrote_a
    checks: [{check: file_exists, path: out/a.txt}]
  - id: b
    tool: read_file
    args: {path: out/a.txt}
    depends_on: [a]
    output: read_b
    checks: [{check: equals, field: text, value: "first"}]
  - id: c
    tool: write_file
    args: {path: out/c.txt, content: "${read_b.text} and second"}
    depends_on: [b]
    checks: [{check: file_exists, path: out/c.txt}]
"""


def _run(wd: Path, db: str, thread_id: str, journal: Path, kill: str | None) -> int:
    (wd / "plan.yaml").write_text(PLAN, encoding="utf-8")
    env = cli_env(ONWARD_EXECUTION_LOG=str(journal), ONWARD_LEASE_TTL="0.5")
    if kill:
        env["ONWARD_FAULT_KILL"] = kill
    args = ["run", "--plan", "plan.yaml", "--db", db, "--thread-id", thread_id]
    return zygote.run(args, cwd=wd, env=env, timeout=120).returncode


def _resume(wd: Path, db: str, thread_id: str, journal: Path) -> subprocess.CompletedProcess[str]:
    env = cli_env(ONWARD_EXECUTION_LOG=str(journal), ONWARD_LEASE_TTL="0.5")
    args = ["resume", thread_id, "--db", db, "--json", "--takeover"]
    return zygote.run(args, cwd=wd, env=env, timeout=120)


def _outcome(db: str, thread_id: str, wd: Path) -> tuple[object, ...]:
    with Onward(db) as ow:
        view = ow.get(thread_id)
        steps = [(s.id, s.status.value, s.attempts) for s in view.steps]
        values = {n: view.artifact_value(ow, n) for n in ("wrote_a", "read_b")}
    files = {p.relative_to(wd).as_posix(): p.read_bytes() for p in sorted((wd / "out").rglob("*"))}
    return view.status.value, steps, values, files


@pytest.mark.parametrize("point", ["before_verify", "inside_verify"])
@pytest.mark.parametrize("step", ["a", "b", "c"])
def test_a_kill_at_verify_resumes_at_verify_without_calling_the_tool_again(
    tmp_path: Path, point: str, step: str
) -> None:
    clean_wd, killed_wd = tmp_path / "clean", tmp_path / "killed"
    clean_wd.mkdir()
    killed_wd.mkdir()
    clean_db = f"sqlite:///{tmp_path / 'clean.db'}"
    killed_db = f"sqlite:///{tmp_path / 'killed.db'}"
    clean_log, killed_log = tmp_path / "clean.jsonl", tmp_path / "killed.jsonl"
    assert _run(clean_wd, clean_db, "t", clean_log, None) == 0

    thread_id = f"kill-{uuid.uuid4().hex[:8]}"
    code = _run(killed_wd, killed_db, thread_id, killed_log, f"{point}:{step}")
    assert code == -signal.SIGKILL, "the fault point was not reached"
    calls_before = Counter(e["step"] for e in read_jsonl(killed_log) if e["phase"] == "start")
    assert calls_before[step] == 1

    resumed = _resume(killed_wd, killed_db, thread_id, killed_log)
    assert resumed.returncode == 0, resumed.stderr

    calls = Counter(e["step"] for e in read_jsonl(killed_log) if e["phase"] == "start")
    assert calls == {"a": 1, "b": 1, "c": 1}, "a tool ran again after a kill at verify"
    clean = _outcome(clean_db, "t", clean_wd)
    killed = _outcome(killed_db, thread_id, killed_wd)
    assert killed == clean
