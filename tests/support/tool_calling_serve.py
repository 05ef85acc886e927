"""Helpers shared by several test modules, moved out of
tests/server/test_tool_calling_serve.py: PLAN, TOOLS, and a server whose model looks the
revenue up, asks to publish it, then answers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.openai_fake import FakeOpenAI, Reply
from tests.support.paths import SUPPORT
from tests.support.serve import serve

TOOLS = str(SUPPORT / "tool_calling_tools.py")
PLAN = {
    "steps": [
        {
            "id": "agent",
            "tool": "tool_calling",
            "output": "answer",
            "args": {
                "instruction": "Look the revenue up and publish it.",
                "tools": ["lookup", "publish"],
            },
        }
    ]
}


@contextmanager
def publishing_server(db_url: str, workdir: Path) -> Iterator[tuple[str, FakeOpenAI]]:
    """``onward serve`` with the tool-calling tools, its model a loopback OpenAI server
    scripted to call lookup, then publish (which asks), then answer: (url, the fake)."""
    with FakeOpenAI() as api:
        api.script = [
            Reply(tool_name="lookup", tool_args={"key": "revenue"}),
            Reply(tool_name="publish", tool_args={"title": "Revenue up"}),
            Reply(text="Published the revenue."),
        ]
        env = {"OPENAI_API_KEY": "x", "OPENAI_BASE_URL": api.base_url}
        with serve(db_url, workdir, "--tools", TOOLS, **env) as url:
            yield url, api
