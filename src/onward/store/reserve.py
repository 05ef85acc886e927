"""Room to let go on a full disk: a SQLite store keeps a small reserve file beside its
database, so a drive that a full disk ended can still release its lease.

On a full disk every write fails, a lease's release (a DELETE) included, and a run whose
lease stays behind refuses ``onward resume`` until the lease expires. So a store that
opens with room to spare writes ``.NAME.reserve`` (real blocks, not a sparse file) next to
the database; when releasing a lease fails with a full disk, the reserve is deleted and
the release tried again in the room it leaves. The next store that opens with room makes
a new reserve. A per-file size limit (RLIMIT_FSIZE) is not helped by it: there, a process
that exits lets its lease go at once (store/drivers.py).
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

RESERVE_BYTES = 1 << 20
"""Enough for a lease's release and its event, several times over (a WAL frame is a page)."""


def reserve_path(db: Path) -> Path:
    return db.with_name(f".{db.name}.reserve")


def keep(db: Path, size: int = RESERVE_BYTES) -> None:
    """Make the reserve if it is missing and there is room; never an error (a store works
    without one)."""
    path = reserve_path(db)
    with suppress(OSError):
        if path.is_file() and path.stat().st_size >= size:
            return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        try:
            os.posix_fallocate(fd, 0, size)  # real blocks: a sparse file frees nothing
        except (AttributeError, OSError):
            os.ftruncate(fd, 0)
            os.write(fd, b"\0" * size)
    except OSError:
        os.close(fd)
        with suppress(OSError):
            path.unlink()  # half a reserve is no reserve, and it takes the last room
        return
    os.close(fd)


def spend(db: Path) -> bool:
    """Delete the reserve to make room; False when there was none."""
    try:
        reserve_path(db).unlink()
    except OSError:
        return False
    return True
