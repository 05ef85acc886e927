"""Helpers shared by several test modules, moved out of tests/cli/test_mcp_tools.py:
COMMAND, SERVER, calls, gone, starts, wait_gone."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tests.support.common import read_jsonl
from tests.support.paths import SUPPORT

SERVER = SUPPORT / "mcp_server.py"
COMMAND = f"{sys.executable} {SERVER}"


def calls(log: Path, tool: str) -> list[dict[str, Any]]:
    return [c["args"] for c in read_jsonl(log) if c.get("tool") == tool]


def starts(log: Path) -> list[int]:
    return [c["started"] for c in read_jsonl(log) if "started" in c]


def gone(pid: int) -> bool:
    """The process has exited (or is a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in state


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 15
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return gone(pid)
