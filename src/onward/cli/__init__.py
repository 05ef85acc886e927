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
from typing import Any

import typer
from typer.main import get_command_name

from onward.cli import inspecting, lifecycle, people, richlite, running, serving
from onward.cli.helptext import Group
from onward.cli.render import err

GROUPS = (running, people, inspecting, lifecycle, serving)
SETTINGS: dict[str, Any] = {
    "name": "onward",
    "help": "Crash-safe long agent tasks: plan, execute, verify, resume by thread id.",
    "no_args_is_help": True,
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "cls": Group,  # help as sentences: placeholders, not type tags
}

app = typer.Typer(**SETTINGS)
for group in GROUPS:
    app.add_typer(group.commands)


def for_command(argv: list[str]) -> typer.Typer:
    """The app to run ``argv`` (the arguments after ``onward``) with: for a known command,
    one with only its group's commands, since Typer builds the parameters of every command
    it holds before it runs one (most of the CLI's own start-up); else the whole CLI (help,
    unknown commands)."""
    name = argv[0] if argv else None
    for group in GROUPS:
        for info in group.commands.registered_commands:
            if info.callback and (info.name or get_command_name(info.callback.__name__)) == name:
                narrow = typer.Typer(**SETTINGS)
                narrow.add_typer(group.commands)
                return narrow
    return app


def main() -> None:
    richlite.install()  # help without rich.markdown and rich.traceback (cli/richlite.py)
    try:
        for_command(sys.argv[1:])()
    except KeyboardInterrupt:
        err.print("interrupted; resume the run with `onward resume THREAD`")
        sys.exit(130)


__all__ = ["app", "main"]
