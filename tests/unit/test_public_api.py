"""The public names are a promise: adding one is a decision, removing one breaks users.

``onward.__all__`` is the one list of them (httpx's tests/test_exported_members.py
style): it must be exactly what the package exposes, and the two places
``onward/__init__.py`` must name them again (the ``TYPE_CHECKING`` imports mypy and IDEs
read, and ``_HOMES``, where each name loads from) must say the same."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

import pytest

import onward

PLUMBING = {"annotations", "TYPE_CHECKING", "Any"}
"""Module-level names of ``onward/__init__.py`` that are its machinery, not its API."""


def exposed() -> set[str]:
    """Every public name ``onward`` holds once each lazy name is loaded (modules and the
    plumbing aside)."""
    for name in onward.__all__:
        getattr(onward, name)
    return {
        name
        for name, value in vars(onward).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    } - PLUMBING


def type_checking_imports() -> set[str]:
    """The names ``onward/__init__.py`` imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse(inspect.getsource(onward))
    [block] = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    return {
        alias.asname or alias.name
        for node in ast.walk(block)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_all_is_exactly_what_the_package_exposes() -> None:
    assert len(onward.__all__) == len(set(onward.__all__))
    assert onward.__all__ == sorted(onward.__all__)
    assert set(onward.__all__) == exposed()


def test_the_static_imports_name_the_same_list() -> None:
    assert type_checking_imports() == set(onward.__all__)


def test_every_public_name_is_importable() -> None:
    for name in onward.__all__:
        assert getattr(onward, name) is not None


def test_public_names_load_lazily_from_their_homes() -> None:
    """``onward.X`` is the object its module defines (loaded on first use), every public
    name has a home, and a name that is not public is an AttributeError as before."""
    import importlib

    homes = {name: module for module, names in onward._HOMES.items() for name in names}
    assert set(homes) == set(onward.__all__)
    for name, module in homes.items():
        assert getattr(onward, name) is getattr(importlib.import_module(module), name), name
    assert set(dir(onward)) >= set(onward.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        onward.Nope  # noqa: B018


def test_usage_errors_are_onward_errors() -> None:
    for cls in (
        onward.PlanValidationError,
        onward.PlanningError,
        onward.UnknownThreadError,
        onward.ToolLoadError,
        onward.AnswerError,
        onward.NoTemplateError,
        onward.TokenError,
    ):
        assert issubclass(cls, onward.UsageError)
        assert issubclass(cls, onward.OnwardError)
    assert issubclass(onward.StoreLockedError, onward.StoreError)


def test_every_error_knows_its_exit_code_and_http_status() -> None:
    """One table: the CLI exits with ``exit_code``, ``onward serve`` answers ``http_status``
    (the conventions: 2 usage, 3 stopped for a human, 4 busy)."""
    from onward import errors

    expected = {
        errors.UsageError: (2, 422),
        errors.ForbiddenError: (2, 403),
        errors.TokenError: (2, 403),
        errors.UnknownThreadError: (2, 404),
        errors.PlanValidationError: (2, 422),
        errors.StoreError: (2, 503),
        errors.StoreLockedError: (4, 503),
        errors.RunBusyError: (4, 409),
        errors.LeaseLostError: (4, 500),
        errors.InconsistentRunError: (3, 500),
        errors.LoopGuardError: (3, 500),
        errors.ArtifactError: (2, 500),
    }
    for cls, (exit_code, status) in expected.items():
        assert (cls.exit_code, cls.http_status) == (exit_code, status), cls.__name__
    too_big = errors.RequestLimitError("x", http_status=413)
    busy = errors.RequestLimitError("x", http_status=429, retry_after=5)
    assert (too_big.http_status, busy.http_status, busy.retry_after) == (413, 429, 5)


# Every OnwardError with its (CLI exit code, HTTP status): a new error class must be added
# here, so its codes are a decision (the same table is in onward.errors' docstring).
ERROR_CODES = {
    "OnwardError": (2, 500),
    "UsageError": (2, 422),
    "ForbiddenError": (2, 403),
    "RequestLimitError": (2, 422),  # each one says 413 or 429 (pinned above)
    "PlanValidationError": (2, 422),
    "PlanningError": (2, 422),
    "NoTemplateError": (2, 422),
    "ModelPlanningError": (2, 422),
    "ModelBlockedError": (2, 422),
    "ScriptExhaustedError": (2, 422),
    "UnknownThreadError": (2, 404),
    "ToolLoadError": (2, 422),
    "AnswerError": (2, 422),
    "TokenError": (2, 403),
    "StoreError": (2, 503),
    "StoreCorruptError": (2, 503),
    "DiskFullError": (2, 503),
    "DatabaseUnavailable": (2, 503),
    "DatabaseGone": (2, 503),
    "StoreLockedError": (4, 503),
    "EncryptionKeyError": (2, 503),
    "ArtifactError": (2, 500),
    "InconsistentRunError": (3, 500),
    "RunBusyError": (4, 409),
    "LeaseLostError": (4, 500),
    "LoopGuardError": (3, 500),
    "InternalError": (70, 500),
    "IllegalTransitionError": (70, 500),
    "IllegalRouteError": (70, 500),
}


def _all_modules() -> list[str]:
    """Every onward module, imported (so an error class anywhere is a subclass we see)."""
    import importlib
    import pkgutil

    names = [
        m.name
        for m in pkgutil.walk_packages(onward.__path__, "onward.")
        if m.name != "onward.__main__"  # runs the CLI
    ]
    for name in names:
        importlib.import_module(name)
    return names


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_every_onward_error_has_its_codes_in_the_table() -> None:
    from onward.errors import OnwardError

    _all_modules()
    ours = {c for c in _subclasses(OnwardError) if c.__module__.startswith("onward")}
    classes = {OnwardError} | ours  # not the subclasses tests make
    assert {c.__name__ for c in classes} == set(ERROR_CODES)
    for cls in classes:
        assert (cls.exit_code, cls.http_status) == ERROR_CODES[cls.__name__], cls.__name__
        assert cls.__module__ == "onward.errors", f"{cls.__name__} belongs in onward.errors"


def test_a_locked_store_says_when_to_try_again() -> None:
    """Busy on the CLI (exit 4), so not a bare 500 from the server: 503 with Retry-After."""
    from onward.errors import StoreLockedError

    locked = StoreLockedError("database is locked")
    assert (locked.exit_code, locked.http_status, locked.retry_after) == (4, 503, 1)


def test_moved_errors_still_import_from_their_old_modules() -> None:
    from onward import errors
    from onward.llm.fake import ScriptExhaustedError
    from onward.llm.models import ModelBlockedError
    from onward.llm.planner import ModelPlanningError
    from onward.model.state import IllegalTransitionError

    assert ScriptExhaustedError is errors.ScriptExhaustedError
    assert ModelBlockedError is errors.ModelBlockedError
    assert ModelPlanningError is errors.ModelPlanningError
    assert IllegalTransitionError is errors.IllegalTransitionError


def test_exception_classes_are_defined_only_in_onward_errors() -> None:
    """A stray ``class X(RuntimeError)`` elsewhere would escape the table: the CLI would
    print a traceback and the server a bare 500. Scanned in the source, and at run time
    (a subclass of a library's exception counts too)."""
    import ast
    import builtins
    from pathlib import Path

    builtin_errors = {
        name
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    root = Path(onward.__file__).parent
    stray = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if bases & builtin_errors:
                    stray.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    assert stray == []

    _all_modules()
    elsewhere = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _subclasses(BaseException)
        if cls.__module__.startswith("onward") and cls.__module__ != "onward.errors"
    )
    assert elsewhere == []
