"""Resume anywhere: SIGKILL a real ``onward run`` at many moments, resume in a new process.

Each case starts ``onward run`` with a known thread id, waits for the N-th line of
the execution journal (``ONWARD_EXECUTION_LOG``: one line when a tool call starts,
one when it ends, written outside the checkpoint), kills the process with SIGKILL,
then runs ``onward resume`` in a fresh process. The final report / copied files
must be byte-identical to an uninterrupted run, and no step whose execution had
been committed before the kill may run again.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from onward import Onward
from onward.demo import DEMO_GOAL, write_sample_orders
from tests.support import zygote
from tests.support.common import cli_env, read_jsonl

pytestmark = pytest.mark.crash

COPY_FILES = 30
SHORT_LEASE = {"ONWARD_LEASE_TTL": "0.5", "ONWARD_HEARTBEAT": "0.1"}
"""The killed driver's lease outlives it by at most half a second."""
COPY_GOAL = "copy every file in inbox/ to archive/"


@dataclass(frozen=True)
class KillPoint:
    line: int
    """Kill when the execution journal has this many lines (odd: a tool started)."""
    delay: float = 0.0
    """Extra seconds after that line, to land between tool end, commit and next superstep."""
    tool_delay: float = 0.0
    """ONWARD_FAULT_TOOL_DELAY for the killed process: > 0 makes the kill land inside a tool."""

    def __str__(self) -> str:
        where = "inside-tool" if self.tool_delay and self.line % 2 else "after"
        return f"line{self.line}-{where}-{int(self.delay * 1000)}ms"


# Demo: 5 steps → 10 journal lines. Copy: 30 steps → 60 lines, run 4 at a time. After the
# last line only verify and finalize are left: a short delay, or the run ends first.
DEMO_POINTS = [
    *(KillPoint(line, tool_delay=0.3) for line in (1, 3, 5, 7, 9)),  # inside each tool
    *(
        KillPoint(line, delay=d)
        for line, d in ((2, 0.0), (4, 0.005), (6, 0.02), (8, 0.0), (10, 0.01))
    ),
]
COPY_POINTS = [
    *(KillPoint(line, tool_delay=0.2) for line in (1, 11, 25, 41, 59)),  # inside a copy
    *(
        KillPoint(line, delay=d)
        for line, d in ((4, 0.0), (18, 0.01), (32, 0.003), (48, 0.0), (60, 0.002))
    ),
]


def _make_demo(wd: Path) -> list[str]:
    write_sample_orders(wd / "orders.csv", rows=120)
    return ["run", DEMO_GOAL, "--input", "orders.csv"]


def _make_copy(wd: Path) -> list[str]:
    (wd / "inbox").mkdir()
    for i in range(COPY_FILES):
        (wd / "inbox" / f"doc{i:02d}.txt").write_bytes(f"document {i}\n".encode() * (i + 1))
    return ["run", COPY_GOAL, "--max-concurrency", "4"]


SCENARIOS = {"demo": _make_demo, "copy": _make_copy}


def _outputs(wd: Path, scenario: str) -> dict[str, bytes]:
    if scenario == "demo":
        return {"orders-report.md": (wd / "orders-report.md").read_bytes()}
    return {p.name: p.read_bytes() for p in sorted((wd / "archive").iterdir())}


