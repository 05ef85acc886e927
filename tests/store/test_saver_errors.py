"""The checkpoint saver's calls map driver errors exactly as every other statement of the
store does (``translate_errors``): ``_map_saver_errors`` spells the mapping out rather
than entering the context manager on each call, so the two are compared here."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

from onward.store.database import _map_saver_errors
from onward.store.sql import Backend, translate_errors

WHERE = "the store"

ERRORS: list[BaseException] = [
    sqlite3.OperationalError("database or disk is full"),
    sqlite3.OperationalError("database is locked"),
    sqlite3.DatabaseError("file is not a database"),
    psycopg.OperationalError("connection refused"),
    psycopg.errors.DiskFull("no space left on device"),
    ValueError("not a driver error"),
    KeyboardInterrupt(),
]


class _Saver:
    """The saver calls ``_map_saver_errors`` wraps, each raising ``error``."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        if self.error is not None:
            raise self.error
        return (args, kwargs)

    put = put_writes = flush = get_tuple = delete_thread = _call

    def list(self, *args: Any, **kwargs: Any) -> Any:
        yield self._call(*args, **kwargs)


def _expected(backend: Backend, error: BaseException) -> BaseException:
    try:
        with translate_errors(backend, WHERE):
            raise error
    except BaseException as exc:
        return exc
    raise AssertionError("translate_errors swallowed the error")


@pytest.mark.parametrize("backend", list(Backend))
@pytest.mark.parametrize("error", ERRORS, ids=repr)
@pytest.mark.parametrize("method", ["put", "put_writes", "flush", "get_tuple", "delete_thread"])
def test_a_saver_call_maps_an_error_as_translate_errors_does(
    backend: Backend, error: BaseException, method: str
) -> None:
    saver = _Saver(error)
    _map_saver_errors(saver, backend, WHERE)  # type: ignore[arg-type]
    expected = _expected(backend, error)
    with pytest.raises(type(expected)) as caught:
        getattr(saver, method)("config", key="value")
    assert type(caught.value) is type(expected)
    assert str(caught.value) == str(expected)
    assert caught.value.__cause__ is expected.__cause__
    # a mapped error is a new StoreError; anything else goes through as it was raised
    assert (caught.value is error) is (expected is error)


@pytest.mark.parametrize("backend", list(Backend))
def test_a_saver_call_that_succeeds_returns_what_the_saver_returned(backend: Backend) -> None:
    saver = _Saver(None)
    _map_saver_errors(saver, backend, WHERE)  # type: ignore[arg-type]
    assert saver.put("config", key="value") == (("config",), {"key": "value"})
    assert list(saver.list("config")) == [(("config",), {})]
