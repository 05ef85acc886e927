"""Typer's coercion of plain parameter values, without importing pydantic.

Typer coerces every parameter value through a pydantic ``TypeAdapter`` it builds on first
use, so any command that runs imports pydantic (about half again what ``import typer``
costs) even when every value is a plain string. :func:`install` gives each parameter of a
command a coercion that returns what Typer's would for the values the CLI takes on its
common paths (a UTF-8 string, strings of a repeated option, a decimal integer or number
within the parameter's range, a default of the parameter's type, a flag not given) and
hands anything else to Typer's own, adapter and all: an out-of-range number, a bad word,
an enum, a path, a file. So a value is accepted or refused, and an error worded, exactly
as before (tests/test_startup.py compares the two over every parameter of the CLI).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from typer._click import Context
from typer._coercion import RuntimeParam, build_runtime_param
from typer.core import TyperArgument, TyperOption

_INT = re.compile(r"0|[1-9][0-9]{0,17}")
_FLOAT = re.compile(r"(0|[1-9][0-9]{0,14})(\.[0-9]{1,14})?")
_TYPER = object()
"""Not a plain value: Typer's own coercion decides."""


def _text(value: Any) -> Any:
    if type(value) is not str:
        return _TYPER
    try:
        value.encode("utf-8")  # a lone surrogate (undecodable argv): left to Typer
    except UnicodeEncodeError:
        return _TYPER
    return value


def _number(kind: type, value: Any, low: Any, high: Any) -> Any:
    if type(value) is str and (_INT if kind is int else _FLOAT).fullmatch(value):
        value = kind(value)
    if type(value) is not kind:
        return _TYPER
    if (low is not None and value < low) or (high is not None and value > high):
        return _TYPER  # Typer's adapter words the error
    return value


@dataclass(frozen=True)
class PlainRuntimeParam(RuntimeParam):
    """A parameter's coercion: plain values here, the rest by Typer's adapter."""

    def _coerce_value(self, value: Any, param: Any, ctx: Context) -> Any:
        found = self._plain(value)
        if found is not _TYPER:
            return found
        real = build_runtime_param(param.type_descriptor)
        param._runtime_param = real  # from now on this parameter is Typer's alone
        return real._coerce_value(value, param=param, ctx=ctx)

    def _plain(self, value: Any) -> Any:
        kind, info = self.annotation, self.parameter_info
        if kind is str:
            return _text(value)
        if kind == list[str]:
            if type(value) not in (tuple, list):
                return _TYPER
            items = [_text(v) for v in value]
            return _TYPER if _TYPER in items else items
        if kind is int or kind is float:
            return _number(kind, value, info.min, info.max)
        if kind is bool:  # a flag not given: no value (Typer coerces a given one itself)
            return value if type(value) is bool else _TYPER
        return _TYPER


def eligible(param: Any) -> bool:
    """A parameter whose values this module may coerce (no parser, clamp or file)."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None or not isinstance(param, TyperOption | TyperArgument):
        return False
    info = desc.parameter_info
    if info.parser is not None or info.clamp or desc.file_annotation is not None:
        return False
    return desc.annotation in (str, int, float, bool) or desc.annotation == list[str]


def install(command: Any) -> None:
    """Plain coercion for each of ``command``'s eligible parameters (idempotent)."""
    for param in command.params:
        install_param(param)


def install_param(param: Any) -> None:
    """Plain coercion for one parameter, if it is eligible and has none yet."""
    if eligible(param) and param._runtime_param is None:
        desc = param.type_descriptor
        param._runtime_param = PlainRuntimeParam(
            parameter_info=desc.parameter_info, annotation=desc.annotation
        )


__all__ = ["PlainRuntimeParam", "eligible", "install", "install_param"]
