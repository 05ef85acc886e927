"""Shared fixtures: a fresh work directory and store per test, and a CLI runner
that starts real ``onward`` processes (crash tests kill those)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from onward import Onward
from tests.support.common import BACKENDS, cli_runner, postgres_schema


@pytest.fixture(autouse=True)
def no_real_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real model provider: only loopback servers and fakes."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ONWARD_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ONWARD_BLOCK_MODEL_REQUESTS", "1")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wd = tmp_path / "work"
    wd.mkdir()
    monkeypatch.chdir(wd)
    monkeypatch.delenv("ONWARD_DB", raising=False)
    monkeypatch.delenv("ONWARD_TOOLS", raising=False)
    return wd


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """For tests about SQLite files themselves (corrupt or locked files, file bytes)."""
    return f"sqlite:///{tmp_path / 'store' / 'onward.db'}"


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'onward.db'}"
        return
    with postgres_schema() as url:
        yield url


@pytest.fixture
def ow(db_url: str, workdir: Path) -> Iterator[Onward]:
    with Onward(db_url) as client:
        yield client


@pytest.fixture
def run_cli(workdir: Path, db_url: str):  # type: ignore[no-untyped-def]
    """Run ``onward ARGS`` in a new (forked) process with --db pointing at this test's store."""
    return cli_runner(workdir, db_url)


# -- the drawn graph is the graph that runs ------------------------------------------------

_TRACE_ENV = "ONWARD_TEST_ROUTE_TRACE"


def pytest_configure(config: pytest.Config) -> None:
    """The controller picks a directory where each worker leaves the transitions it saw
    (workers inherit the variable)."""
    if not hasattr(config, "workerinput") and _TRACE_ENV not in os.environ:
        import tempfile

        os.environ[_TRACE_ENV] = tempfile.mkdtemp(prefix="onward-routes-")


_SEEN: dict[tuple[str, str], str] = {}
"""Each transition a test's run took, with the first test that took it."""


@pytest.fixture(autouse=True)
def _trace_routes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if os.environ.get(_TRACE_ENV) == "off":  # to measure what the tracing costs
        return
    from tests.support.route_trace import transitions_under

    for edge in transitions_under(tmp_path):
        _SEEN.setdefault(edge, request.node.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Every transition a test's run took must be a drawn edge, and when the whole suite
    ran, every drawn edge must have been taken by a test (tests/unit/test_graph_edges.py takes
    the rare ones); else the session fails. Both sides come from the route table."""
    from tests.support.route_trace import load, save

    if os.environ.get(_TRACE_ENV) == "off":
        return
    directory = Path(os.environ[_TRACE_ENV])
    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    save(directory / f"{worker}.json", _SEEN)
    if hasattr(session.config, "workerinput"):
        return
    from onward.graph.routes import EDITED, drawn_edges

    seen, drawn = load(directory), drawn_edges()
    problems = [
        f"taken but not drawn: {a} → {b} (by {seen[a, b]})" for a, b in sorted(seen.keys() - drawn)
    ]
    whole = not session.config.option.keyword and not session.config.option.markexpr
    whole = whole and session.config.args == session.config.getini("testpaths")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if whole and exitstatus == 0:
        # Only when the whole suite ran and passed: a part of it takes only some edges.
        untaken = sorted(drawn - seen.keys() - EDITED)
        problems += [f"drawn but no test took it: {a} → {b}" for a, b in untaken]
    if problems:
        if reporter is not None:
            reporter.write_line("the graph's drawing and its runs disagree:", red=True)
            for line in problems:
                reporter.write_line(f"  {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
