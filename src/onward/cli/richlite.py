"""``typer.rich_utils`` without the Rich modules onward's help never uses.

Typer renders help and usage errors with ``typer.rich_utils``, which imports
``rich.markdown`` (markdown-it, pygments) and ``rich.traceback`` (attrs, pygments) at its
top for two names: ``Markdown``, used only with ``rich_markup_mode="markdown"`` (onward
uses Rich markup), and ``Traceback``, used only for pretty exceptions (onward turns them
off). Those imports are about half of what ``onward --help`` costs. :func:`install`
makes the module's import see stand-ins for the two names instead: classes that import
the real module the first time one is made or one of their attributes is read, so
behaviour is the same if Typer ever uses them. The stand-ins exist only while
``typer.rich_utils`` itself is imported; any other ``import rich.markdown`` gets the real
module. Installed by :func:`onward.cli.main` only (the ``onward`` process), never on
``import onward``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

TARGET = "typer.rich_utils"
DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}
"""Module → the one name ``typer.rich_utils`` takes from it."""


class _Deferred(type):
    """The metaclass of a stand-in: class attributes come from the real class."""

    _module: str
    _name: str

    def real(cls) -> Any:
        return getattr(importlib.import_module(cls._module), cls._name)

    def __getattr__(cls, attr: str) -> Any:
        return getattr(cls.real(), attr)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)


def stand_in(module: str, name: str) -> type:
    """A class named ``name`` that stands for ``module.name`` until it is used."""
    return _Deferred(name, (), {"_module": module, "_name": name, "__module__": module})


class _Loader:
    """The real loader, run with the stand-ins in place (importlib.abc is not imported:
    it loads importlib.resources, a cost of its own)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        made: types.ModuleType | None = self.inner.create_module(spec)
        return made

    def exec_module(self, module: types.ModuleType) -> None:
        placed: list[tuple[str, types.ModuleType]] = []
        for name, attr in DEFERRED.items():
            if name not in sys.modules:  # already loaded: the real one is free
                stub = types.ModuleType(name)
                setattr(stub, attr, stand_in(name, attr))
                sys.modules[name] = stub
                placed.append((name, stub))
        try:
            self.inner.exec_module(module)
        finally:
            for name, stub in placed:
                if sys.modules.get(name) is stub:
                    del sys.modules[name]

    def __getattr__(self, attr: str) -> Any:  # get_source, get_code, ... of the real loader
        return getattr(self.inner, attr)


class _Finder:
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)  # type: ignore[assignment]  # duck-typed
        return spec


def install() -> None:
    """Import ``typer.rich_utils`` with stand-ins from now on (idempotent; nothing to do if
    it is imported already)."""
    if TARGET in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())


__all__ = ["install", "stand_in"]
