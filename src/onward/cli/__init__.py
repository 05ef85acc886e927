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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

# Typer is imported where an app is built: ``onward --help`` draws the group's help
# without it (cli/grouphelp.py).

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
SUMMARIES = {
    "run": "Plan and run a goal (or a declared --plan) to the end, or until it waits for a person.",
    "submit": "Put a goal (or a declared --plan) on the work queue and print its thread id; any "
    "`onward worker` on the same store drives it. Takes the same options as `run`.",
    "resume": "Finish a run that stopped (crash, kill, Ctrl-C); completed steps are not run again.",
    "demo": "Offline demo: write a sample orders.csv and analyse it (no API key, no network).",
    "inbox": "Every decision waiting for a person, across all runs (oldest first).",
    "approve": "Approve a waiting step (optionally with edited args) and continue the run.",
    "reject": "Reject a waiting step: it and the steps that depend on it are skipped.",
    "respond": "Answer a waiting step with feedback instead of a decision.",
    "resolve": "Settle an effect whose outcome is unknown (an escalation); then `onward resume`.",
    "sweep": "Apply deadlines: record reminders; at expiry reject (or suspend) waiting decisions.",
    "status": "Show a run's status and steps.",
    "list": "List runs, newest first.",
    "timeline": "A run's events in order: steps, tool calls, checks, approvals, retries, model "
    "calls.",
    "summary": "Totals from the event log: time busy and waiting, retries, failures, people, cost.",
    "history": "A run's saved states (checkpoints), newest first: step back with `show --at`.",
    "show": "The run's state at a checkpoint (default: the latest).",
    "replay": "Walk a run's timeline event by event in the terminal.",
    "report": "Write a run as one self-contained HTML page (timeline, events, summary).",
    "graph": "Print the graph as a Mermaid diagram (the exact compiled graph, as Studio shows it).",
    "cancel": "Cancel a run (a live driver stops at its next step); optionally compensate effects.",
    "fork": "Continue a run from a past state as a new run (the original stays intact).",
    "prune": "Remove finished runs (checkpoints, events, ledger rows, artifacts no kept run "
    "uses); never anything a waiting or resumable run needs. Then VACUUM and report what was "
    "freed.",
    "worker": "Claim queued and resumable runs from the store and drive them, until SIGTERM or "
    "Ctrl-C: then finish the current superstep, requeue, release leases and exit 0. A "
    "database that goes away is waited for (ONWARD_PG_OUTAGE); a worker that stops for any "
    "other reason exits non-zero (2: the database stayed unreachable), so a supervisor with "
    "restart-on-failure restarts it.",
    "serve": "Serve the LangGraph Server API (langgraph_sdk, RemoteGraph, agent-chat-ui) and a "
    "web page at / on this store. Tokens: $ONWARD_API_TOKENS=token:user,... (else open).",
}
"""What ``onward --help`` lists for each command, in its order: the first paragraph of the
command's help as its docstring says it. With these the list is printed without importing
the command modules or building the parameters of 24 commands (most of what ``--help``
cost), ``onward --help`` without even Typer (cli/grouphelp.py); tests/cli/test_startup.py
keeps them equal to the docstrings and each help equal to the whole CLI's."""
HELP = "Crash-safe long agent tasks: plan, execute, verify, resume by thread id."


def settings() -> dict[str, Any]:
    """The arguments of every ``typer.Typer`` the CLI is built as."""
    from onward.cli.helptext import Group

    return {
        "name": "onward",
        "help": HELP,
        "no_args_is_help": True,
        "add_completion": False,
        "pretty_exceptions_enable": False,
        "cls": Group,  # help as sentences: placeholders, not type tags
    }


def group(name: str) -> ModuleType:
    # __import__, not importlib.import_module: only the former shows in -X importtime,
    # which tests/cli/test_startup.py and bench/startup.py read.
    __import__(f"onward.cli.{name}")
    return sys.modules[f"onward.cli.{name}"]


@cache
def whole() -> typer.Typer:
    """The CLI with every command (help, unknown commands, tests)."""
    import typer

    made = typer.Typer(**settings())
    for name in GROUPS:
        made.add_typer(group(name).commands)
    return made


def _listed() -> None:
    """Never called: :func:`index` holds it only to list a command (see :data:`SUMMARIES`)."""
    raise AssertionError("a command of the help index ran")  # pragma: no cover


@cache
def index() -> typer.Typer:
    """The CLI as the group's help shows it: every command by name and summary, none
    with parameters or its module imported. Only for printing the group's help: ``onward``
    alone, ``onward --help ...`` (both print that help and exit before any command runs);
    ``onward --help`` itself is drawn without Typer by :mod:`onward.cli.grouphelp`."""
    import typer

    made = typer.Typer(**settings())
    for name, summary in SUMMARIES.items():
        made.command(name, help=summary)(_listed)
    return made


def for_command(argv: list[str]) -> typer.Typer:
    """The app to run ``argv`` (the arguments after ``onward``) with: for a known command,
    one with only its group's commands, since Typer builds the parameters of every command
    it holds before it runs one (most of the CLI's own start-up), and only that group's
    module imported; for the group's help, the :func:`index`; else the whole CLI (a
    command's help goes with its command, unknown commands get the whole CLI)."""
    if not argv or argv[0] == "--help":
        return index()
    name = COMMANDS.get(argv[0])
    if name is None:
        return whole()
    import typer

    narrow = typer.Typer(**settings())
    narrow.add_typer(group(name).commands)
    return narrow


def __getattr__(attr: str) -> Any:
    if attr == "app":  # built on first use: ``onward CMD`` never builds it
        return whole()
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def main() -> None:
    argv = sys.argv[1:]
    if argv == ["--help"]:  # the group's help from the index, Typer not imported
        from onward.cli import grouphelp

        prog = grouphelp.program_name()
        if grouphelp.applies(argv, prog):
            grouphelp.show(prog, HELP, SUMMARIES)
            return
    try:
        for_command(argv)()
    except KeyboardInterrupt:
        from onward.cli.render import err

        err.print("interrupted; resume the run with `onward resume THREAD`")
        sys.exit(130)


__all__ = ["app", "main"]
