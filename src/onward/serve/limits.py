"""Bounds on what one client can make the server do: request size, and runs in flight.

Runs are driven on a pool of their own (never the event loop's default executor, which
also serves every other request), and each user may have only so many runs in flight,
so one user's long runs cannot keep another user's short run waiting.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from onward.errors import RequestLimitError, UsageError
from onward.settings import settings

DEFAULT_MAX_BODY = 4 * 1024 * 1024
DEFAULT_RUN_SLOTS = 8
DEFAULT_USER_RUNS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeLimits:
    """The server's bounds ($ONWARD_MAX_BODY, $ONWARD_RUN_SLOTS, $ONWARD_USER_RUNS)."""

    max_body: int = DEFAULT_MAX_BODY
    """Largest request body, in bytes (413 past it)."""
    run_slots: int = DEFAULT_RUN_SLOTS
    """Runs driven at once by this server (more wait for a slot)."""
    user_runs: int = DEFAULT_USER_RUNS
    """Runs in flight per user (429 with Retry-After past it)."""
    retry_after: int = 5
    """Seconds a client told 429 is asked to wait."""

    def __post_init__(self) -> None:
        if self.max_body < 1024:
            raise UsageError(f"the request-body limit must be at least 1024 bytes ({self})")
        if self.run_slots < 1 or self.user_runs < 1:
            raise UsageError("run slots and runs per user must be at least 1")
        if self.user_runs > self.run_slots:
            raise UsageError(
                f"runs per user ({self.user_runs}) cannot exceed the run slots "
                f"({self.run_slots}): one user could then fill the pool"
            )

    @classmethod
    def from_env(cls) -> ServeLimits:
        """$ONWARD_MAX_BODY, $ONWARD_RUN_SLOTS and $ONWARD_USER_RUNS (read by settings)."""
        s = settings()
        slots = s.run_slots or DEFAULT_RUN_SLOTS
        return cls(
            max_body=s.max_body or DEFAULT_MAX_BODY,
            run_slots=slots,
            user_runs=s.user_runs or min(DEFAULT_USER_RUNS, slots),
        )


class HttpMiddleware:
    """ASGI middleware that handles HTTP requests (:meth:`http`) and passes every other
    scope (lifespan, websocket) on to ``app`` as it is."""

    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class BodyLimit(HttpMiddleware):
    """ASGI middleware: a body over ``limit`` bytes is a 413 before the app reads it
    (by Content-Length when sent, else while the body streams in)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(send)
                    return
        # Read the body here, up to the limit, then replay it: a chunked body has no
        # length to check, and the app must never see more than the limit.
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        replayed: Message = {"type": "http.request", "body": bytes(body), "more_body": False}
        await self.app(scope, _replay([replayed], then=receive), send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {
                "detail": f"request body is over the server's limit of {self.limit} bytes; "
                "send less (large inputs belong in files in the work directory)",
                "error": "RequestLimitError",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """A receive that hands out ``messages`` first, then waits on ``then`` (disconnects)."""
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is None:
            return {"type": "http.disconnect"}
        return await then()

    return receive


class RunPool:
    """The threads that drive runs, with a cap per user on runs in flight. Daemon threads:
    a stopping server does not wait for long runs (they are asked to drain first, and
    whatever is cut off resumes from its last checkpoint, as after a crash)."""

    def __init__(self, limits: ServeLimits) -> None:
        self.limits = limits
        self._jobs: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._flying: Counter[str] = Counter()
        self._threads = [
            threading.Thread(target=self._work, name=f"onward-run-{i}", daemon=True)
            for i in range(limits.run_slots)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            with contextlib.suppress(Exception):  # a drive reports its own errors
                job()

    def reserve(self, user: str, *, force: bool = False) -> None:
        """Count a run for ``user`` (before anything is stored for it), or refuse: 429.
        ``force``: count it anyway (a run the server itself takes over after a crash)."""
        with self._lock:
            if not force and self._flying[user] >= self.limits.user_runs:
                raise RequestLimitError(
                    f"{user} already has {self._flying[user]} runs in flight, the most this "
                    "server allows per user; wait for one to finish or stop at a question",
                    http_status=429,
                    retry_after=self.limits.retry_after,
                )
            self._flying[user] += 1

    def check_room(self, user: str, runs: int) -> None:
        """Refuse (429) ``runs`` more runs for ``user`` unless all of them fit under the
        cap now: a batch is checked whole before any of it starts."""
        with self._lock:
            flying = self._flying[user]
        if flying + runs > self.limits.user_runs:
            raise RequestLimitError(
                f"{user} has {flying} runs in flight and this server allows {self.limits.user_runs}"
                f" per user: a batch of {runs} does not fit, so none of it was started",
                http_status=429,
                retry_after=self.limits.retry_after,
            )

    def release(self, user: str) -> None:
        with self._lock:
            self._flying[user] -= 1
            if self._flying[user] <= 0:
                del self._flying[user]

    def in_flight(self) -> int:
        """Runs counted and not yet over (a run is over once its drive and the start of
        the next queued run on its thread have returned)."""
        with self._lock:
            return sum(self._flying.values())

    def submit(self, user: str, fn: Callable[[], Any]) -> None:
        """Drive ``fn`` on the pool (when a slot is free); the user's reservation ends
        when it does."""

        def run() -> None:
            try:
                fn()
            finally:
                self.release(user)

        self._jobs.put(run)

    def close(self, timeout: float = 5.0) -> None:
        """Let the threads end after their current job, waiting at most ``timeout``."""
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
