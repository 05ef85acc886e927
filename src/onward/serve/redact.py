"""The server's own paths, kept from token holders.

A run's state holds the absolute path of the server's work directory and of its tool
modules (the CLI and Python show them: they are the operator's). A token holder is a chat
user of a remote server: every response and stream to them, and every webhook a run of
theirs posts, shows the work directory as ``(server workdir)`` (a path in it as
``(server workdir)/out.txt``), a tool module as ``(server tools)/name.py`` and an MCP
server's ref, command line or URL (which may hold a key) as ``(server tools)/mcp:NAME``. The
:class:`Redact` middleware does it at the edge, on the bytes sent, so no route, stream
mode or error message can carry one out; the store keeps the real values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from onward.serve.limits import HttpMiddleware

WORKDIR = "(server workdir)"
TOOLS = "(server tools)"


class Redactor:
    """Replaces each of the server's paths (as given, and resolved) in JSON text."""

    def __init__(self, workdir: Path, tool_modules: Sequence[str]) -> None:
        pairs: dict[str, str] = {}
        for module in tool_modules:
            if module.startswith("mcp:"):  # an MCP server: its command line or URL too
                name, _sep, target = module.removeprefix("mcp:").partition("=")
                pairs[module] = pairs[target] = f"{TOOLS}/mcp:{name}"
            elif module.endswith(".py") or "/" in module:
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


class Redact(HttpMiddleware):
    """ASGI middleware: every HTTP response body goes through ``redactor``. A body of a
    known length is read whole and sent with its new length; a stream (no length: SSE)
    starts at once and each chunk is redacted as it is sent."""

    def __init__(self, app: ASGIApp, redactor: Redactor) -> None:
        self.app, self.redactor = app, redactor

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: Message | None = None
        body = bytearray()

        async def redacting(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                if any(k == b"content-length" for k, _v in message.get("headers", [])):
                    held = message  # sent with the redacted body's length
                else:
                    await send(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            if held is None:
                await send({**message, "body": self.redactor(message.get("body", b""))})
                return
            body.extend(message.get("body", b""))
            if message.get("more_body", False):
                return
            whole = self.redactor(bytes(body))
            headers = [(k, v) for k, v in held.get("headers", []) if k != b"content-length"]
            headers.append((b"content-length", str(len(whole)).encode()))
            await send({**held, "headers": headers})
            await send({"type": "http.response.body", "body": whole, "more_body": False})

        await self.app(scope, receive, redacting)
