"""Helpers shared by several test modules, moved out of tests/docs/test_docs.py:
cli_options."""

from __future__ import annotations

import sys
from functools import cache


@cache
def cli_options() -> dict[str, set[str]]:
    """Every command of the ``onward`` script and its options, read from the Typer app
    behind the console-script entry point (in process: no ``--help`` subprocesses)."""
    from importlib.metadata import entry_points

    import typer
    import typer.main

    main = entry_points(group="console_scripts")["onward"].load()
    app = sys.modules[main.__module__].app  # built on first use (onward/cli/__init__.py)
    assert isinstance(app, typer.Typer)
    group = typer.main.get_command(app)  # a click group (Typer may bring its own click)
    return {
        name: {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        for name, command in group.commands.items()  # type: ignore[attr-defined]
    }
