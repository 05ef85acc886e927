"""Who drives a run: a driver id that names its process, and whether that process is gone.

A lease names its driver as ``host:pid:start:nonce`` (``start``: the process's start time
in clock ticks since boot, from ``/proc``; empty where there is no ``/proc``). On the same
host a dead driver can be told at once: its pid is gone, or it now belongs to a process
that started at another time (the pid was reused). A driver on another host, or one whose
id predates the start time (``host:pid:nonce``), can only be waited out (its lease TTL).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path


def _stat(pid: int) -> list[str]:
    """``/proc/PID/stat`` from field 3 (the state) on, or [] if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return []
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    return stat[stat.rfind(")") + 2 :].split()


def _start_ticks(pid: int) -> str:
    """The process's start time (field 22 of ``/proc/PID/stat``), or "" if unknown."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else ""


_PROCESS: tuple[int, str] | None = None
"""(pid, ``host:pid:start``) of this process, read once (a worker makes a driver id per
drive; a forked child reads its own)."""


def new_driver_id() -> str:
    global _PROCESS
    pid = os.getpid()
    if _PROCESS is None or _PROCESS[0] != pid:
        _PROCESS = (pid, f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}")
    return f"{_PROCESS[1]}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class DriverId:
    host: str
    pid: int
    start: str
    """"" when unknown (no ``/proc``, or an id written before onward recorded it)."""

    @classmethod
    def parse(cls, text: str) -> DriverId | None:
        parts = text.split(":")
        if len(parts) == 4 and parts[1].isdigit():
            return cls(parts[0], int(parts[1]), parts[2])
        if len(parts) == 3 and parts[1].isdigit():  # before the start time was recorded
            return cls(parts[0], int(parts[1]), "")
        return None


_ENDED: set[str] = set()
"""Drivers of this process whose drive ended without releasing its lease (a full disk)."""


def drive_ended(driver: str) -> None:
    """``driver``, of this process, has stopped driving although its lease row is still
    there (its release failed): a later drive in this process takes the run over at once."""
    _ENDED.add(driver)


def gone_here(driver: str) -> str | None:
    """Why ``driver`` is certainly dead, when it ran on this host; None when it may be
    alive (or runs elsewhere: only its lease expiry tells)."""
    found = DriverId.parse(driver)
    if found is None or found.host != socket.gethostname() or found.pid <= 0:
        return None
    if found.pid == os.getpid():
        # This process: another drive in it is alive, unless it ended without a release.
        return "its drive in this process ended" if driver in _ENDED else None
    try:
        os.kill(found.pid, 0)
    except ProcessLookupError:
        return f"its process {found.pid} on this host has exited"
    except PermissionError:
        pass  # a process of another user holds the pid: compare start times
    fields = _stat(found.pid)
    if fields and fields[0] in ("Z", "X"):  # killed, not yet reaped by its parent
        return f"its process {found.pid} on this host has exited"
    if found.start and len(fields) > 19 and fields[19] != found.start:
        return f"its pid {found.pid} on this host now belongs to another process"
    return None
