"""onward.settings: every environment variable onward reads, parsed once, validated, with a
UsageError that names the variable and what to write."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import onward
from onward import settings as settings_module
from onward.errors import UsageError
from onward.settings import NAMES, Settings, settings

SRC = Path(onward.__file__).parent

# Modules other work is reshaping: their reads move to onward.settings next.
NOT_YET_FOLDED = ("api.py", "cli", "serve", "client")


def test_the_docstring_table_lists_every_variable_once() -> None:
    doc = settings_module.__doc__ or ""
    rows = re.findall(r"^\| `([A-Z_]+)` \|", doc, flags=re.MULTILINE)
    assert rows == list(NAMES)


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    s = Settings.from_env({})
    assert s == Settings()
    assert s.db == "sqlite:///.onward/onward.db"
    assert (s.lease_ttl, s.heartbeat) == (timedelta(seconds=30), timedelta(seconds=10))
    assert (s.busy_timeout, s.max_wait) == (timedelta(seconds=10), timedelta(seconds=60))
    assert s.token_ttl == timedelta(minutes=15)
    assert (s.fsync, s.block_model_requests, s.log_prompts) == (False, False, False)
    assert (s.model, s.context_tokens, s.tools, s.prices) == ("gpt-4o-mini", 4000, (), {})
    assert (s.secret, s.openai_api_key, s.fault_kill, s.execution_log) == (None,) * 4


def test_values_are_parsed_to_their_types() -> None:
    s = Settings.from_env(
        {
            "ONWARD_LEASE_TTL": "0.5",
            "ONWARD_HEARTBEAT": "0.1",
            "ONWARD_TOKEN_TTL": "2m",
            "ONWARD_MAX_WAIT": "0",
            "ONWARD_FSYNC": "true",
            "ONWARD_LOG_PROMPTS": "1",
            "ONWARD_TOOLS": "my_tools, ./more.py,",
            "ONWARD_PRICES": '{"m": [0.5, 1.5]}',
            "ONWARD_CONTEXT_TOKENS": "800",
            "ONWARD_EXECUTION_LOG": "/tmp/log.jsonl",
            "ONWARD_API_TOKENS": "tok-a:alice,tok-b:bob",
            "ONWARD_CORS_ORIGINS": "http://a.example, http://b.example",
            "ONWARD_RUN_SLOTS": "3",
        }
    )
    assert (s.lease_ttl, s.heartbeat) == (timedelta(seconds=0.5), timedelta(seconds=0.1))
    assert (s.token_ttl, s.max_wait) == (timedelta(minutes=2), timedelta(0))
    assert (s.fsync, s.log_prompts) == (True, True)
    assert s.tools == ("my_tools", "./more.py")
    assert s.prices == {"m": (0.5, 1.5)}
    assert (s.context_tokens, s.execution_log) == (800, Path("/tmp/log.jsonl"))
    assert s.api_tokens == {"tok-a": "alice", "tok-b": "bob"}
    assert s.cors_origins == ("http://a.example", "http://b.example")
    assert (s.run_slots, s.max_body) == (3, None)
    assert Settings.from_env({"ONWARD_API_TOKENS": '{"t": "u"}'}).api_tokens == {"t": "u"}


def test_the_heartbeat_defaults_to_a_third_of_a_short_ttl() -> None:
    assert Settings.from_env({"ONWARD_LEASE_TTL": "0.6"}).heartbeat == timedelta(seconds=0.2)
    assert Settings.from_env({"ONWARD_LEASE_TTL": "5m"}).heartbeat == timedelta(seconds=10)


def test_an_empty_value_means_unset() -> None:
    assert Settings.from_env({"ONWARD_DB": "", "ONWARD_BUSY_TIMEOUT": " "}) == Settings()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ONWARD_LEASE_TTL": "soon"}, r"ONWARD_LEASE_TTL='soon' is not a duration; write sec"),
        ({"ONWARD_BUSY_TIMEOUT": "-1"}, r"ONWARD_BUSY_TIMEOUT is -1 s; it cannot be negative"),
        ({"ONWARD_FAULT_TOOL_DELAY": "inf"}, r"ONWARD_FAULT_TOOL_DELAY='inf' is not a duration"),
        ({"ONWARD_TOKEN_TTL": "0"}, r"ONWARD_TOKEN_TTL is 0 s; it must be more than 0"),
        ({"ONWARD_MODEL_TIMEOUT": "nan"}, r"ONWARD_MODEL_TIMEOUT='nan' is not a duration"),
        (
            {"ONWARD_LEASE_TTL": "1", "ONWARD_HEARTBEAT": "1"},
            r"ONWARD_HEARTBEAT \(1 s\) must be shorter than ONWARD_LEASE_TTL \(1 s\)",
        ),
        ({"ONWARD_FSYNC": "maybe"}, r"ONWARD_FSYNC='maybe' is not a flag; write 1"),
        ({"ONWARD_CONTEXT_TOKENS": "4k"}, r"ONWARD_CONTEXT_TOKENS='4k' is not a whole number"),
        ({"ONWARD_RUN_SLOTS": "0"}, r"ONWARD_RUN_SLOTS is 0; it must be at least 1"),
        ({"ONWARD_PRICES": '{"m": 0.15}'}, r"ONWARD_PRICES=.* is not valid: write a JSON"),
        ({"ONWARD_API_TOKENS": "tok-only"}, r"ONWARD_API_TOKENS entry 'tok-only' is not TOKEN"),
        ({"ONWARD_FAULT_KILL": "after_efect:pay"}, r"names no fault point; write POINT:STEP"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_the_variable(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        Settings.from_env(env)


def test_settings_built_directly_are_validated_too() -> None:
    with pytest.raises(UsageError, match="ONWARD_MAX_WAIT is -5 s"):
        Settings(max_wait=timedelta(seconds=-5))


def test_settings_are_parsed_once_and_follow_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ONWARD_CONTEXT_TOKENS", "1234")
    first = settings()
    assert first is settings()  # cached: the same values are not parsed again
    assert first.context_tokens == 1234
    monkeypatch.setenv("ONWARD_CONTEXT_TOKENS", "99")
    assert settings().context_tokens == 99  # a changed value is seen at the next call
    monkeypatch.delenv("ONWARD_CONTEXT_TOKENS")
    assert settings().context_tokens == 4000


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(AttributeError):
        s.db = "sqlite:///elsewhere.db"  # type: ignore[misc]


def test_a_bad_value_stops_the_cli_with_exit_2_and_says_which(run_cli: Any) -> None:
    result = run_cli("list", env={"ONWARD_LEASE_TTL": "-3"})
    assert result.code == 2
    assert "ONWARD_LEASE_TTL is -3 s; it must be more than 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_only_onward_settings_reads_the_environment() -> None:
    """Each variable has one parser, one default and one place it is documented."""
    readers = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel == Path("settings.py") or rel.parts[0].startswith(NOT_YET_FOLDED):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")) or (
                isinstance(node, ast.Name) and node.id in ("environ", "getenv")
            ):
                readers.append(f"{rel}:{node.lineno}")
    assert readers == []
