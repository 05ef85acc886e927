"""A tiny MCP server for onward's tests (the ``mcp`` SDK's MCPServer, formerly FastMCP).

``python tests/support/mcp_server.py --log CALLS.jsonl [--http PORT]``: over stdio by default, or
streamable HTTP on 127.0.0.1:PORT (path ``/mcp``). Every call appends a JSON line to the
log (the tool and its args), so a test counts what the server really ran, and so does
every start of the server (``{"started": PID}``). Its tools, one
per annotation onward maps:

* ``lookup`` (read-only): a fixed price for a key;
* ``write_note`` (idempotent, not destructive): writes a file, the same content again is
  the same file;
* ``delete_note`` (destructive): removes a file;
* ``stamp`` (no annotations): returns a counter, different each call;
* ``fail`` (read-only): answers with an error (``isError``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("onward-test")
LOG: Path | None = None
PRICES = {"apple": 3, "pear": 5}


def _log(tool: str, **args: object) -> int:
    assert LOG is not None
    with LOG.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "args": args}) + "\n")
    return sum(1 for _ in LOG.open(encoding="utf-8"))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(key: str) -> dict[str, object]:
    """Look a price up."""
    _log("lookup", key=key)
    return {"key": key, "price": PRICES.get(key)}


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def write_note(path: str, text: str) -> str:
    """Write a note to a file (the same text twice is the same file)."""
    _log("write_note", path=path, text=text)
    Path(path).write_text(text, encoding="utf-8")
    return f"wrote {len(text)} characters"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_note(path: str) -> str:
    """Delete a note."""
    _log("delete_note", path=path)
    Path(path).unlink()
    return "deleted"


@server.tool()
def stamp() -> int:
    """A counter: a different number every call."""
    return _log("stamp")


@server.tool()
def slow_stamp(seconds: float) -> int:
    """A counter that answers after ``seconds`` (logged as called first)."""
    number = _log("slow_stamp", seconds=seconds)
    time.sleep(seconds)
    return number


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(reason: str) -> str:
    """Always fails."""
    _log("fail", reason=reason)
    raise ToolError(f"cannot: {reason}")


def main() -> None:
    global LOG
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--http", type=int)
    opts = parser.parse_args()
    LOG = Path(opts.log)
    with LOG.open("a", encoding="utf-8") as f:  # one line per process: a test counts starts
        f.write(json.dumps({"started": os.getpid()}) + "\n")
    if opts.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=opts.http)


if __name__ == "__main__":
    main()
