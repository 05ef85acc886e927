"""Fixtures the test modules of this directory share."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import WEB
from tests.support.serve import serve


@pytest.fixture
def server(db_url: str, workdir: Path) -> Iterator[str]:
    with serve(db_url, workdir) as url:
        yield url


@pytest.fixture(scope="module")
def page_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page built once from tests/server/web's source (never a stale committed build)."""
    assert shutil.which("node"), "Node >= 20 is needed (.ci/run installs it)"
    assert (WEB / "node_modules" / "@langchain" / "langgraph-sdk").is_dir(), (
        "run `npm ci` in tests/server/web (.ci/run does)"
    )
    out = tmp_path_factory.mktemp("usestream-dist")
    done = subprocess.run(
        ["npx", "--no-install", "vite", "build", "--outDir", str(out), "--emptyOutDir"],
        cwd=WEB,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    assert (out / "index.html").is_file()
    return out
