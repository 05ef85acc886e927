"""``onward`` processes forked from a pre-imported parent, for tests about kills, not start-up.

``python -m onward ARGS`` spends 1-3 s importing (more on a loaded 2-core host) before it
does anything, and the crash tests start several hundred processes to SIGKILL them and
resume them. :func:`spawn` and :func:`run` ask a *zygote* instead: one process per test
process that has imported onward and its dependencies (no thread, no connection, no
command run yet) and forks a child per command. The child is a real separate process
with its own pid, working directory, environment (``os.environ`` replaced, so settings
parsed per call see it), standard streams and ``sys.argv``, and runs ``onward ARGS`` as
``python -m onward`` does, exit status included: ``-9`` after a SIGKILL, which kills the
child alone. Its exit runs what the interpreter's would (waits for non-daemon threads,
then ``atexit``).

Only the start-up is skipped: tests about the entry point itself (``tests/cli/test_cli.py``,
the ``run_cli`` fixture, the docs' commands) start ``python -m onward``, and
``ONWARD_TEST_FORK=off`` makes :func:`spawn` do so too (to check a forked case against a
real start).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Union

ROOT = Path(__file__).resolve().parents[2]

PRELOAD = (
    "onward.cli",
    *(f"onward.cli.{name}" for name in ("running", "people", "inspecting", "lifecycle", "serving")),
    "onward.client",
    "onward.client.worker",
    "onward.graph.build",
    "onward.checkpointing.savers",
    "onward.store.database",
    "onward.store.sqlite",
    "onward.store.postgres",
    "onward.tools.registry",
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.postgres",
    "psycopg",
    "yaml",
    "onward.serve",
    "uvicorn",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.lifespan.on",
    "uvicorn.loops.uvloop",
    "uvloop",
)
"""What ``onward run`` / ``resume`` / ``serve`` import, lazily or not, on either backend."""

_Stream = int | IO[Any] | None
Process = Union["Forked", "subprocess.Popen[Any]"]


def forking() -> bool:
    return os.environ.get("ONWARD_TEST_FORK", "on") != "off" and hasattr(os, "fork")


# -- the test process's side ------------------------------------------------------------


class Forked:
    """A forked ``onward`` child, with the part of :class:`subprocess.Popen` tests use."""

    def __init__(
        self, args: list[str], conn: socket.socket, pid: int, pipes: dict[str, IO[Any]]
    ) -> None:
        self.args, self.pid, self._conn = args, pid, conn
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = pipes.get("stdin")
        self.stdout: IO[Any] | None = pipes.get("stdout")
        self.stderr: IO[Any] | None = pipes.get("stderr")

    def _status(self, timeout: float | None) -> bool:
        """Read the exit status the zygote sends when it reaps the child."""
        if self.returncode is not None:
            return True
        ready, _, _ = select.select([self._conn], [], [], timeout)
        if not ready:
            return False
        data = self._conn.recv(4096)
        self._conn.close()
        if not data:
            raise RuntimeError(f"the zygote died before child {self.pid} exited")
        self.returncode = int(json.loads(data)["status"])
        return True

    def poll(self) -> int | None:
        self._status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may be reused
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr to their end, then wait (as Popen, without stdin)."""
        streams = [s for s in (self.stdout, self.stderr) if s is not None]
        chunks: dict[int, list[bytes]] = {s.fileno(): [] for s in streams}
        deadline = None if timeout is None else _now() + timeout
        open_fds = set(chunks)
        while open_fds:
            left = None if deadline is None else max(0.0, deadline - _now())
            ready, _, _ = select.select(list(open_fds), [], [], left)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.discard(fd)
        self.wait(None if deadline is None else max(0.0, deadline - _now()))
        out: list[Any] = []
        for s in (self.stdout, self.stderr):
            if s is None:
                out.append(None)
                continue
            data = b"".join(chunks[s.fileno()])
            out.append(data.decode() if isinstance(s, io.TextIOBase) else data)
            s.close()
        return out[0], out[1]

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        for s in (self.stdout, self.stderr, self.stdin):
            if s is not None:
                s.close()
        self.wait()


def _now() -> float:
    import time

    return time.monotonic()


IMPORT_ENV = {"NO_COLOR": "1", "COLUMNS": "200"}
"""Variables read when modules are imported (rich's consoles, made at import, take their
width and colour from them), with what cli_env() gives every test's process: a child is
forked from a zygote imported with its own values of these, as a real start would see."""


