"""The LangGraph JavaScript SDK (``@langchain/langgraph-sdk`` from npm, tests/server/js) against
a real ``onward serve`` on loopback: tests/server/js/conformance.mjs asserts status, shape and
behaviour of each SDK call (assistants, cancel stopping effects, enqueue order, join after
a dropped stream...). ``.ci/run`` installs it with ``npm ci``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.support.paths import JS
from tests.support.serve import serve
from tests.support.serve_api import CONFIG


def test_the_js_sdk_drives_onward_serve(db_url: str, workdir: Path) -> None:
    assert shutil.which("node"), "Node >= 20 is needed (.ci/run installs it)"
    assert (JS / "node_modules" / "@langchain" / "langgraph-sdk").is_dir(), (
        "run `npm ci` in tests/server/js (.ci/run does)"
    )
    config = workdir.parent / "serve.yaml"
    config.write_text(CONFIG)
    with serve(db_url, workdir, "--config", str(config)) as url:
        done = subprocess.run(
            ["node", "conformance.mjs"],
            cwd=JS,
            env={**os.environ, "ONWARD_URL": url, "ONWARD_WORKDIR": str(workdir)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    passed = json.loads(done.stdout.strip().splitlines()[-1])["passed"]
    assert len(passed) == 7, passed
