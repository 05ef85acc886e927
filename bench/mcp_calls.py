"""MCP benchmark: what a stdio MCP server costs a run, next to an in-process tool.

What is measured (tests/support/mcp_server.py, the ``mcp`` SDK's MCPServer, over stdio)
    * **connect**: starting the server's process and listing its tools, once per driver
      (``onward.tools.mcp.session``, median of ``--starts``);
    * **call**: one ``tools/call`` of its read-only ``lookup`` through the session onward
      keeps (``MCPCall``), median and p95 of ``--calls``;
    * **plan**: a declared plan of ``--steps`` independent read-only steps run to the end
      on a fresh SQLite store, the MCP ``lookup`` against an in-process ``@onward.tool``
      doing the same lookup: wall time per step of each, and their difference (what an
      MCP step adds to a pure step).

Run from the repo root: ``python bench/mcp_calls.py [--starts 5 --calls 200 --steps 50]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "support" / "mcp_server.py"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--steps", type=int, default=50)
    opts = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="onward-mcp-bench-"))
    os.environ["ONWARD_MCP_COMMANDS"] = f"{sys.executable} {SERVER}"
    os.chdir(tmp)
    from onward.tools import mcp

    ref = mcp.mcp_server("b", [sys.executable, str(SERVER), "--log", str(tmp / "log.jsonl")])
    server = mcp.parse(ref)
    starts = []
    for _ in range(opts.starts):
        began = time.perf_counter()
        mcp.session(server)
        starts.append(time.perf_counter() - began)
        mcp.close_servers()
    mcp.load_server(ref)
    call = mcp.MCPCall(server, "lookup")
    ctx: Any = type("Ctx", (), {"thread_id": "t", "step_id": "s", "idempotency_key": None})()
    calls = []
    for _ in range(opts.calls):
        began = time.perf_counter()
        call(ctx, key="apple")
        calls.append(time.perf_counter() - began)
    per_step = {
        kind: plan_time(kind, ref, opts.steps, tmp) / opts.steps for kind in ("mcp", "local")
    }
    mcp.close_servers()
    connect = statistics.median(starts) * 1000
    print(f"connect (start + list tools), median of {opts.starts}: {connect:.0f} ms")
    print(
        f"call, median of {opts.calls}: {statistics.median(calls) * 1000:.2f} ms, "
        f"p95 {sorted(calls)[int(0.95 * len(calls)) - 1] * 1000:.2f} ms"
    )
    print(
        f"plan of {opts.steps} steps, per step: MCP {per_step['mcp'] * 1000:.1f} ms, "
        f"in-process {per_step['local'] * 1000:.1f} ms, "
        f"difference {(per_step['mcp'] - per_step['local']) * 1000:.1f} ms"
    )


def plan_time(kind: str, ref: str, steps: int, tmp: Path) -> float:
    from onward import Onward, tool

    @tool(name="local_lookup")
    def local_lookup(key: str) -> dict[str, Any]:
        return {"key": key, "price": {"apple": 3}.get(key)}

    name = "mcp__b__lookup" if kind == "mcp" else "local_lookup"
    plan = {
        "goal": "look up",
        "steps": [{"id": f"s{i}", "tool": name, "args": {"key": "apple"}} for i in range(steps)],
    }
    with Onward(f"sqlite:///{tmp / kind / 'onward.db'}", tool_modules=[ref], model=None) as ow:
        began = time.perf_counter()
        view = ow.run(plan=plan, max_concurrency=1)
        took = time.perf_counter() - began
    assert view.status == "done", view.status
    return took


if __name__ == "__main__":
    main()
