"""``onward --help`` drawn with Rich from the command index, without importing Typer.

Importing Typer and its help renderer (``typer.rich_utils``) is most of what
``onward --help`` cost beyond the ``import typer, rich`` any Typer CLI pays; the group's
help is a fixed page (a usage line, one sentence, the ``--help`` option, each command's
summary), so :func:`show` lays it out with the same Rich objects, styles and environment
switches as ``typer.rich_utils.rich_format_help`` and click's usage line do for onward's
index. tests/cli/test_startup.py compares the two byte for byte across widths and colour
settings, so a Typer upgrade that changes its layout fails there, not in front of users.
Only ``onward --help`` comes here, and only when Typer would draw it with Rich and answer
no shell-completion request first (:func:`applies`); every other argv runs Typer.
"""

from __future__ import annotations

import inspect
import os
import shutil
import sys
import textwrap
from collections.abc import Mapping
from gettext import gettext as _
from typing import ClassVar

from rich.align import Align
from rich.columns import Columns
from rich.console import Console, Group
from rich.highlighter import RegexHighlighter
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

USAGE_ARGS = "[OPTIONS] COMMAND [ARGS]..."
"""A group's usage pieces: click's options metavar and subcommand metavar."""

# typer.rich_utils' styles, for the parts of a group's help that onward's has.
STYLE_USAGE_COMMAND = "bold"
STYLE_TYPES = "bold yellow"
STYLE_PANEL_BORDER = "dim"
STYLE_COMMANDS_FIRST_COLUMN = "bold cyan"
THEME = {
    "option": "bold cyan",
    "switch": "bold green",
    "negative_option": "bold magenta",
    "negative_switch": "bold red",
    "types": "bold yellow",
    "types_sep": "dim",
    "usage": "yellow",
}


class OptionHighlighter(RegexHighlighter):
    highlights: ClassVar[list[str]] = [
        r"(^|\W)(?P<switch>\-\w+)(?![a-zA-Z0-9])",
        r"(^|\W)(?P<option>\-\-[\w\-]+)(?![a-zA-Z0-9])",
        r"(?P<types>\<[^\>]+\>)",
        r"(?P<usage>Usage: )",
    ]


class NegativeOptionHighlighter(RegexHighlighter):
    highlights: ClassVar[list[str]] = [
        r"(^|\W)(?P<negative_switch>\-\w+)(?![a-zA-Z0-9])",
        r"(^|\W)(?P<negative_option>\-\-[\w\-]+)(?![a-zA-Z0-9])",
    ]


class TypesHighlighter(RegexHighlighter):
    highlights: ClassVar[list[str]] = [
        r"^(?P<types_sep>(\[|<))",
        r"(?P<types_sep>\|)",
        r"(?P<types_sep>(\]|>))(\.\.\.)?$",
    ]


highlighter = OptionHighlighter()


def program_name() -> str:
    """The name the usage line shows, as click detects it (``onward``, ``python -m onward``)."""
    main = sys.modules["__main__"]
    path = sys.argv[0]
    package = getattr(main, "__package__", None)
    if package in {None, ""} or (
        os.name == "nt"
        and package == ""
        and not os.path.exists(path)
        and os.path.exists(f"{path}.exe")
    ):
        return os.path.basename(path)
    module = str(package)
    name = os.path.splitext(os.path.basename(path))[0]
    if name != "__main__":
        module = f"{module}.{name}"
    return f"python -m {module.lstrip('.')}"


def applies(argv: list[str], prog: str) -> bool:
    """Whether Typer would print the group's help for ``argv`` exactly as :func:`show`
    does: ``--help`` alone, Typer's Rich help on, no shell-completion request (Typer
    answers that first, whatever the arguments)."""
    complete_var = f"_{prog}_COMPLETE".replace("-", "_").upper()
    return (
        argv == ["--help"]
        and os.environ.get("TYPER_USE_RICH") is None
        and not os.environ.get(complete_var)
    )


