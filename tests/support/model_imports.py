"""Helpers shared by several test modules, moved out of tests/unit/test_model_imports.py:
imported."""

from __future__ import annotations

import ast
from pathlib import Path


def imported(path: Path, package: str = "onward.model") -> set[str]:
    """Every module an ``import`` or ``from ... import`` in ``path`` names, and each name
    imported from one (relative ones resolved against ``package``, the file's own)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found
