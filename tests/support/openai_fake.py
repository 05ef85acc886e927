"""A loopback OpenAI-compatible server: ``POST /v1/chat/completions`` answers from a script.

    with FakeOpenAI() as api:
        api.script = [Reply(json={"steps": [...]}, prompt_tokens=120, completion_tokens=30),
                      Reply(status=429, headers={"Retry-After": "7"}), Reply(delay=2.0),
                      Reply(text="not json"), Reply(tool_args={"steps": [...]}),
                      Reply(refusal="I can't help with that"), Reply(json=..., usage=False),
                      Reply(text='{"steps": [', finish_reason="length")]
        ... OPENAI_BASE_URL=api.base_url ...
        api.requests  # every request body, parsed

Each request takes the next reply; when the script is used up, ``default`` answers. A
request with ``"stream": true`` is answered as server-sent events, as OpenAI streams: a
role chunk, the content (or tool call, or refusal) in pieces, a chunk with the
finish_reason, then, only when the request asks ``stream_options.include_usage``, a chunk
with the usage and no choices; then ``data: [DONE]``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PIECES = 3
"""Content chunks of a streamed answer."""


@dataclass
class Reply:
    json: Any = None
    """Sent as the message content, JSON-encoded."""
    text: str | None = None
    """Sent as the message content as is (e.g. malformed JSON, prose around JSON)."""
    tool_args: Any = None
    """Sent as a tool call (``tool_name``) with these args, JSON-encoded; content empty."""
    tool_name: str = "PlanDraft"
    refusal: str | None = None
    """Sent as ``message.refusal`` (OpenAI's structured output refusing); content null."""
    finish_reason: str = "stop"
    """``length``: the answer was cut off at max_tokens; ``content_filter``."""
    usage: bool = True
    """False: the answer carries no usage at all (some OpenAI-compatible servers)."""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. ``{"Retry-After": "7"}`` with a 429."""
    delay: float = 0.0
    """Seconds to wait before answering (longer than the client's timeout = a timeout)."""
    prompt_tokens: int = 100
    completion_tokens: int = 20

    def content(self) -> str | None:
        if self.refusal is not None or (self.tool_args is not None and self.text is None):
            return None
        return self.text if self.text is not None else json.dumps(self.json)

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content()}
        if self.refusal is not None:
            message["refusal"] = self.refusal
        if self.tool_args is not None:
            message["tool_calls"] = [self._tool_call()]
        return message

    def _tool_call(self) -> dict[str, Any]:
        return {
            "id": "call_fake",
            "type": "function",
            "function": {"name": self.tool_name, "arguments": json.dumps(self.tool_args)},
        }

    def usage_body(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def deltas(self) -> list[dict[str, Any]]:
        """The message as stream deltas: the role, then its parts in pieces."""
        out: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if self.refusal is not None:
            out += [{"refusal": p} for p in _pieces(self.refusal)]
        elif self.tool_args is not None:
            call = self._tool_call()
            args = call["function"].pop("arguments")
            out.append({"tool_calls": [{"index": 0, **call, "function": {**call["function"]}}]})
            out += [
                {"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in _pieces(args)
            ]
        else:
            out += [{"content": p} for p in _pieces(self.content() or "")]
        return out


def _pieces(text: str) -> list[str]:
    size = max(1, -(-len(text) // PIECES))
    return [text[i : i + size] for i in range(0, len(text), size)]


@dataclass
class FakeOpenAI:
    script: list[Reply] = field(default_factory=list)
    default: Reply | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with fake._lock:
                    fake.requests.append(body)
                    reply = fake.script.pop(0) if fake.script else fake.default
                if reply is None:
                    reply = Reply(status=500)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status != 200:
                    self._send(reply.status, _error(reply.status), reply.headers)
                elif body.get("stream"):
                    self._stream(body, reply)
                else:
                    self._send(200, _completion(body, reply), reply.headers)

            def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout)

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for event in _chunks(body, reply, usage):
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def streamed(self) -> list[bool]:
        """For each request so far: whether it asked to stream."""
        return [bool(r.get("stream")) for r in self.requests]

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _error(status: int) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 401:
        return {"error": {"message": "Incorrect API key provided", "type": kind}}
    return {"error": {"message": f"injected {status}", "type": kind}}


def _head(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": kind,
        "created": int(time.time()),
        "model": body.get("model", "fake"),
    }


def _completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    out = _head(body, "chat.completion")
    out["choices"] = [
        {"index": 0, "finish_reason": reply.finish_reason, "message": reply.message()}
    ]
    if reply.usage:
        out["usage"] = reply.usage_body()
    return out


def _chunks(body: dict[str, Any], reply: Reply, usage: bool) -> list[dict[str, Any]]:
    head = _head(body, "chat.completion.chunk")
    events = [
        {**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
        for d in reply.deltas()
    ]
    events.append(
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]}
    )
    if usage and reply.usage:
        events.append({**head, "choices": [], "usage": reply.usage_body()})
    return events
