"""Long-lived processes on a store: ``worker`` drives queued runs, ``serve`` answers the
LangGraph Server API. Both import their machinery only when started."""

from __future__ import annotations

import functools
import gc
import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from onward.cli.options import EXIT_USAGE, DbOpt, JsonOpt, ToolsOpt, duration, errors, store_url
from onward.cli.render import err

if TYPE_CHECKING:
    from onward.client.worker import WorkerReport

commands = typer.Typer()


@commands.command()
def worker(
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Runs this worker drives at once.")
    ] = 1,
    poll: Annotated[
        float, typer.Option("--poll", min=0.01, help="Seconds between looks at an empty queue.")
    ] = 1.0,
    exit_when_idle: Annotated[
        bool,
        typer.Option(
            "--exit-when-idle",
            help="Exit once no queued run can become ready without a person (batch jobs).",
        ),
    ] = False,
    db: DbOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Claim queued and resumable runs from the store and drive them, until SIGTERM or
    Ctrl-C: then finish the current superstep, requeue, release leases and exit 0. A
    database that goes away is waited for (ONWARD_PG_OUTAGE); a worker that stops for any
    other reason exits non-zero (2: the database stayed unreachable), so a supervisor with
    restart-on-failure restarts it."""
    from onward.client.worker import Worker, WorkerPolicy

    policy = WorkerPolicy(
        concurrency=concurrency, poll=timedelta(seconds=poll), exit_when_idle=exit_when_idle
    )
    out = _Lines(as_json)
    _log_store_outages(out)
    with errors(as_json):
        w = Worker(store_url(db), policy=policy, tool_modules=tools or [], on_drive=out.drive)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: w.drain())
        try:
            w.run()
        finally:
            out.summary(w.report)


class _Lines:
    """The worker's output, written by its slots' threads: each line whole, one at a time
    (``--json``: one object per line on stdout; logs and text on stderr)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._lock = threading.Lock()

    def _write(self, text: str, stream: TextIO) -> None:
        with self._lock:
            stream.write(text + "\n")
            stream.flush()

    def drive(self, thread_id: str, outcome: str) -> None:
        if self.as_json:
            self._write(json.dumps({"thread_id": thread_id, "outcome": outcome}), sys.stdout)
        else:
            self._write(f"{thread_id}: {outcome}", sys.stderr)

    def log(self, message: str) -> None:
        self._write(f"onward worker: {message}", sys.stderr)

    def summary(self, report: WorkerReport) -> None:
        counts = {
            "drives": report.drives,
            "finished": len(report.finished),
            "errors": len(report.errors),
            "retried": report.retried,
            "drained": report.drained,
        }
        if self.as_json:
            self._write(json.dumps({"worker": counts}), sys.stdout)
            return
        again = f", {report.retried} driven again after losing the database"
        self._write(
            f"worker stopped: {report.drives} drives, {len(report.finished)} runs finished, "
            f"{len(report.errors)} errors{again if report.retried else ''}"
            + (" (drained)" if report.drained else ""),
            sys.stderr,
        )


class _OutageLines(logging.Handler):
    """The store's one line per database outage (store/connection.py), as the worker's."""

    out: _Lines | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.out is not None:
            self.out.log(record.getMessage())


def _log_store_outages(out: _Lines) -> None:
    logger = logging.getLogger("onward.store")
    handler = next((h for h in logger.handlers if isinstance(h, _OutageLines)), None)
    if handler is None:
        handler = _OutageLines(logging.WARNING)
        logger.addHandler(handler)
    handler.out = out
    logger.propagate = False