class Zygote:
    def __init__(self, imported: tuple[tuple[str, str], ...]) -> None:
        self.dir = tempfile.mkdtemp(prefix="onward-zygote-")
        self.path = os.path.join(self.dir, "sock")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ONWARD_", "OPENAI_"))}
        env.update({**dict(imported), "ONWARD_BLOCK_MODEL_REQUESTS": "1"})
        boot = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); import tests.support.zygote as z; "
            f"del sys.path[0]; z.serve({self.path!r})"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", boot],
            stdin=subprocess.PIPE,  # its end is the zygote's signal to stop
            stdout=subprocess.PIPE,
            env=env,
            cwd=self.dir,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the zygote did not start (said {line!r})")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(
        self,
        args: Sequence[str],
        *,
        cwd: str | Path,
        env: Mapping[str, str] | None,
        stdin: _Stream,
        stdout: _Stream,
        stderr: _Stream,
        text: bool,
        mode: str = "module",
    ) -> Forked:
        streams = {"stdin": stdin, "stdout": stdout, "stderr": stderr}
        return _fork_at(self.path, args, cwd=cwd, env=env, text=text, mode=mode, **streams)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _fork_at(
    path: str,
    args: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str] | None,
    stdin: _Stream,
    stdout: _Stream,
    stderr: _Stream,
    text: bool,
    mode: str,
) -> Forked:
    """Ask the zygote listening at ``path`` for a child running ``args`` (see :func:`_as_main`
    for the modes) with these streams."""
    fds: list[int] = []
    mine: list[int] = []  # our copies of the child's ends, closed once sent
    pipes: dict[str, IO[Any]] = {}
    for i, (name, spec) in enumerate((("stdin", stdin), ("stdout", stdout), ("stderr", stderr))):
        if spec is None:
            fds.append(i)  # inherit ours
        elif spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            fds.append(fd)
            mine.append(fd)
        elif spec == subprocess.STDOUT:
            fds.append(fds[1])
        elif spec == subprocess.PIPE:
            r, w = os.pipe()
            child, ours = (r, w) if name == "stdin" else (w, r)
            fds.append(child)
            mine.append(child)
            how = "w" if name == "stdin" else "r"
            pipes[name] = open(ours, how + ("" if text else "b"))  # noqa: SIM115
        elif isinstance(spec, int):
            fds.append(spec)
        else:
            fds.append(spec.fileno())
    request = {
        "mode": mode,
        "args": list(args),
        "cwd": str(cwd),
        "env": dict(os.environ if env is None else env),
    }
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode()], fds)
        reply = conn.recv(4096)
    except BaseException:
        conn.close()
        raise
    finally:
        for fd in mine:
            os.close(fd)
    if not reply:
        conn.close()
        raise RuntimeError("the zygote did not fork")
    return Forked(list(args), conn, int(json.loads(reply)["pid"]), pipes)


_ZYGOTES: dict[tuple[tuple[str, str], ...], Zygote] = {}
_LOCK = threading.Lock()


def _zygote(env: Mapping[str, str] | None = None) -> Zygote:
    """The zygote whose imports saw ``env``'s :data:`IMPORT_ENV` values (usually the one)."""
    env = os.environ if env is None else env
    imported = tuple((k, env.get(k, default)) for k, default in IMPORT_ENV.items())
    with _LOCK:
        zygote = _ZYGOTES.get(imported)
        if zygote is None or not zygote.alive():
            zygote = _ZYGOTES[imported] = Zygote(imported)
            atexit.register(zygote.close)
        return zygote


MODES = {"module": ["-m", "onward"], "script": [], "console": []}
"""What a child runs, and the command line a real start would need for it: ``module`` is
``python -m onward ARGS``; ``script`` is ``python ARGS`` (a script and its arguments);
``console`` is the ``onward`` console script (``ARGS[0]`` its path)."""


def spawn(
    args: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str] | None = None,
    stdin: _Stream = None,
    stdout: _Stream = None,
    stderr: _Stream = None,
    text: bool = False,
    mode: str = "module",
) -> Process:
    """``onward ARGS`` (or, by ``mode``, a script) in a new process, started as Popen would
    start ``python -m onward``."""
    if not forking():
        argv = [*args] if mode == "console" else [sys.executable, *MODES[mode], *args]
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=text
        )
    return _zygote(env).spawn(
        args, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=text, mode=mode
    )


