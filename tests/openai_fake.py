"""A loopback OpenAI-compatible server: ``POST /v1/chat/completions`` answers from a script.

    with FakeOpenAI() as api:
        api.script = [Reply(json={"steps": [...]}, prompt_tokens=120, completion_tokens=30),
                      Reply(status=429), Reply(delay=2.0), Reply(text="not json")]
        ... OPENAI_BASE_URL=api.base_url ...
        api.requests  # every request body, parsed

Each request takes the next reply; when the script is used up, ``default`` answers.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    json: Any = None
    """Sent as the message content, JSON-encoded."""
    text: str | None = None
    """Sent as the message content as is (e.g. malformed JSON)."""
    status: int = 200
    delay: float = 0.0
    """Seconds to wait before answering (longer than the client's timeout = a timeout)."""
    prompt_tokens: int = 100
    completion_tokens: int = 20


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
                    self._send(
                        reply.status,
                        {"error": {"message": f"injected {reply.status}", "type": "server_error"}},
                    )
                    return
                content = reply.text if reply.text is not None else json.dumps(reply.json)
                self._send(
                    200,
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "fake"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": reply.prompt_tokens,
                            "completion_tokens": reply.completion_tokens,
                            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                        },
                    },
                )

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout)

        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
