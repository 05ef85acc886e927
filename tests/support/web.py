"""Helpers shared by several test modules, moved out of tests/server/test_web_usestream.py:
_Quiet, artifacts, static_site."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def static_site(root: Path) -> Iterator[str]:
    """``root`` served on a free loopback port, in a thread: its origin."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def artifacts(db_url: str) -> Path:
    base = os.environ.get("ONWARD_ARTIFACTS") or os.environ.get("ONWARD_TEST_ARTIFACTS")
    shots = Path(base or ROOT / "test-artifacts") / f"usestream-{db_url.split(':')[0]}"
    shots.mkdir(parents=True, exist_ok=True)
    return shots
