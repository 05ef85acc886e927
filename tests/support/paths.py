"""Where the test suite's files are: one place, so a test that moves keeps working."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout's root (pyproject.toml, README.md, docs/, examples/)."""
TESTS = ROOT / "tests"
SUPPORT = ROOT / "tests" / "support"
GOLDEN = ROOT / "tests" / "store" / "golden"
JS = ROOT / "tests" / "server" / "js"
WEB = ROOT / "tests" / "server" / "web"
