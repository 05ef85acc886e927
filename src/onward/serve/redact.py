"""The server's own paths, kept from token holders.

A run's state holds the absolute path of the server's work directory and of its tool
modules (the CLI and Python show them: they are the operator's). A token holder is a chat
user of a remote server: every response and stream to them, and every webhook a run of
theirs posts, shows the work directory as ``(server workdir)`` (a path in it as
``(server workdir)/out.txt``) and a tool module as ``(server tools)/name.py``. The
:class:`Redact` middleware does it at the edge, on the bytes sent, so no route, stream
mode or error message can carry one out; the store keeps the real values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

WORKDIR = "(server workdir)"
TOOLS = "(server tools)"


class Redactor:
    """Replaces each of the server's paths (as given, and resolved) in JSON text."""

    def __init__(self, workdir: Path, tool_modules: Sequence[str]) -> None:
        pairs: dict[str, str] = {}
        for module in tool_modules:
            if module.endswith(".py") or "/" in module:
                for form in _forms(Path(module)):
                    pairs[form] = f"{TOOLS}/{Path(module).name}"
        for form in _forms(workdir):
            pairs[form] = WORKDIR
        # Longest first: a tool module inside the work directory keeps its own name.
        self._pairs = [
            (_escaped(old), _escaped(new))
            for old, new in sorted(pairs.items(), key=lambda p: -len(p[0]))
            if len(old) > 1  # never "/" alone
        ]

    def __call__(self, data: bytes) -> bytes:
        for old, new in self._pairs:
            if old in data:
                data = data.replace(old, new)
        return data


def _forms(path: Path) -> Iterable[str]:
    absolute = path if path.is_absolute() else Path.cwd() / path
    yield str(absolute)
    yield str(absolute.resolve())


def _escaped(text: str) -> bytes:
    """``text`` as it appears inside a JSON string."""
    return json.dumps(text, ensure_ascii=False)[1:-1].encode()


class Redact:
    """ASGI middleware: every HTTP response body goes through ``redactor`` (a whole body
    gets its Content-Length again; a stream, each chunk as it is sent)."""

    def __init__(self, app: ASGIApp, redactor: Redactor) -> None:
        self.app, self.redactor = app, redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: Message | None = None

        async def redacting(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            body = self.redactor(message.get("body", b""))
            if start is not None:  # the first chunk: the headers go first
                headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
                if not message.get("more_body", False):
                    headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "headers": headers})
                start = None
            await send({**message, "body": body})

        await self.app(scope, receive, redacting)
