"""Getting out of a full disk: a SQLite store keeps a small reserve file beside its
database, folds its WAL back often enough that the WAL cannot eat the volume, and knows
what a full disk looks like wherever it shows (the database, an artifact, a tool's file).

On a full disk every write fails, a lease's release (a DELETE) included, and a run whose
lease stays behind refuses ``onward resume`` until the lease expires. So a store that
opens with room to spare writes ``.NAME.reserve`` (real blocks, not a sparse file) next to
the database; when releasing a lease fails with a full disk, the reserve is deleted and
the release tried again in the room it leaves. The next store that opens with room makes
a new reserve. A per-file size limit (RLIMIT_FSIZE) is not helped by it: there, a process
that exits lets its lease go at once (store/drivers.py).

The WAL: committed pages wait in ``-wal`` until a checkpoint copies them into the database
file, which then needs room for the new pages too. A WAL that fills the volume can never
be folded back (the copy has no room), so the store was stuck until a person freed as much
as the WAL held. :func:`checkpoint_pages` keeps the WAL to a quarter of the volume's free
space when the connection opens (at most SQLite's default 1,000 pages), so a full disk
stops a run while a checkpoint can still complete. ``onward prune`` on a full disk spends
the reserve first (:func:`spend`), folds the WAL back (:func:`fold_back`), VACUUMs only if
there is room for it (:func:`room_for`) and makes the reserve again at the end.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from contextlib import suppress
from pathlib import Path

RESERVE_BYTES = 1 << 20
"""Enough for a lease's release and its event, several times over (a WAL frame is a page)."""


def reserve_path(db: Path) -> Path:
    return db.with_name(f".{db.name}.reserve")


def keep(db: Path, size: int = RESERVE_BYTES) -> None:
    """Make the reserve if it is missing and there is room to spare (as much again as the
    reserve after it: a store opened to make room, ``onward prune``, must not take back the
    room a spent reserve left); never an error (a store works without one)."""
    path = reserve_path(db)
    with suppress(OSError):
        if path.is_file() and path.stat().st_size >= size:
            return
    if free_bytes(db.parent) < 2 * size:
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


FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""``No space left on device`` and ``Disk quota exceeded``: the disk-full path, wherever."""

MIN_CHECKPOINT_PAGES = 64
"""The WAL's fold-back threshold on an almost full volume (256 KiB of 4 KiB pages)."""


def full_disk(exc: BaseException) -> OSError | None:
    """The ``ENOSPC``/``EDQUOT`` error behind ``exc`` (itself, or what it was raised from
    or during), if any: a tool that wraps the OSError in its own error is still full."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, OSError) and found.errno in FULL_ERRNOS:
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def free_bytes(where: Path) -> int:
    """Bytes an unprivileged writer may still use on the volume holding ``where``."""
    try:
        st = os.statvfs(where)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def checkpoint_pages(conn: sqlite3.Connection, most: int) -> int:
    """``wal_autocheckpoint`` for this connection: ``most`` pages, or a quarter of the free
    space of the database's volume if that is less (never under MIN_CHECKPOINT_PAGES). A
    WAL that may hold a quarter of the room leaves the checkpoint room to copy it."""
    row = conn.execute("PRAGMA database_list").fetchone()
    if row is None or not row[2]:
        return most  # in memory
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    quarter = free_bytes(Path(row[2]).parent) // page // 4
    return max(MIN_CHECKPOINT_PAGES, min(most, quarter))


def fold_back(conn: sqlite3.Connection) -> bool:
    """Copy the WAL into the database and cut the WAL file to nothing, if it can (a full
    disk may leave the database no room to grow); True when the WAL is empty now."""
    try:
        if conn.in_transaction:
            conn.commit()
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.Error:
        return False
    return not busy


def room_for(db: Path, size: int) -> bool:
    """Room to rebuild a database of ``size`` bytes (VACUUM writes a whole new copy into
    the WAL) and to make a reserve after it."""
    return free_bytes(db.parent) >= size + RESERVE_BYTES
