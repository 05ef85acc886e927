"""Built-in file and utility tools: read_file, list_dir, copy_file, write_file, wait, noop."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from onward.errors import DeterministicToolError
from onward.model.state import SideEffect, utcnow
from onward.store.artifacts import atomic_write
from onward.tools.registry import ToolContext, tool
from onward.verification.checks import NonEmpty


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@tool(timeout=60)
def read_file(path: str, max_bytes: int = 200_000, *, ctx: ToolContext) -> dict[str, Any]:
    """Read a UTF-8 text file (at most ``max_bytes``; ``truncated`` says if there was more)."""
    file = ctx.path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{path} is not a file in {ctx.workdir}")
    data = file.read_bytes()
    text = data[:max_bytes].decode("utf-8", errors="replace")
    return {"path": path, "text": text, "bytes": len(data), "truncated": len(data) > max_bytes}


@tool(timeout=60)
def list_dir(path: str = ".", pattern: str = "*", *, ctx: ToolContext) -> dict[str, Any]:
    """List the files under a directory matching a glob (``**/*.txt`` recurses), sorted."""
    root = ctx.path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{path} is not a directory in {ctx.workdir}")
    # Confined, ``root`` is resolved (symlinks followed), so names are taken against the
    # resolved work directory; the glob refuses patterns that climb out (onward.policies.confine).
    base = ctx.workdir.resolve() if ctx.confined else ctx.workdir
    files = sorted(p.relative_to(base).as_posix() for p in ctx.glob(root, pattern) if p.is_file())
    return {"path": path, "files": files, "count": len(files)}


@tool(side_effect=SideEffect.IDEMPOTENT)
def copy_file(src: str, dst: str, ctx: ToolContext) -> dict[str, Any]:
    """Copy one file; atomic (temp file + rename), so a crash never leaves half a file."""
    source = ctx.path(src)
    if not source.is_file():
        raise DeterministicToolError(
            f"source file {src} does not exist", hint="check the path or re-plan the copy"
        )
    data = source.read_bytes()
    atomic_write(ctx.path(dst), data)
    return {"src": src, "dst": dst, "bytes": len(data), "sha256": _sha256(data)}


@tool(side_effect=SideEffect.IDEMPOTENT)
def write_file(path: str, content: str, ctx: ToolContext) -> dict[str, Any]:
    """Write text to a file atomically (temp file + rename)."""
    data = content.encode("utf-8")
    atomic_write(ctx.path(path), data)
    return {"path": path, "bytes": len(data), "sha256": _sha256(data)}


@tool
def wait(seconds: float = 1.0, label: str = "") -> dict[str, Any]:
    """Sleep (long-run demos, tests, benches standing in for an API call); records when it
    started and ended. One sleep, as an I/O wait is: nothing wakes its thread meanwhile."""
    started = utcnow()
    time.sleep(max(0.0, seconds))
    return {
        "label": label,
        "seconds": seconds,
        "started_at": started.isoformat(),
        "ended_at": utcnow().isoformat(),
    }


@tool(checks=[NonEmpty()])
def noop(value: Any = True) -> Any:
    """Return ``value`` unchanged (plumbing tests and benchmarks)."""
    return {"value": value}
