"""The one place onward reaches into a dependency's private modules.

Everything here leans on a name a dependency does not promise to keep (a module or
attribute whose name starts with ``_``). Each piece is used only on the releases it was
tested with (:func:`tested`, read from the installed distribution's metadata) and has a
fallback built on the dependency's public API for every other release: slower, never
wrong. tests/unit/test_private_imports.py fails when such an import appears anywhere else,
and tests/unit/test_private_imports.py checks each fallback gives what the private path gives.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

Release = tuple[int, ...]


def release(distribution: str) -> Release | None:
    """The installed release of ``distribution`` as numbers (``4.3.2`` → ``(4, 3, 2)``;
    a pre-release or local suffix is dropped), or None when it is not installed."""
    try:
        text = version(distribution)
    except PackageNotFoundError:
        return None
    match = re.match(r"\d+(\.\d+)*", text)
    return tuple(int(p) for p in match.group().split(".")) if match else None


def tested(distribution: str, low: Release, below: Release) -> bool:
    """Whether the installed ``distribution`` is one onward's private-API path was tested
    with: at least ``low`` and below ``below``."""
    found = release(distribution)
    return found is not None and low <= found < below


__all__ = ["Release", "release", "tested"]
