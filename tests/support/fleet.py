"""Helpers shared by several test modules, moved out of tests/crash/test_fleet.py:
SHORT_LEASE, effect_plan, journal, start_worker."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support import zygote
from tests.support.common import cli_env, read_jsonl

SHORT_LEASE = {"ONWARD_LEASE_TTL": "1.0", "ONWARD_HEARTBEAT": "0.2"}
"""A killed worker's runs are claimable again about a second later."""


def effect_plan(path: Path, n: int, pause: float = 0.2) -> None:
    """write_file, a pause (so kills land mid-run), notify: one file and one outbox line."""
    steps = [
        {
            "id": "write",
            "tool": "write_file",
            "args": {"path": f"out/run-{n}.txt", "content": f"{n}"},
        },
        {"id": "pause", "tool": "wait", "args": {"seconds": pause}, "depends_on": ["write"]},
        {
            "id": "notify",
            "tool": "notify",
            "args": {"outbox": "outbox.jsonl", "message": f"run {n} done"},
            "depends_on": ["pause"],
        },
    ]
    path.write_text(yaml.safe_dump({"goal": f"effects {n}", "steps": steps}))


def start_worker(workdir: Path, db: str, *extra: str, **env: str) -> zygote.Process:
    """A worker forked from the zygote (``tests/support/zygote.py``): these tests are about kills,
    drains and takeovers, not start-up (the 30th run is submitted by a real ``onward``)."""
    return zygote.spawn(
        ["worker", "--db", db, "--json", "--poll", "0.05", *extra],
        cwd=workdir,
        env=cli_env(**{**SHORT_LEASE, **env}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def journal(workdir: Path) -> list[dict[str, Any]]:
    return read_jsonl(workdir / "journal.jsonl")  # workers may be writing a line
