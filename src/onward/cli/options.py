"""What the commands share: option declarations, exit codes, the error boundary, the store.

Nothing heavy at module level: every command's options must be declared for ``--help``,
but only a command that runs opens the store (and so imports LangGraph).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from rich.text import Text

from onward.cli.render import err, say
from onward.errors import OnwardError, UsageError, printable

if TYPE_CHECKING:
    from onward.client import Onward, RunView
    from onward.llm.models import ModelChoice
    from onward.observe.questions import Asked
    from onward.store.tables import Tables


class OnExpiry(StrEnum):
    """``--on-expiry``: the values of ``onward.policies.run.ExpiryAction`` (a test keeps them
    equal), declared here so ``--help`` need not import pydantic for the policy models."""

    REJECT = "reject"
    SUSPEND = "suspend"


EXIT_DONE, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING, EXIT_BUSY = 0, 1, 2, 3, 4

DbOpt = Annotated[
    str | None,
    typer.Option("--db", help="Store URL (default: $ONWARD_DB, else sqlite:///.onward/onward.db)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ToolsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tools",
        help="Python file or module registering @onward.tool tools (repeatable; "
        "also $ONWARD_TOOLS, comma-separated).",
    ),
]
McpOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--mcp",
        help="MCP server whose tools the run may use: NAME=URL (streamable HTTP, a host "
        "ONWARD_HTTP_ALLOW allows) or NAME='COMMAND ARGS' (stdio, a command ONWARD_MCP_COMMANDS "
        "allows), or a JSON file of mcpServers (repeatable; also $ONWARD_MCP).",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model: provider:name (openai:gpt-4o-mini, anthropic:..., ollama:...) or an "
        "OpenAI model's name (default $ONWARD_MODEL, else gpt-4o-mini with OPENAI_API_KEY).",
    ),
]
PlannerModelOpt = Annotated[
    str | None,
    typer.Option("--planner-model", help="The model that plans and replans (default: --model)."),
]
StepModelOpt = Annotated[
    str | None, typer.Option("--step-model", help="The model of model steps (default: --model).")
]
JudgeModelOpt = Annotated[
    str | None,
    typer.Option("--judge-model", help="The model that judges outputs (default: --model)."),
]
UserOpt = Annotated[
    str | None, typer.Option("--user", help="Who decides (default $ONWARD_USER, else login@host).")
]
NoContinueOpt = Annotated[
    bool,
    typer.Option("--no-continue", help="Only record the decision; `onward resume` goes on later."),
]


InterruptBeforeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--interrupt-before",
        help="Pause before this graph node (repeatable), e.g. verify; exit 3, and "
        "`onward resume` goes on.",
    ),
]


def exit_code(view: RunView) -> int:
    from onward.model.state import RunFailureKind, RunStatus

    if view.status is RunStatus.DONE:
        return EXIT_DONE
    if view.status in (RunStatus.WAITING_FOR_HUMAN, RunStatus.SUSPENDED) or view.paused_before:
        return EXIT_WAITING
    if view.failure is not None and view.failure.kind is RunFailureKind.PLANNING:
        return EXIT_USAGE
    return EXIT_FAILED


@contextmanager
def errors(as_json: bool) -> Iterator[None]:
    """OnwardErrors → a clear message and an exit code, never a traceback; onward's
    warnings → a ``warning:`` line on stderr."""
    try:
        with _warnings_shown():
            yield
    except OnwardError as exc:
        code = exc.exit_code  # each error knows it (onward.errors)
        message = printable(str(exc))  # it may quote bad input, lone surrogates included
        if as_json:
            say(json.dumps({"error": type(exc).__name__, "message": message}))
        else:
            # Text, not markup: messages quote user input such as regexes with [brackets].
            err.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
        raise typer.Exit(code) from None


@contextmanager
def _warnings_shown() -> Iterator[None]:
    import warnings

    from onward.errors import OnwardWarning

    with warnings.catch_warnings():
        warnings.simplefilter("always", OnwardWarning)
        shown = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if not issubclass(category, OnwardWarning):
                return shown(message, category, filename, lineno, file, line)
            err.print(Text.assemble(("warning: ", "bold yellow"), str(message)), soft_wrap=True)

        warnings.showwarning = show
        yield


def store_url(db: str | None) -> str:
    """--db, else $ONWARD_DB, else the default SQLite file."""
    from onward.settings import settings

    return db or settings().db


def open_store(
    db: str | None,
    tools: list[str] | None,
    *,
    existing: bool = False,
    mcp: list[str] | None = None,
    models: ModelChoice | None = None,
) -> Onward:
    """``existing``: a command that only reads; a store that is not there is an error, never
    created. ``mcp``: --mcp servers (their tools are loaded, and runs started keep them);
    ``models``: the --model options (over the environment's)."""
    from onward.client import Onward

    url = store_url(db)
    if existing:
        _require_store(url)
    modules = list(tools or [])
    if mcp:
        from onward.tools.mcp import refs_of

        modules.extend(refs_of(mcp))
    if models is None or not any((models.model, models.planner, models.step, models.judge)):
        return Onward(url, tool_modules=modules)
    from onward.llm.models import model_from_env

    return Onward(url, tool_modules=modules, model=model_from_env(choice=models))


def _require_store(url: str) -> None:
    from onward.settings import settings
    from onward.store.sql import require_store

    settings()  # a bad variable is the first thing said, as when opening the store
    require_store(url)


def open_tables(db: str | None) -> Tables:
    """The store's own tables, for commands that read only them: no LangGraph, no graph.
    A store that is not there is an error, never created."""
    from onward.store.tables import Tables

    url = store_url(db)
    _require_store(url)
    return Tables.open(url)


def read_inbox(db: str | None, user: str | None) -> Sequence[Asked]:
    """``Onward.inbox`` for ``onward inbox``: no checkpoint is read when no run is
    unfinished; the questions are read without LangGraph (onward.observe.reading), and
    through it only where that cannot be exact, or to mint resume tokens (ONWARD_SECRET)."""
    with open_tables(db) as tables:
        runs = tables.unfinished_runs()
        if not runs:
            return []  # nothing to decode
        from onward.people import resume_tokens

        if resume_tokens.secret() is None:
            from onward.observe import reading

            found = reading.inbox(tables, runs)
            if found is not None:
                return found
    with open_store(db, None, existing=True) as ow:
        return ow.inbox(user=user)


def duration(text: str | None, option: str = "") -> timedelta | None:
    """An optional duration option (2h, 1d); ``option`` names it in the error."""
    from onward.policies.durations import parse_duration

    if not text:
        return None
    try:
        return parse_duration(text)
    except UsageError as exc:
        raise UsageError(f"{option}: {exc}" if option else str(exc)) from None


def edits(edit: list[str] | None, args_file: Path | None) -> tuple[dict[str, Any] | None, Any]:
    """--edit key=value changes (values as YAML), or all args from --args-file."""
    import yaml

    if args_file is not None:
        try:
            args = yaml.safe_load(args_file.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"cannot read --args-file {args_file}: {exc}") from None
        if not isinstance(args, dict):
            raise UsageError(f"--args-file {args_file} must hold a mapping of args")
        return None, args
    if not edit:
        return None, None
    changes: dict[str, Any] = {}
    for item in edit:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--edit {item!r}: write key=value (value as YAML: 5, true, text)")
        changes[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return changes, None
