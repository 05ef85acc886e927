"""Attacks on a real ``onward serve`` over loopback: each test is a request an attacker with
a valid token could send, and asserts both the refusal and that nothing changed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.security import TOKENS, auth
from tests.support.serve import serve


@pytest.fixture
def outside(workdir: Path) -> Path:
    """A directory beside the server's work directory holding a secret."""
    out = workdir.parent / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("TOP-SECRET-42")
    (out / "secret.json").write_text('{"password": "TOP-SECRET-42"}')
    (out / "orders.csv").write_text("TOP-SECRET-42,amount\nx,1\n")
    return out


@pytest.fixture
def api(db_url: str, workdir: Path) -> Iterator[httpx.Client]:
    """A real ``onward serve`` with tokens (the test-suite's HITL tools loaded), and an
    HTTP client that holds the attacker's token."""
    with (
        serve(db_url, workdir, ONWARD_API_TOKENS=TOKENS) as url,
        httpx.Client(base_url=url, headers=auth(), timeout=60) as client,
    ):
        yield client