def usage(prog: str) -> str:
    """Click's usage line (``HelpFormatter.write_usage``): wrapped to the terminal's width
    less two, within 50 to 78 columns. Its wrapper differs from textwrap's only for a word
    longer than a line, and no usage word here comes near that."""
    width = max(min(shutil.get_terminal_size().columns, 80) - 2, 50)
    prefix = "Usage: "
    first = f"{prefix}{prog} "
    if width >= len(first) + 20:
        initial, rest = first, " " * len(first)
        head = ""
    else:
        initial = rest = " " * (len(prefix) + 4)
        head = f"{first}\n"
    wrapper = textwrap.TextWrapper(
        width, initial_indent=initial, subsequent_indent=rest, replace_whitespace=False
    )
    return head + wrapper.fill(USAGE_ARGS.expandtabs())


def console() -> Console:
    """Typer's help console (``typer.rich_utils._get_rich_console``), same switches."""
    columns = os.getenv("TERMINAL_WIDTH")
    force: bool | None = (
        True
        if os.getenv("GITHUB_ACTIONS") or os.getenv("FORCE_COLOR") or os.getenv("PY_COLORS")
        else None
    )
    if os.getenv("_TYPER_FORCE_DISABLE_TERMINAL"):
        force = False
    return Console(
        theme=Theme(THEME),
        highlighter=highlighter,
        color_system="auto",
        force_terminal=force,
        width=int(columns) if columns else None,
    )


def _rich_text(text: str) -> Text:
    """Typer's ``_make_rich_text`` in Rich markup mode."""
    text = inspect.cleandoc(text)
    if "\033[" in text:
        return highlighter(Text.from_ansi(text, style=""))
    return highlighter(Text.from_markup(text, style=""))


def _first_paragraph(text: str) -> str:
    """Typer's ``_make_command_help`` text in Rich markup mode."""
    first = inspect.cleandoc(text).split("\n\n")[0]
    if first.startswith("\b"):
        first = first.replace("\b\n", "")
    return first.strip()


def _panel(table: Table, title: str) -> Panel:
    return Panel(table, border_style=STYLE_PANEL_BORDER, title=title, title_align="left")


def _table(*, highlight: bool) -> Table:
    return Table(
        highlight=highlight,
        show_header=False,
        expand=True,
        box=None,
        show_lines=False,
        leading=0,
        border_style=None,
        row_styles=None,
        pad_edge=False,
        padding=(0, 1),
    )


def show(prog: str, help_text: str, summaries: Mapping[str, str]) -> None:
    """Print the group's help: its usage, ``help_text`` (one paragraph, as onward's is),
    the ``--help`` option and each command with its summary, as Typer renders a group
    whose help and commands are these."""
    out = console()
    out.print(Padding(highlighter(usage(prog)), 1), style=STYLE_USAGE_COMMAND)
    first = inspect.cleandoc(help_text).partition("\f")[0]
    if not first.startswith("\b"):
        first = first.replace("\n", " ")
    out.print(Padding(Align(Group(_rich_text(first.strip())), pad=False), (0, 1, 1, 1)))

    options = _table(highlight=True)
    types = TypesHighlighter()(Text(style=STYLE_TYPES, overflow="fold"))
    negative = NegativeOptionHighlighter()
    described = Columns([_rich_text("Show this message and exit.")])
    options.add_row(
        highlighter("--help"), highlighter(""), negative(""), negative(""), types, described
    )
    out.print(_panel(options, _("Options")))

    commands = _table(highlight=False)
    commands.add_column(
        style=STYLE_COMMANDS_FIRST_COLUMN, no_wrap=True, width=max(map(len, summaries), default=0)
    )
    commands.add_column("Description", justify="left", no_wrap=False, ratio=10)
    for name, summary in summaries.items():
        commands.add_row(Text(name), _rich_text(_first_paragraph(summary)))
    if commands.row_count:
        out.print(_panel(commands, _("Commands")))
    # click's help option echoes what the help returned, "" (Rich printed it), and a newline
    if sys.stdout is not None:
        sys.stdout.write("\n")
        sys.stdout.flush()