@commands.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8420,
    workdir: Annotated[
        Path | None, typer.Option(help="Where runs started through the API work (default: cwd).")
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="A browser origin allowed to call the API from another site, e.g. a chat "
            "frontend at http://localhost:3000 (repeatable; also $ONWARD_CORS_ORIGINS).",
        ),
    ] = None,
    db: DbOpt = None,
    tools: ToolsOpt = None,
    policy_file: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="The run policy of every API run (YAML/JSON); a start request may only "
            "tighten it.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Assistants to offer (YAML: assistants: {name: {policy, budget, model_plans}}).",
        ),
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", min=1, help="Step executions per API run.")
    ] = None,
    max_run_time: Annotated[
        str | None, typer.Option("--max-run-time", help="Wall time of an API run (2h, 1d).")
    ] = None,
    max_body: Annotated[
        int | None,
        typer.Option("--max-body", min=1024, help="Largest request body in bytes (4 MiB)."),
    ] = None,
    run_slots: Annotated[
        int | None, typer.Option("--run-slots", min=1, help="Runs driven at once (8).")
    ] = None,
    user_runs: Annotated[
        int | None, typer.Option("--user-runs", min=1, help="Runs in flight per user (4).")
    ] = None,
    open_docs: Annotated[
        bool,
        typer.Option("--open-docs", help="Serve /docs and /openapi.json without a token."),
    ] = False,
    no_recover: Annotated[
        bool,
        typer.Option(
            "--no-recover",
            help="Leave runs whose driver died to `onward worker` processes.",
        ),
    ] = False,
    processes: Annotated[
        int,
        typer.Option(
            "--processes",
            min=1,
            help="Server processes on the port (1); run slots and per-user runs are each "
            "process's.",
        ),
    ] = 1,
) -> None:
    """Serve the LangGraph Server API (langgraph_sdk, RemoteGraph, agent-chat-ui) and a web
    page at / on this store. Tokens: $ONWARD_API_TOKENS=token:user,... (else open)."""
    try:
        import uvicorn  # noqa: F401 - the serve extra's, checked before anything starts

        from onward.serve import create_app
        from onward.serve.limits import ServeLimits
    except ImportError:
        err.print("onward serve needs the serve extra: pip install 'onward[serve]'")
        raise typer.Exit(EXIT_USAGE) from None
    from onward.model.state import Budget
    from onward.policies.run import load_policy_file
    from onward.serve.listen import SHARED_PORTS, bind, reserve

    with errors(False):
        env = ServeLimits.from_env()
        slots = run_slots or env.run_slots
        limits = ServeLimits(
            max_body=max_body or env.max_body,
            run_slots=slots,
            user_runs=user_runs or min(env.user_runs, slots),
        )
        # A taken port is an error before "serving" is printed, and before the store opens.
        several = processes > 1 and SHARED_PORTS
        sock = reserve(host, port) if several else bind(host, port)
        make_app = functools.partial(
            create_app,
            store_url(db),
            workdir=workdir,
            tool_modules=tools or [],
            cors_origins=cors_origin or None,
            policy=load_policy_file(policy_file) if policy_file else None,
            budget=Budget(
                max_steps=max_steps, max_run_time=duration(max_run_time, "--max-run-time")
            ),
            limits=limits,
            open_docs=open_docs,
            recover=not no_recover,
            config=config,
        )
    serving = f"onward serving {store_url(db)} on http://{host}:{port}/"
    if processes == 1:
        code = _serve_one(make_app, lambda: sock, lambda: err.print(serving, highlight=False))
    else:
        from onward.serve.processes import Processes

        def listening() -> socket.socket:  # each process's own (listen.reserve)
            sock.close()
            return bind(host, port, shared=True)

        announce = f"{serving} ({processes} processes)"
        code = Processes(
            processes,
            lambda ready: _serve_one(make_app, listening if several else lambda: sock, ready),
            say=lambda line: err.print(f"onward serve: {line}", highlight=False),
            ready=lambda: err.print(announce, highlight=False),
        ).run()
    if code:
        raise typer.Exit(code)


def _serve_one(
    make_app: Callable[[], Any], listening: Callable[[], socket.socket], ready: Callable[[], None]
) -> int:
    """One server process on the socket ``listening()`` gives, to its end: 1 if its
    start-up failed (logged)."""
    import uvicorn

    with errors(False):
        app_ = make_app()
        sock = listening()
    ready()
    # What start-up made lives as long as the server (modules, the compiled graph, the
    # app): out of the collector's generations, no later collection walks it again.
    gc.collect()
    gc.freeze()
    server = uvicorn.Server(uvicorn.Config(app_, log_level="warning"))
    server.run(sockets=[sock])
    return 0 if server.started else 1