def _journal(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path)  # the killed process may be writing a line as we read


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """Outputs of uninterrupted runs."""
    refs = {}
    for name, make in SCENARIOS.items():
        wd = tmp_path_factory.mktemp(f"ref-{name}")
        args = make(wd)
        proc = zygote.run(
            [*args, "--db", f"sqlite:///{wd}/db/o.db"], cwd=wd, env=cli_env(), timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        refs[name] = _outputs(wd, name)
    return refs


def _kill_at(args: list[str], wd: Path, journal: Path, point: KillPoint) -> bool:
    """Start ``onward ARGS`` and SIGKILL it at ``point``; False if it finished first."""
    env = cli_env(ONWARD_EXECUTION_LOG=str(journal), **SHORT_LEASE)
    if point.tool_delay:
        env["ONWARD_FAULT_TOOL_DELAY"] = str(point.tool_delay)
    proc = zygote.spawn(args, cwd=wd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(_journal(journal)) < point.line:
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "run made no progress"
        time.sleep(0.002)
    if point.delay:
        time.sleep(point.delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc.returncode == -signal.SIGKILL


def _committed_steps(db: str, thread_id: str) -> set[str]:
    """Steps whose execution is in the latest checkpoint (so must never run again)."""
    with Onward(db) as ow:
        return {sid for sid, rec in ow.state(thread_id).steps.items() if rec.attempts > 0}


@pytest.mark.parametrize(
    ("scenario", "point"),
    [("demo", p) for p in DEMO_POINTS] + [("copy", p) for p in COPY_POINTS],
    ids=str,
)
def test_sigkill_then_resume_matches_uninterrupted_run(
    scenario: str,
    point: KillPoint,
    tmp_path: Path,
    reference: dict[str, dict[str, bytes]],
    db_url: str,
) -> None:
    wd = tmp_path / "work"
    wd.mkdir()
    args = SCENARIOS[scenario](wd)
    db = db_url
    journal = tmp_path / "journal.jsonl"
    thread_id = str(uuid.uuid4())
    killed = _kill_at([*args, "--thread-id", thread_id, "--db", db], wd, journal, point)
    assert killed, "the run finished before the kill point; the test would prove nothing"

    committed = _committed_steps(db, thread_id)
    with Onward(db) as ow:
        finished_before = ow.state(thread_id).status == "done"
    before = Counter(str(e["step"]) for e in _journal(journal) if e["phase"] == "start")

    resumed = zygote.run(
        ["resume", thread_id, "--takeover", "--db", db, "--json"],
        cwd=wd,
        env=cli_env(ONWARD_EXECUTION_LOG=str(journal), **SHORT_LEASE),
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    status = json.loads(resumed.stdout)
    assert status["status"] == "done"
    assert all(s["status"] == "done" for s in status["steps"])

    assert _outputs(wd, scenario) == reference[scenario]
    starts = Counter(str(e["step"]) for e in _journal(journal) if e["phase"] == "start")
    rerun = sorted(s for s in committed if starts[s] != before[s])
    assert not rerun, f"steps completed before the kill ran again: {rerun}"
    assert set(starts) == {s["id"] for s in status["steps"]}
    assert max(starts.values()) <= 2  # only the step killed mid-flight may run twice
    with Onward(db) as ow:
        kinds = [kind for _, kind, _ in ow.store.leases.events(thread_id)]
    # The dead driver's lease was taken over (and logged), unless the kill came after the
    # run had finished: then it was released, or the kill came between the last checkpoint
    # and the release and a resume of a finished run takes nothing.
    if finished_before:
        assert kinds[0] == "lease_acquired", kinds
        assert kinds[1:] in ([], ["lease_released"]), kinds
    else:
        assert kinds[1] in ("lease_released", "lease_taken_over"), kinds


def test_resume_of_a_finished_run_runs_nothing(run_cli, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("a")
    journal = workdir.parent / "journal.jsonl"
    env = {"ONWARD_EXECUTION_LOG": str(journal)}
    first = run_cli("run", COPY_GOAL, "--json", env=env)
    assert first.code == 0, first.stderr
    thread_id = first.json()["thread_id"]
    again = run_cli("resume", thread_id, "--json", env=env)
    assert again.code == 0
    assert again.json()["status"] == "done"
    assert len(_journal(journal)) == 2  # one start, one end: nothing re-ran


def test_kill_before_the_first_checkpoint_is_resumable(
    run_cli,
    workdir: Path,  # type: ignore[no-untyped-def]
    db_url: str,
) -> None:
    """A run killed while still importing/planning resumes from its stored request."""
    (workdir / "inbox").mkdir()
    (workdir / "inbox" / "a.txt").write_text("a")
    with Onward(db_url) as ow:
        thread_id = ow.start(COPY_GOAL)  # registered, never driven: as if killed at once
    resumed = run_cli("resume", thread_id, "--json")
    assert resumed.code == 0, resumed.stderr
    assert (workdir / "archive" / "a.txt").read_text() == "a"
    shutil.rmtree(workdir / "archive")
