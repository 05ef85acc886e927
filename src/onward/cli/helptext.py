"""``--help`` that reads as sentences: placeholders instead of Typer's type tags
(``<bool>``, ``<list[str]>``, ``<int range> [x>=1]``), and paragraphs joined, so a
docstring's line breaks never split a sentence in the commands list.

Typer shows a parameter's type unless it has a metavar, and keeps a docstring's single
line breaks in the command list; :class:`Group` fixes both on every command it holds,
once, when the command line is built (nothing here runs for a command that is not shown).
"""

from __future__ import annotations

import re
from typing import Any

from typer.core import TyperArgument, TyperGroup, TyperOption

PLACEHOLDERS = {
    "--db": "URL",
    "--plan": "FILE",
    "--input": "FILE",
    "--policy": "FILE",
    "--args-file": "FILE",
    "--result-file": "FILE",
    "--html": "FILE",
    "--workdir": "DIR",
    "--tools": "MODULE",
    "--thread-id": "ID",
    "--step": "ID",
    "--interrupt-id": "ID",
    "--at": "CHECKPOINT",
    "--edit": "KEY=VALUE",
    "--approve-tools": "TOOLS",
    "--auto-approve": "TOOLS",
    "--allow-tools": "TOOLS",
    "--interrupt-before": "NODE",
    "--kind": "KIND",
    "--remind-after": "DURATION",
    "--expire-after": "DURATION",
    "--max-run-time": "DURATION",
    "--older-than": "DURATION",
    "--now": "TIME",
    "--user": "NAME",
    "--token": "TOKEN",
    "--reason": "TEXT",
    "--host": "HOST",
    "--port": "PORT",
    "--poll": "SECONDS",
    "--delay": "SECONDS",
    "--max-cost": "USD",
}
"""An option's placeholder in ``--help``; others are named for their type (N, TEXT)."""

ARGUMENTS = {"thread_id": "THREAD", "goal": "GOAL", "text": "TEXT"}
ARGUMENT_HELP = {"thread_id": "The run's thread id (`onward list` shows them)."}


def sentences(text: str | None) -> str | None:
    """Single line breaks joined: a paragraph is one run of text that Rich wraps."""
    if not text:
        return text
    return re.sub(r"(?<!\n)[ \t]*\n[ \t]*(?!\n)", " ", text.strip())


def _placeholder(param: TyperOption) -> str:
    for opt in param.opts:
        if opt in PLACEHOLDERS:
            return PLACEHOLDERS[opt]
    # Typer describes a parameter's type here (its click may be its own, vendored one).
    desc = getattr(param, "type_descriptor", None)
    choices = getattr(desc, "choices", None)
    if choices:
        return "|".join(str(getattr(c, "value", c)) for c in choices)
    kind = getattr(desc, "annotation", None)
    if kind is int:
        return "N"
    if kind is float:
        return "NUMBER"
    if getattr(desc, "is_path", False):
        return "PATH"
    return "TEXT"


def _range_sentence(param: TyperOption | TyperArgument) -> str:
    """``[x>=1]`` said in words, for the end of the help text."""
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None and high is not None:
        return f"From {low} to {high}."
    if low is not None:
        return f"At least {low}."
    if high is not None:
        return f"At most {high}."
    return ""


def polish(command: Any) -> None:
    """Rewrite ``command``'s help in place (idempotent)."""
    if getattr(command, "_onward_polished", False):
        return
    command.help = sentences(command.help)
    command.short_help = sentences(command.short_help)
    for param in command.params:
        said = _range_sentence(param)
        if said:
            # Typer appends the range as ``[x>=1]``; the sentence replaces it.
            param._get_number_range_help_str = lambda: None
        if isinstance(param, TyperOption):
            help_text = sentences(param.help) or ""
            param.help = f"{help_text} {said}".strip() if said else help_text
            if param.is_flag:
                param.metavar = ""
            elif param.metavar is None:
                param.metavar = _placeholder(param)
        elif isinstance(param, TyperArgument):
            if param.metavar is None:
                param.metavar = ARGUMENTS.get(param.name or "", (param.name or "value").upper())
            param.help = sentences(param.help) or ARGUMENT_HELP.get(param.name or "")
            param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
    make_help = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = make_help(ctx)  # made when help is shown: a flag, shown without a type
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    command._onward_polished = True


class Group(TyperGroup):
    """The ``onward`` command group: every command's help polished (see :func:`polish`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = sentences(self.help)
        polish(self)
        for command in self.commands.values():
            polish(command)


__all__ = ["Group", "polish", "sentences"]
