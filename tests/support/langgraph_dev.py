"""Helpers shared by several test modules, moved out of tests/server/test_langgraph_dev.py:
free_port, plain_text."""

from __future__ import annotations

import re
import socket
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plain_text(log: Path) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", log.read_text())
