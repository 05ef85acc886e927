"""One confinement rule for every path a run touches.

A confined run (its policy's ``confine_paths``; every run started over HTTP is one) may
only use paths inside its work directory: tool args, check paths and globs, the files and
directories the template planner reads, and the goal's inputs. The rule:

* a relative path is taken against the work directory; an absolute one must start with it;
* no ``..`` may climb above the work directory, at any point of the path;
* after resolving symlinks (:meth:`Path.resolve`) the path must still be the work directory
  or below it: a symlink inside that points outside is outside.

A path that breaks the rule is refused before anything is looked at, with a message that
names the path as given and says what to do. It never says whether the path exists, where a
symlink points or what a file holds, so a refusal is no oracle on outside files. A confined
path is used resolved, so what is checked is what is opened.

Runs that are not confined (the CLI, run by the store's owner) keep plain joining:
``locate(..., confined=False)`` and ``glob(..., confined=False)`` behave as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from onward.errors import DeterministicToolError, PlanningError, UsageError

LEAVES = "leaves the run's work directory"
"""The phrase every refusal carries (tests and people grep for it)."""
ADVICE = "use a path inside the work directory"


def outside(path: str | os.PathLike[str], *, what: str = "path") -> DeterministicToolError:
    """The refusal of ``path`` (as given: never resolved, never its content)."""
    return DeterministicToolError(
        f"{what} {os.fspath(path)!r} {LEAVES}; {ADVICE} "
        "(relative, with no .. or symlink that leads out of it)",
        hint=ADVICE,
    )


def _climbs_out(parts: tuple[str, ...]) -> bool:
    depth = 0
    for part in parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _under(path: Path, root: Path) -> Path | None:
    try:
        return path.relative_to(root)
    except ValueError:
        return None


def confine(workdir: Path, path: str | os.PathLike[str], *, what: str = "path") -> Path:
    """``path`` (relative ones against ``workdir``) resolved, symlinks followed; a
    DeterministicToolError (no oracle: see the module) unless it is ``workdir`` or below."""
    root = workdir.resolve()
    given = Path(path)
    rel = (_under(given, workdir) or _under(given, root)) if given.is_absolute() else given
    if rel is None or _climbs_out(rel.parts):
        raise outside(path, what=what)
    try:
        real = (root / rel).resolve()
    except (OSError, RuntimeError):  # a symlink loop: refused like an escape, says nothing
        raise outside(path, what=what) from None
    if not real.is_relative_to(root):
        raise outside(path, what=what)
    return real


def locate(
    workdir: Path, path: str | os.PathLike[str], *, confined: bool, what: str = "path"
) -> Path:
    """Where ``path`` is: confined (see :func:`confine`), or plainly joined to ``workdir``."""
    if confined:
        return confine(workdir, path, what=what)
    given = Path(path)
    return given if given.is_absolute() else workdir / given


def planning_path(
    workdir: Path, path: str | os.PathLike[str], *, confined: bool, what: str
) -> Path:
    """:func:`locate` for what is read before a run exists or while it is planned (inputs,
    the template planner's files): a refusal is a PlanningError (HTTP 422, exit code 2)."""
    try:
        return locate(workdir, path, confined=confined, what=what)
    except DeterministicToolError as exc:
        raise PlanningError(str(exc)) from None


def check_inputs(workdir: Path, names: Iterable[str], *, confined: bool) -> None:
    """Each input file exists (inside ``workdir`` when confined), or a UsageError says
    which one is wrong and what to do."""
    for name in names:
        where = planning_path(workdir, name, confined=confined, what="input")
        try:
            found = where.exists()
        except (OSError, ValueError) as exc:  # a name too long, a NUL...
            raise UsageError(f"input {name[:80]!r} is not a usable file name ({exc})") from None
        if not found:
            raise UsageError(f"input file {name} not found in {workdir}; check --input")


def inside(workdir: Path, path: Path) -> bool:
    """``path`` resolves (symlinks followed) to ``workdir`` or below it."""
    return _resolves_under(path, workdir.resolve())


def _resolves_under(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        return False


def glob(workdir: Path, directory: Path, pattern: str, *, confined: bool) -> list[Path]:
    """``directory.glob(pattern)``, sorted. Confined: an absolute pattern or one with a
    ``..`` segment is refused (the pattern would climb out even from a confined directory),
    and matches that resolve outside ``workdir`` (symlinks) are left out."""
    if not confined:
        return sorted(directory.glob(pattern))
    root = workdir.resolve()
    if not _resolves_under(directory, root):
        raise outside(directory)
    if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
        raise DeterministicToolError(
            f"pattern {pattern!r} {LEAVES}; {ADVICE}: a glob relative to the directory, "
            "with no .. segment",
            hint=ADVICE,
        )
    return sorted(p for p in directory.glob(pattern) if _resolves_under(p, root))
