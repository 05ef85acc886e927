"""Helpers shared by several test modules, moved out of tests/server/test_serve_api.py:
CONFIG, chain, done_steps, server, wait_until."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve import serve

CONFIG = """
assistants:
  onward:
    description: the default
  careful:
    description: asks before every step
    policy: {approve_all: true}
    budget: {max_steps: 10}
"""


def chain(*labels: str, seconds: float = 0.0) -> dict[str, Any]:
    """A plan of ``record`` effects, each after the one before."""
    steps = []
    for i, label in enumerate(labels):
        step: dict[str, Any] = {"id": label, "tool": "record", "args": {"label": label}}
        if seconds:
            step["args"]["seconds"] = seconds
        if i:
            step["depends_on"] = [labels[i - 1]]
        steps.append(step)
    return {"goal": "record " + " ".join(labels), "plan": {"steps": steps}}


@pytest.fixture
def server(db_url: str, workdir: Path) -> Iterator[str]:
    config = workdir.parent / "serve.yaml"
    config.write_text(CONFIG)
    with serve(db_url, workdir, "--config", str(config)) as url:
        yield url


def wait_until(what: str, check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def done_steps(values: dict[str, Any]) -> set[str]:
    return {sid for sid, r in (values.get("steps") or {}).items() if r.get("status") == "done"}
