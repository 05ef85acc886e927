"""Helpers shared by several test modules, moved out of tests/server/test_serve.py:
HITL_TOOLS, PAY_PLAN, free_port, payments, serve, start_server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support import zygote
from tests.support.common import cli_env, onward_cmd
from tests.support.paths import SUPPORT

HITL_TOOLS = str(SUPPORT / "hitl_tools.py")
PAY_PLAN = {
    "steps": [
        {"id": "pay", "tool": "pay", "args": {"amount": 5, "to": "bo"}},
        {"id": "after", "tool": "slow", "args": {"value": 2}, "depends_on": ["pay"]},
    ]
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    db_url: str,
    workdir: Path,
    *args: str,
    port: int | None = None,
    log: Path | None = None,
    real: bool = False,
    **env: str,
) -> tuple[zygote.Process, str]:
    """``onward serve`` (the HITL test tools loaded) in a new process, once ``/ok`` answers:
    (process, URL). Forked from the zygote, or with ``real`` started as ``python -m onward``.
    Its stderr goes to ``log`` (a temporary file by default), never to a pipe: a server
    that logs a lot would block on a full pipe nobody reads."""
    port = port or free_port()
    if log is None:
        fd, name = tempfile.mkstemp(prefix="onward-serve-", suffix=".log")
        os.close(fd)
        log = Path(name)
    argv = ["serve", "--db", db_url, "--port", str(port), "--tools", HITL_TOOLS, *args]
    with log.open("w") as err:
        proc: zygote.Process
        if real:
            proc = subprocess.Popen(
                onward_cmd(*argv),
                cwd=workdir,
                env=cli_env(**env),
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
            )
        else:
            proc = zygote.spawn(
                argv, cwd=workdir, env=cli_env(**env), stdout=subprocess.DEVNULL, stderr=err
            )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(log.read_text()[-4000:] or "server died") from None
            time.sleep(0.1)


@contextmanager
def serve(
    db_url: str,
    workdir: Path,
    *args: str,
    log: Path | None = None,
    real: bool = False,
    **env: str,
) -> Iterator[str]:
    proc, url = start_server(db_url, workdir, *args, log=log, real=real, **env)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def payments(workdir: Path) -> list[dict[str, Any]]:
    path = workdir / "payments.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
