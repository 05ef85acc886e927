"""The ``onward`` command line (Typer + Rich), its commands grouped by concern.

Exit codes: 0 run done · 1 run failed · 2 usage or validation error ·
3 waiting for a human or suspended · 4 busy (the database or run is held by another process).

Internal: the command line is the interface; ``main`` and ``app`` are what the package
script and tests use. Modules: ``running`` (run, submit, resume, demo), ``people``
(inbox, approve, reject, respond, resolve, sweep), ``inspecting`` (status, list, timeline,
summary, history, show, replay, report, graph), ``lifecycle`` (cancel, fork, prune),
``serving`` (worker, serve); ``options`` and ``render`` are what they share.
"""

from __future__ import annotations

import sys

import typer

from onward.cli import inspecting, lifecycle, people, running, serving
from onward.cli.render import err

app = typer.Typer(
    name="onward",
    help="Crash-safe long agent tasks: plan, execute, verify, resume by thread id.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for group in (running, people, inspecting, lifecycle, serving):
    app.add_typer(group.commands)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted; resume the run with `onward resume THREAD`")
        sys.exit(130)


__all__ = ["app", "main"]
