"""``onward serve --processes N``: N server processes answering on one port.

A Python process runs its threads one at a time, so one server process tops out at about
one core however many users it has. The server's state is in the store (threads, runs,
their leases, the streamed events, cancel requests, crons' claims), so several processes
on one store serve one API: any of them answers for any thread, a stream rejoined on
another process replays from the store, a cancel reaches a run another process drives.

The parent binds the socket (:func:`~onward.serve.listen.bind`), then forks each process
before any of them opens the store (a fork copies no threads and no connections); each
opens the store, makes the app, and serves the inherited socket, and the kernel gives
each new connection to one of them. The first starts alone: an error starting it (the
store, a configuration file) is reported once, as with one process, and is the server's
exit code. A process that dies is started again, and the runs it drove are finished by
the others' recovery once their leases expire; a process that keeps dying (more than
:data:`MOST_RESTARTS` in :data:`RESTART_WINDOW` seconds) stops the server (exit 1).
SIGTERM, SIGINT or SIGHUP to the parent: each process drains as one server does, and the
parent exits 0 once all have. A process whose parent is gone stops too.

Why not uvicorn's ``--workers``: it spawns each process anew from an import string (each
imports everything again and makes its app from the environment), binds the socket
itself, and reports a process that cannot start in its own way; here a bad start is the
same clear error and exit code as with one process. (And ``onward worker`` is a process
that drives queued runs, not one that answers HTTP.)
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

MOST_RESTARTS = 5
"""Restarts of server processes allowed within :data:`RESTART_WINDOW`."""
RESTART_WINDOW = 60.0
"""Seconds over which restarts are counted."""
PARENT_CHECK = 1.0
"""Seconds between a server process's looks at whether its parent still runs."""

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""What stops the server: each process is asked to drain."""

Serve = Callable[[Callable[[], None]], int]
"""One server process: makes its app, calls ``ready()``, serves until stopped; its exit
code (an error's, if it could not start)."""
Say = Callable[[str], None]


class Processes:
    """The parent's view of its server processes (see the module's docstring)."""

    def __init__(self, count: int, serve: Serve, *, say: Say, ready: Callable[[], None]) -> None:
        """``say``: a line for the server's log; ``ready``: called once the first process
        has made its app (the server is serving)."""
        self.count, self.serve, self.say, self.ready = count, serve, say, ready
        self.alive: dict[int, float] = {}
        """Server processes by pid, with when each started."""
        self.stopping = False
        self._restarts: list[float] = []

    def run(self) -> int:
        """Start the processes and look after them until they have all ended; the server's
        exit code."""
        for sig in SIGNALS:
            signal.signal(sig, self._stop)
        gc.collect()
        gc.freeze()  # what the processes share stays shared: no collection writes to it
        code = self._start()
        if code is not None:
            return 0 if self.stopping else code
        self.ready()
        for _ in range(self.count - 1):
            while not self.stopping and self._start() is not None:
                if not self._restart():
                    return self._give_up()
        return self._watch()

    def _stop(self, *_: Any) -> None:
        """Ask every server process to drain (once), as a signal to one server would."""
        if self.stopping:
            return
        self.stopping = True
        for pid in list(self.alive):
            _signal(pid, signal.SIGTERM)

    def _start(self) -> int | None:
        """Fork a server process and wait until it has made its app: None once it has, its
        exit code if it ended before."""
        readable, writable = os.pipe()
        # No signal handler of the parent's may run in the new process: held until each
        # side has the handlers it needs (a signal that came meanwhile is then handled).
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the server process
                os.close(readable)
                os._exit(_child(self.serve, writable))
            self.alive[pid] = time.monotonic()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
            os.close(writable)
        if self.stopping:  # asked to stop while it was being made
            _signal(pid, signal.SIGTERM)
        try:
            started = _wait_ready(readable)
        finally:
            os.close(readable)
        if started:
            return None
        status = os.waitpid(pid, 0)[1]
        del self.alive[pid]
        code = _exit_code(status)
        return code if code >= 0 else 128 - code

    def _watch(self) -> int:
        while self.alive:
            pid, status = _wait_any()
            started = self.alive.pop(pid, None)
            if started is None or self.stopping:
                continue
            lived = time.monotonic() - started
            how = _how(_exit_code(status))
            self.say(f"server process {pid} ended ({how}) after {lived:.0f} s; starting another")
            while not self.stopping:
                if not self._restart():
                    return self._give_up()
                if (code := self._start()) is None:
                    break
                self.say(f"a new server process ended before it served (exit code {code})")
        return 0

    def _restart(self) -> bool:
        """Whether one more restart is within :data:`MOST_RESTARTS` (counted if it is)."""
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < RESTART_WINDOW] + [now]
        return len(self._restarts) <= MOST_RESTARTS

    def _give_up(self) -> int:
        self.say(
            f"server processes ended more than {MOST_RESTARTS} times within "
            f"{RESTART_WINDOW:.0f} s, so the server stops: see the errors above"
        )
        self._stop()
        while self.alive:
            self.alive.pop(_wait_any()[0], None)
        return 1


def _child(serve: Serve, ready_fd: int) -> int:
    """A server process: its own process group (a terminal's Ctrl-C reaches the parent,
    which asks each process once), stopped when the parent goes."""
    code = 1
    try:
        os.setpgid(0, 0)
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        parent = os.getppid()
        threading.Thread(target=_orphaned, args=(parent,), daemon=True).start()

        def ready() -> None:
            os.write(ready_fd, b"1")
            os.close(ready_fd)

        code = serve(ready)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException as exc:  # an exit code, whatever ended it
        given = getattr(exc, "exit_code", None)  # typer.Exit, raised by errors()
        if isinstance(given, int):
            code = given
        else:
            traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _orphaned(parent: int) -> None:
    """Stop this server process (as SIGTERM would: it drains) once its parent is gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK)
    os.kill(os.getpid(), signal.SIGTERM)


def _wait_ready(fd: int) -> bool:
    """Whether the process wrote that it is ready (False: it ended before)."""
    while True:
        try:
            select.select([fd], [], [])
            return os.read(fd, 1) == b"1"
        except InterruptedError:  # pragma: no cover - retried by Python itself
            continue


def _wait_any() -> tuple[int, int]:
    """The next server process to end, and its wait status."""
    return os.waitpid(-1, 0)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _how(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def _exit_code(status: int) -> int:
    """A wait status as an exit code (a negative one: the signal that ended it)."""
    return os.waitstatus_to_exitcode(status)
