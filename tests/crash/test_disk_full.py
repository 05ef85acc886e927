"""A full disk is a state onward gets out of by itself (issue 37): on a real full volume
(a tmpfs of a few MiB, mounted by the test: it needs root, and fails loudly without it) a
run stops suspended with the disk-full message and exit 2, ``onward prune`` works on the
full volume, a resume after space is freed finishes the run with no step run twice, a
tool's ``ENOSPC`` takes the same path, and the WAL stays under its checkpoint threshold.
Every command is a real ``onward`` process (forked from the zygote, tests/support/zygote.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from onward.store.sql import WAL_CHECKPOINT_PAGES
from tests.support import zygote
from tests.support.common import CliResult, cli_env

Volume = Callable[[int], Path]


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Volume]:
    """``volume(MiB)``: a tmpfs of that size, unmounted after the test. A mount that fails
    fails the test with the reason (CI runs these as root; they are not skipped)."""
    mounted: list[Path] = []

    def mount(mib: int) -> Path:
        where = tmp_path / f"vol{len(mounted)}"
        where.mkdir()
        made = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            pytest.fail(f"cannot mount a {mib} MiB tmpfs at {where}: {made.stderr.strip()}")
        mounted.append(where)
        return where

    try:
        yield mount
    finally:
        for where in mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path, leave: int) -> Path:
    """A file that takes all the volume's free space but ``leave`` bytes."""
    st = os.statvfs(where)
    filler = where / "filler"
    filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def onward(cwd: Path, db: str, *args: str) -> CliResult:
    proc = zygote.run([*args, "--db", db], cwd=cwd, env=cli_env(), timeout=600)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def chain(path: Path, n: int, size: int) -> Path:
    """A plan of ``n`` write_file steps, each after the one before, of ``size`` bytes each."""
    steps = [
        {
            "id": f"s{i}",
            "tool": "write_file",
            "args": {"path": f"o{i}.txt", "content": "x" * size},
            "depends_on": [f"s{i - 1}"] if i else [],
        }
        for i in range(n)
    ]
    path.write_text(json.dumps({"goal": "fill the disk", "steps": steps}), encoding="utf-8")
    return path


def status(cwd: Path, db: str, thread: str) -> str:
    shown = onward(cwd, db, "status", thread, "--json")
    return str(json.loads(shown.stdout)["status"])


def effects(db_file: Path, thread: str) -> dict[str, tuple[str, int]]:
    """step id → (effect status, calls) from the effect ledger."""
    with sqlite3.connect(f"{db_file.as_uri()}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT step_id, status, calls FROM onward_effects WHERE thread_id = ?", (thread,)
        ).fetchall()
    return {step: (state, calls) for step, state, calls in rows}


def stopped_on_full_disk(result: CliResult) -> str:
    """The message of a command a full disk stopped (exit 2, no traceback), one line."""
    assert result.code == 2, result
    assert "Traceback" not in result.stderr
    said = " ".join(result.stderr.split())
    assert "the disk is full" in said
    assert "then `onward resume` the run" in said
    return said


def test_a_full_store_volume_suspends_the_run_prune_works_and_resume_finishes_it(
    volume: Volume, workdir: Path
) -> None:
    vol = volume(24)
    db_file = vol / "onward.db"
    db = f"sqlite:///{db_file}"
    old = onward(workdir, db, "run", "--plan", str(chain(workdir / "old.json", 3, 10)))
    assert old.code == 0, old  # a finished run for prune to remove
    filler = fill(vol, leave=3_600_000)
    plan = chain(workdir / "long.json", 1_500, 100)
    thread = "full-disk-run"
    failed = onward(
        workdir, db, "run", "--plan", str(plan), "--max-plan-steps", "1500", "--thread-id", thread
    )
    stopped_on_full_disk(failed)
    assert status(workdir, db, thread) == "suspended"
    saved = effects(db_file, thread)
    assert 0 < len(saved) < 1_500  # it went some way, then the volume was full

    pruned = onward(workdir, db, "prune", "--older-than", "0s", "--json")
    assert pruned.code == 0, pruned
    assert len(json.loads(pruned.stdout)["removed"]) == 1

    filler.unlink()
    done = onward(workdir, db, "resume", thread, "--no-wait")
    assert done.code == 0, done
    assert status(workdir, db, thread) == "done"
    ledger = effects(db_file, thread)
    assert len(ledger) == 1_500
    assert {state for state, _ in ledger.values()} == {"completed"}
    # Every effect once, except the one in flight when the disk filled: its result could
    # not be recorded, so the idempotent tool is called again with the same key (the
    # protocol's rule for an unrecorded idempotent effect), never a third time.
    again = sorted(s for s, (_, calls) in ledger.items() if calls != 1)
    assert len(again) <= 1, again
    assert all(ledger[s][1] == 2 for s in again)
    assert all(ledger[s] == ("completed", 1) for s in saved if s not in again)
    assert len(list(workdir.glob("o*.txt"))) == 1_500


