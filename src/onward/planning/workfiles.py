"""What a model planner sees of the work directory: its files in name order, leaving out
hidden files and folders (any part of the path starting with ``.``) and onward's own
store (the SQLite database, its ``-wal``, ``-shm``, ``.lock`` and reserve files, the
artifact and request bodies beside it), wherever the store lives inside the work
directory. The planner's file listing and a draft's ``for_each`` globs both come from
here, so a model is never shown the database nor handed it as a step's input. A confined
run also leaves out what resolves outside the work directory (symlinks).
"""

from __future__ import annotations

import os
from pathlib import Path

from onward.policies import confine

STORE_PARTS = frozenset({"artifacts", "requests"})
"""Folders a SQLite store keeps beside its database (artifact and request bodies)."""
STORE_SUFFIXES = (".db", ".sqlite", ".sqlite3", "-wal", "-shm", "-journal", ".lock", ".reserve")
"""Endings of the files a SQLite store keeps beside its database."""
SQLITE_HEADER = b"SQLite format 3\x00"


def store_dir(artifacts: object) -> Path | None:
    """The folder of a SQLite store, from its artifact store (whose bodies live in
    ``<store folder>/artifacts``); None for a store that keeps no files (Postgres)."""
    root = getattr(artifacts, "root", None)
    return Path(root).absolute().parent if isinstance(root, Path) else None


class WorkFiles:
    """The files of ``workdir`` a planner may see (see the module docstring)."""

    def __init__(self, workdir: Path, *, store: Path | None, confined: bool) -> None:
        self.workdir = workdir.absolute()
        self.store = store
        self.confined = confined

    def own(self, path: Path) -> bool:
        """Whether ``path`` (absolute, in the work directory) is part of onward's store:
        in its artifact or request folders, or beside them as its database (by name, or
        by SQLite's header) or one of the database's files."""
        store = self.store
        if store is None:
            return False
        if path.parent == store:
            return path.name in STORE_PARTS or path.name.endswith(STORE_SUFFIXES) or _sqlite(path)
        return any(store / part in path.parents for part in STORE_PARTS)

    def shown(self, path: Path, *, hidden_ok: bool = False) -> bool:
        rel = path.relative_to(self.workdir)
        if not hidden_ok and any(part.startswith(".") for part in rel.parts):
            return False
        if self.own(path):
            return False
        return not self.confined or confine.inside(self.workdir, path)

    def listing(self, limit: int) -> tuple[list[str], bool]:
        """The first ``limit`` files (relative, POSIX, in name order), and whether there
        are more. Hidden folders and the store are not walked at all."""
        found: list[str] = []
        for root, dirs, files in os.walk(self.workdir):
            here = Path(root)
            dirs[:] = sorted(d for d in dirs if self._walked(here / d))
            for name in sorted(files):
                path = here / name
                if path.is_file() and self.shown(path):
                    if len(found) == limit:
                        return found, True
                    found.append(path.relative_to(self.workdir).as_posix())
        return found, False

    def _walked(self, folder: Path) -> bool:
        return not folder.name.startswith(".") and not self.own(folder)

    def matching(self, pattern: str) -> list[Path]:
        """Files a ``for_each`` glob matches, in name order; hidden ones only where the
        pattern itself names a hidden part (``.github/*.yml``), never the store's."""
        hidden_ok = any(part.startswith(".") for part in Path(pattern).parts)
        return sorted(
            p
            for p in self.workdir.glob(pattern)
            if p.is_file() and self.shown(p, hidden_ok=hidden_ok)
        )


def _sqlite(path: Path) -> bool:
    """Whether ``path`` is a SQLite database (a store's, whatever its name)."""
    try:
        with path.open("rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False
