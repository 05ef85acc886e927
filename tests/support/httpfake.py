"""A loopback HTTP service for effect tests: records every POST and answers status probes.

In-process::

    with FakeService(delay=0.5) as svc:
        ...  # post to svc.url, probe svc.status_url, inspect svc.posts / svc.counts

In a separate process (so a test can SIGKILL the client and still ask the server)::

    python -m tests.support.httpfake --port-file F [--delay S] [--fail N --fail-status 503]

writes its port to F and serves until killed; ``GET /stats`` returns the counters.

Endpoints:

- ``POST /effects``: stores the ``Idempotency-Key`` as received, *then* waits ``delay`` and
  answers 200 ``{"ok": true, "key": K}``. Storing first models the hard case: the server
  acted, but the client may die before it reads the answer.
- ``GET /status?key=K``: 200 ``{"received": true, "key": K, "response": {"status": 200,
  "body": B}}`` (B: what the POST answered) or 404 ``{"received": false}``.
- ``GET /stats``: ``{"keys": {K: posts}, "total": posts, "received": [K, ...]}``.
- ``POST /control``: ``{"delay": S, "fail": N, "fail_status": 503}`` reconfigures a running
  server (another process cannot call :meth:`FakeService.fail_next`). Not recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any


def accepted(key: str) -> dict[str, Any]:
    """What a POST that was stored answers (and what /status gives back as its response)."""
    return {"ok": True, "key": key}


@dataclass(frozen=True)
class Post:
    """One POST as the service saw it."""

    path: str
    key: str | None
    body: Any
    """Parsed JSON, or None if the body was not JSON."""
    status: int
    """What the service answered."""


class FakeService:
    """HTTP server on 127.0.0.1 (port 0 = any free port) in a background thread."""

    def __init__(self, *, delay: float = 0.0, port: int = 0) -> None:
        self.delay = delay
        """Seconds each POST /effects waits (after storing the key) before answering."""
        self.posts: list[Post] = []
        self.counts: Counter[str] = Counter()
        """POSTs per Idempotency-Key, failed ones included."""
        self.received: set[str] = set()
        """Keys whose POST succeeded (what /status reports)."""
        self._lock = threading.Lock()
        self._fail_left = 0
        self._fail_status = 503
        self._server = _Server(("127.0.0.1", port), _Handler, self)
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> FakeService:
        if self._thread is None:
            # A short poll interval: shutdown() waits up to one interval (0.5 s by default).
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.02,), name="httpfake", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeService:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/effects"

    @property
    def status_url(self) -> str:
        return f"{self.base_url}/status"

    # -- behaviour

    def fail_next(self, n: int, status: int = 503) -> None:
        """The next ``n`` POSTs to /effects answer ``status`` and are not stored."""
        with self._lock:
            self._fail_left, self._fail_status = n, status

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "keys": dict(self.counts),
                "total": len(self.posts),
                "received": sorted(self.received),
            }

    def _record_post(self, path: str, key: str | None, body: Any) -> int:
        """Record a POST; return the status to answer (and store the key if it succeeds)."""
        with self._lock:
            if path != "/effects":
                status = 404
            elif self._fail_left > 0:
                self._fail_left -= 1
                status = self._fail_status
            elif body is None or key is None:
                status = 400
            else:
                status = 200
                self.received.add(key)
            self.posts.append(Post(path=path, key=key, body=body, status=status))
            if key is not None:
                self.counts[key] += 1
            return status

    def _control(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        with self._lock:
            if "delay" in body:
                self.delay = float(body["delay"])
            if "fail" in body:
                self._fail_left = int(body["fail"])
                self._fail_status = int(body.get("fail_status", 503))


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler sleeping in `delay` must not block shutdown

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        service: FakeService,
    ) -> None:
        super().__init__(address, handler)
        self.service = service

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (the point of `delay`) is expected; other errors are
        # bugs in this fake and still print.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        svc = self.server.service
        path = urllib.parse.urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if len(raw) < length:
            # The client died mid-request (a crash test killed it while sending): like any
            # real server, act on nothing and answer nothing.
            self.close_connection = True
            return
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        if path == "/control":
            svc._control(body)
            self._answer(200, svc.stats())
            return
        key = self.headers.get("Idempotency-Key")
        status = svc._record_post(path, key, body)
        if status == 200 and svc.delay > 0:
            time.sleep(svc.delay)
        if status == 200:
            self._answer(200, accepted(key))
        elif status == 404:
            self._answer(404, {"ok": False, "error": f"no such endpoint {path}"})
        elif status == 400 and (body is None or key is None):
            self._answer(400, {"ok": False, "error": "need a JSON body and an Idempotency-Key"})
        else:
            self._answer(status, {"ok": False, "error": f"injected failure {status}"})

    def do_GET(self) -> None:
        svc = self.server.service
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/status":
            key = urllib.parse.parse_qs(parts.query).get("key", [""])[0]
            with svc._lock:
                known = key in svc.received
            if known:
                response = {"status": 200, "body": accepted(key)}
                self._answer(200, {"received": True, "key": key, "response": response})
            else:
                self._answer(404, {"received": False})
        elif parts.path == "/bare-status":  # says "received" without the response
            self._answer(200, {"received": True})
        elif parts.path == "/stats":
            self._answer(200, svc.stats())
        else:
            self._answer(404, {"error": f"no such endpoint {parts.path}"})


# -- helpers for tests that run the service in another process


def read_port(port_file: str | os.PathLike[str], timeout: float = 10.0) -> int:
    """Wait for ``--port-file`` to appear and return the port written there."""
    path = Path(port_file)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file():
            return int(path.read_text().strip())
        time.sleep(0.02)
    raise TimeoutError(f"httpfake did not write {path} within {timeout:g}s")


def get_stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as r:
        result: dict[str, Any] = json.loads(r.read())
        return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.httpfake", description=__doc__)
    parser.add_argument("--port-file", required=True, help="write the chosen port here")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free one)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--fail", type=int, default=0, help="fail the first N POSTs")
    parser.add_argument("--fail-status", type=int, default=503, help="status for --fail")
    opts = parser.parse_args(argv)
    svc = FakeService(delay=opts.delay, port=opts.port)
    if opts.fail:
        svc.fail_next(opts.fail, opts.fail_status)
    # Temp file + rename: a reader polling the port file never sees it half written.
    port_file = Path(opts.port_file)
    tmp = port_file.with_name(f".{port_file.name}.tmp")
    tmp.write_text(f"{svc.port}\n")
    os.replace(tmp, port_file)
    try:
        svc._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        svc._server.server_close()


if __name__ == "__main__":
    main()