def shim_bin() -> Path:
    """A directory holding an ``onward`` executable that runs the console script forked from
    this process's zygote (for the docs' shell examples, tests/docs/test_docs.py): put it first on
    a child's PATH, with :func:`shim_env`. It starts in milliseconds (stdlib only), passes
    on its arguments, working directory, environment and standard streams, forwards
    SIGTERM/SIGINT, and exits as the command did."""
    global _SHIM
    with _LOCK:
        if _SHIM is None:
            _SHIM = Path(tempfile.mkdtemp(prefix="onward-shim-"))
            script = _SHIM / "onward"
            script.write_text(
                f"#!{sys.executable} -IS\n"
                f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
                "from tests.support.zygote import shim_main; shim_main()\n"
            )
            script.chmod(0o755)
            atexit.register(shutil.rmtree, _SHIM, True)
        return _SHIM


_SHIM: Path | None = None
SHIM_SOCKET = "TESTS_ZYGOTE_SOCKET"


def shim_env() -> dict[str, str]:
    """What a child needs in its environment for :func:`shim_bin`'s ``onward`` to find the
    zygote (the one for cli_env()'s terminal)."""
    return {SHIM_SOCKET: _zygote({"NO_COLOR": "1", "COLUMNS": "200"}).path}


def shim_main() -> None:
    real = shutil.which("onward", path=str(Path(sys.executable).parent)) or "onward"
    child = _fork_at(
        os.environ.pop(SHIM_SOCKET),
        [real, *sys.argv[1:]],
        cwd=os.getcwd(),
        env=os.environ,
        stdin=None,
        stdout=None,
        stderr=None,
        text=False,
        mode="console",
    )
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _: child.send_signal(number))
    code = child.wait()
    if code < 0:  # killed by a signal: so is the shim, as a shell would report it
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be handled
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def run(
    args: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    capture_output: bool = True,
    text: bool = True,
    mode: str = "module",
) -> subprocess.CompletedProcess[Any]:
    """``onward ARGS`` (or by ``mode`` a script) to its end, as ``subprocess.run`` (a timeout
    kills it and raises)."""
    pipe = subprocess.PIPE if capture_output else None
    proc = spawn(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=pipe,
        stderr=pipe,
        text=text,
        mode=mode,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.wait(), out, err)


# -- the zygote's side --------------------------------------------------------------------


def serve(path: str) -> None:
    """Import what onward's commands need, then fork a child per request until stdin ends."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as missing:
            if missing.name != name:  # a module it imports is missing: a real error
                raise
            # A module moved away: children import it themselves (slower, still right).
    if threading.active_count() != 1:  # forking a process with threads copies their locks
        raise RuntimeError(f"threads after the imports: {threading.enumerate()}")
    import gc

    gc.freeze()  # the imported objects stay shared with the children (no copy on write)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only wakes the loop (wakeup fd)
    children: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        ready, _, _ = select.select([listener, wake_r, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
            for pid in children:  # the test process is gone: so are its runs
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(children)
        if listener in ready:
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                _child(json.loads(message), fds)  # never returns
            for fd in set(fds):
                os.close(fd)
            children[pid] = conn
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"pid": pid}).encode())
            _reap(children)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):  # the test no longer listens
                conn.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
            conn.close()


def _child(request: dict[str, Any], fds: list[int]) -> None:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        moved = [os.dup(fd) for fd in fds]  # fds may be 0..2 themselves: move, then place
        for target, fd in enumerate(moved):
            os.dup2(fd, target)
        for name in os.listdir("/proc/self/fd"):  # as Popen's close_fds
            if int(name) > 2:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
    except BaseException:
        os._exit(70)
    code = _as_main(request["args"], request.get("mode", "module"))
    os._exit(code)


def _as_main(args: list[str], mode: str = "module") -> int:
    """What ``python -m onward ARGS`` does after its imports, exit included (or, by ``mode``,
    ``python ARGS`` or the console script ``ARGS[0]``: :data:`MODES`)."""
    import runpy
    import traceback

    sys.stdin = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"
    )
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
        encoding="utf-8",
        line_buffering=os.isatty(1),
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    code = 0
    try:
        if mode == "script":
            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))  # as `python SCRIPT`
            runpy.run_path(args[0], run_name="__main__")
        elif mode == "console":
            from importlib.metadata import entry_points

            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))  # a script's directory
            sys.exit(entry_points(group="console_scripts")["onward"].load()())
        else:
            sys.path[0] = os.getcwd()  # -m puts the working directory first
            sys.argv = ["-m", *args]  # runpy sets argv[0] to the module's file
            runpy.run_module("onward", run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if exit_.code is None:
            code = 0
        elif isinstance(exit_.code, int):
            code = exit_.code
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's exit: threads,
        atexit._run_exitfuncs()  # then atexit
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    return code