def test_prune_on_a_volume_with_no_byte_free_removes_runs_and_makes_room(
    volume: Volume, workdir: Path
) -> None:
    vol = volume(4)
    db = f"sqlite:///{vol / 'onward.db'}"
    for i in range(2):
        made = onward(workdir, db, "run", "--plan", str(chain(workdir / f"p{i}.json", 20, 20_000)))
        assert made.code == 0, made
    fill(vol, leave=0)
    assert os.statvfs(vol).f_bavail == 0
    pruned = onward(workdir, db, "prune", "--older-than", "0s", "--json")
    assert pruned.code == 0, pruned
    report: dict[str, Any] = json.loads(pruned.stdout)
    assert len(report["removed"]) == 2
    assert report["rows"] > 0
    assert report["db_bytes_after"] <= report["db_bytes_before"]


def test_a_tool_that_hits_a_full_disk_suspends_the_run_and_resume_finishes_it(
    volume: Volume, workdir: Path, sqlite_url: str
) -> None:
    """write_file's ENOSPC on the work directory's volume is not a deterministic failure
    that asks a person: the drive stops as a full store's does, and goes on once there
    is room."""
    work = volume(2)
    plan = chain(workdir / "big.json", 6, 200_000)
    filler = fill(work, leave=500_000)  # room for two of the six files
    thread = "tool-full-run"
    failed = onward(work, sqlite_url, "run", "--plan", str(plan), "--thread-id", thread)
    assert "could not write" in stopped_on_full_disk(failed)
    assert status(workdir, sqlite_url, thread) == "suspended"
    inbox = onward(workdir, sqlite_url, "inbox", "--json")
    assert inbox.code == 0, inbox
    assert json.loads(inbox.stdout) == []  # nobody is asked to decide the step
    filler.unlink()
    done = onward(work, sqlite_url, "resume", thread, "--no-wait")
    assert done.code == 0, done
    assert all((work / f"o{i}.txt").stat().st_size == 200_000 for i in range(6))
    calls = sorted(n for _, n in effects(_db_file(sqlite_url), thread).values())
    assert calls == [1, 1, 1, 1, 1, 2]  # only the step that failed ran again


def _db_file(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def _wal_header(wal: Path) -> tuple[int, int]:
    """(pages the WAL file has room for, its checkpoint sequence number): the sequence
    grows by one every time the WAL restarts after a checkpoint (SQLite's WAL format)."""
    head = wal.read_bytes()[:32]
    if len(head) < 32:
        return 0, 0  # empty: the last connection before folded it back and cut it
    page = struct.unpack(">I", head[8:12])[0]
    (sequence,) = struct.unpack(">I", head[12:16])
    return (wal.stat().st_size - 32) // (page + 24), sequence


def test_the_wal_is_folded_back_through_a_long_run_and_never_outgrows_its_threshold(
    workdir: Path, sqlite_url: str
) -> None:
    """400 steps write ~5,000 WAL pages; with checkpoints every 1,000 pages the WAL file
    never holds more than that and one step's commit (it was 10,000: 40 MB)."""
    first = onward(workdir, sqlite_url, "run", "--plan", str(chain(workdir / "a.json", 1, 1)))
    assert first.code == 0, first
    db_file = _db_file(sqlite_url)
    wal = db_file.with_name(db_file.name + "-wal")
    # An idle connection of the test's keeps the WAL file after the run's last one closes.
    hold = sqlite3.connect(db_file)
    try:
        hold.execute("SELECT count(*) FROM onward_runs").fetchone()
        _, before = _wal_header(wal)
        plan = chain(workdir / "long.json", 400, 10)
        run = onward(workdir, sqlite_url, "run", "--plan", str(plan), "--max-plan-steps", "400")
        assert run.code == 0, run
        pages, after = _wal_header(wal)
    finally:
        hold.close()
    assert pages <= WAL_CHECKPOINT_PAGES + 64, (before, after, pages)
    # Folded back during the run (7 times on a quiet host; a reader in the middle of each
    # checkpoint on a loaded one can put a restart off, never the bound above).
    assert after - before >= 1, (before, after, pages)
