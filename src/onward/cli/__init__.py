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
from functools import cache
from types import ModuleType
from typing import Any

import typer

from onward.cli import richlite
from onward.cli.helptext import Group

GROUPS = ("running", "people", "inspecting", "lifecycle", "serving")
"""The command modules, in the order ``--help`` lists their commands."""
COMMANDS = {
    **dict.fromkeys(("run", "submit", "resume", "demo"), "running"),
    **dict.fromkeys(("inbox", "approve", "reject", "respond", "resolve", "sweep"), "people"),
    **dict.fromkeys(
        ("status", "list", "timeline", "summary", "history", "show", "replay", "report", "graph"),
        "inspecting",
    ),
    **dict.fromkeys(("cancel", "fork", "prune"), "lifecycle"),
    **dict.fromkeys(("worker", "serve"), "serving"),
}
"""Each command's module, so ``onward CMD`` imports only CMD's (a test keeps this equal to
what the modules register)."""
SETTINGS: dict[str, Any] = {
    "name": "onward",
    "help": "Crash-safe long agent tasks: plan, execute, verify, resume by thread id.",
    "no_args_is_help": True,
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "cls": Group,  # help as sentences: placeholders, not type tags
}


def group(name: str) -> ModuleType:
    # __import__, not importlib.import_module: only the former shows in -X importtime,
    # which tests/test_startup.py and bench/startup.py read.
    __import__(f"onward.cli.{name}")
    return sys.modules[f"onward.cli.{name}"]


@cache
def whole() -> typer.Typer:
    """The CLI with every command (help, unknown commands, tests)."""
    made = typer.Typer(**SETTINGS)
    for name in GROUPS:
        made.add_typer(group(name).commands)
    return made


def for_command(argv: list[str]) -> typer.Typer:
    """The app to run ``argv`` (the arguments after ``onward``) with: for a known command,
    one with only its group's commands, since Typer builds the parameters of every command
    it holds before it runs one (most of the CLI's own start-up), and only that group's
    module imported; else the whole CLI (help, unknown commands)."""
    name = COMMANDS.get(argv[0]) if argv else None
    if name is None:
        return whole()
    narrow = typer.Typer(**SETTINGS)
    narrow.add_typer(group(name).commands)
    return narrow


def __getattr__(attr: str) -> Any:
    if attr == "app":  # built on first use: ``onward CMD`` never builds it
        return whole()
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def main() -> None:
    richlite.install()  # help without rich.markdown and rich.traceback (cli/richlite.py)
    try:
        for_command(sys.argv[1:])()
    except KeyboardInterrupt:
        from onward.cli.render import err

        err.print("interrupted; resume the run with `onward resume THREAD`")
        sys.exit(130)


__all__ = ["app", "main"]
