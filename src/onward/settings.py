"""Every environment variable onward reads, parsed and validated in one place.

| variable | type | default | meaning |
| --- | --- | --- | --- |
| `ONWARD_DB` | text | `sqlite:///.onward/onward.db` | the store (`sqlite:///…`, `postgresql://…`) |
| `ONWARD_AES_KEY` | text | unset: not encrypted | key at rest, read by `onward.store.encryption` |
| `ONWARD_BUSY_TIMEOUT` | duration | 10 s | wait this long for a locked SQLite database |
| `ONWARD_FSYNC` | flag | off | fsync files, SQLite `synchronous=FULL` |
| `ONWARD_PG_POOL_SIZE` | count | 10 | Postgres connections a process holds at most |
| `ONWARD_PG_OUTAGE` | duration | 5 min | how long an unreachable Postgres is waited for |
| `ONWARD_LEASE_TTL` | duration | 30 s | a run's lease lives this long past a heartbeat |
| `ONWARD_HEARTBEAT` | duration | TTL / 3, at most 10 s | between lease heartbeats (< the TTL) |
| `ONWARD_MAX_WAIT` | duration | 60 s | longest retry wait slept in-process |
| `ONWARD_TOOLS` | list | none | tool modules to import (`pkg.mod,path/x.py`) |
| `ONWARD_HTTP_ALLOW` | text | nothing | hosts HTTP tools may reach (`onward.policies.egress`) |
| `ONWARD_MCP` | entries | none | MCP servers whose tools runs use (`name=URL;name=command`) |
| `ONWARD_MCP_COMMANDS` | entries | none | command lines stdio MCP servers may start with |
| `ONWARD_USER` | text | login@host | who decides, for the CLI |
| `ONWARD_SECRET` | text | unset: no tokens | answers need resume tokens signed with it |
| `ONWARD_TOKEN_TTL` | duration | 15 min | how long a resume token is valid |
| `OPENAI_API_KEY` | text | unset: no model | plan and judge with a model |
| `OPENAI_BASE_URL` | text | OpenAI | an OpenAI-compatible server (vLLM, Ollama…) |
| `ONWARD_MODEL` | text | `gpt-4o-mini` | the model: a name, or `provider:name` |
| `ONWARD_PLANNER_MODEL` | text | `ONWARD_MODEL` | the model that plans and replans |
| `ONWARD_STEP_MODEL` | text | `ONWARD_MODEL` | the model of model steps |
| `ONWARD_JUDGE_MODEL` | text | `ONWARD_MODEL` | the model that judges outputs |
| `ONWARD_MODEL_TIMEOUT` | duration | 60 s | limit of one model request |
| `ONWARD_BLOCK_MODEL_REQUESTS` | flag | off | refuse any model but a loopback one (tests) |
| `ONWARD_LOG_PROMPTS` | flag | off | keep prompts in `model_call` events |
| `ONWARD_PRICES` | JSON | built-in table | `{"model": [in, out]}` per million tokens |
| `ONWARD_CONTEXT_TOKENS` | count | 4000 | token budget of a prompt's context |
| `ONWARD_EXECUTION_LOG` | path | unset | test aid: a JSON line per tool call phase |
| `ONWARD_FAULT_TOOL_DELAY` | duration | 0 | test aid: sleep inside every tool call |
| `ONWARD_FAULT_KILL` | text | unset | test aid: `POINT:STEP` or `POINT:*` SIGKILLs |
| `ONWARD_API_TOKENS` | tokens | unset: open | `onward serve`: `tok:user,…` or JSON |
| `ONWARD_CORS_ORIGINS` | list | none | origins `onward serve` allows cross-site |
| `ONWARD_MAX_BODY` | count | 4 MiB | `onward serve`: largest request body, bytes |
| `ONWARD_RUN_SLOTS` | count | 8 | `onward serve`: runs driven at once |
| `ONWARD_USER_RUNS` | count | 4, at most the slots | `onward serve`: runs in flight per user |
| `ONWARD_CRON_TICK` | duration | 5 s | `onward serve`: between looks for crons that are due |

A *duration* is a number of seconds (``0.5``) or a number with a unit: ``90s``, ``30m``,
``6h``, ``1d``, ``2w``. A *flag* is ``1``/``true``/``yes``/``on`` or ``0``/``false``/
``no``/``off``. A *list* is comma-separated; *entries* are separated by ``;`` (they may
hold commas and spaces). An empty value means unset. A value that does
not parse, or is out of range, is a :class:`~onward.errors.UsageError` naming the variable
and what to write, raised wherever onward first needs its settings (opening a store): never a
default silently put in its place.

:func:`settings` parses the environment once per set of values: it is cached by the values
of the variables above, so a test that changes one (``monkeypatch.setenv``) sees the change
at the next call, and every other call costs a few dictionary look-ups.
:meth:`Settings.from_env` parses a given mapping instead (a subprocess's environment).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

from onward.errors import UsageError

DEFAULT_DB = "sqlite:///.onward/onward.db"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_LEASE_TTL = timedelta(seconds=30)
DEFAULT_HEARTBEAT = timedelta(seconds=10)
"""The heartbeat when ``ONWARD_HEARTBEAT`` is unset and the TTL is at least 30 s."""

FAULT_POINTS = frozenset(
    {"after_effect", "after_record", "after_compensate", "after_compensation_record"}
    | {"before_verify", "inside_verify", "after_answers"}
)
"""Where ``ONWARD_FAULT_KILL`` can kill (see :mod:`onward.faults`)."""

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """onward's environment, parsed (the table in this module's docstring). Built directly,
    it is validated the same way, so a test can hand one around."""

    db: str = DEFAULT_DB
    aes_key: str | None = None
    busy_timeout: timedelta = timedelta(seconds=10)
    fsync: bool = False
    pg_pool_size: int = 10
    pg_outage: timedelta = timedelta(minutes=5)
    lease_ttl: timedelta = DEFAULT_LEASE_TTL
    heartbeat: timedelta = DEFAULT_HEARTBEAT
    max_wait: timedelta = timedelta(seconds=60)
    tools: tuple[str, ...] = ()
    http_allow: str = ""
    mcp: tuple[str, ...] = ()
    """MCP servers (``name=target`` entries, :mod:`onward.tools.mcp`)."""
    mcp_commands: tuple[str, ...] = ()
    """Command lines a stdio MCP server's command must start with."""
    user: str | None = None
    secret: str | None = None
    token_ttl: timedelta = timedelta(minutes=15)
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    model: str = DEFAULT_MODEL
    planner_model: str | None = None
    step_model: str | None = None
    judge_model: str | None = None
    model_timeout: timedelta = timedelta(seconds=60)
    block_model_requests: bool = False
    log_prompts: bool = False
    prices: Mapping[str, tuple[float, float]] = field(default_factory=lambda: _EMPTY)
    """Overrides of the built-in price table (:mod:`onward.llm.usage`)."""
    context_tokens: int = 4000
    execution_log: Path | None = None
    fault_tool_delay: timedelta = timedelta(0)
    fault_kill: str | None = None
    api_tokens: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Token → user name for ``onward serve`` (empty: the server is open)."""
    cors_origins: tuple[str, ...] = ()
    max_body: int | None = None
    """None: :mod:`onward.serve.limits`' default (as for the next two)."""
    run_slots: int | None = None
    user_runs: int | None = None
    cron_tick: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        for name, value in (
            ("ONWARD_BUSY_TIMEOUT", self.busy_timeout),
            ("ONWARD_MAX_WAIT", self.max_wait),
            ("ONWARD_FAULT_TOOL_DELAY", self.fault_tool_delay),
        ):
            if value < timedelta(0):
                raise UsageError(f"{name} is {_seconds(value)}; it cannot be negative")
        for name, value in (
            ("ONWARD_LEASE_TTL", self.lease_ttl),
            ("ONWARD_HEARTBEAT", self.heartbeat),
            ("ONWARD_TOKEN_TTL", self.token_ttl),
            ("ONWARD_MODEL_TIMEOUT", self.model_timeout),
            ("ONWARD_CRON_TICK", self.cron_tick),
            ("ONWARD_PG_OUTAGE", self.pg_outage),
        ):
            if value <= timedelta(0):
                raise UsageError(f"{name} is {_seconds(value)}; it must be more than 0")
        if self.heartbeat >= self.lease_ttl:
            raise UsageError(
                f"ONWARD_HEARTBEAT ({_seconds(self.heartbeat)}) must be shorter than "
                f"ONWARD_LEASE_TTL ({_seconds(self.lease_ttl)}), else a live driver's lease "
                "expires between heartbeats; a third of the TTL is a good heartbeat"
            )
        for name, count in (
            ("ONWARD_CONTEXT_TOKENS", self.context_tokens),
            ("ONWARD_PG_POOL_SIZE", self.pg_pool_size),
            ("ONWARD_MAX_BODY", self.max_body),
            ("ONWARD_RUN_SLOTS", self.run_slots),
            ("ONWARD_USER_RUNS", self.user_runs),
        ):
            if count is not None and count < 1:
                raise UsageError(f"{name} is {count}; it must be at least 1")
        if self.fault_kill is not None:
            point, sep, step = self.fault_kill.partition(":")
            if not sep or not step or point not in FAULT_POINTS:
                raise UsageError(
                    f"ONWARD_FAULT_KILL={self.fault_kill!r} names no fault point; write POINT:STEP "
                    f"or POINT:*, POINT one of {', '.join(sorted(FAULT_POINTS))}"
                )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """The settings in ``env`` (variables it lacks, or has empty, take their default)."""
        return _parse(tuple(map(env.get, NAMES)))


def settings() -> Settings:
    """The settings in ``os.environ`` now (parsed once per set of values)."""
    return Settings.from_env(os.environ)


def is_set(name: str) -> bool:
    """Whether the variable has a value (unset or blank is its default): a cheap test for
    hot paths that act only when one variable is set, before :func:`settings` parses it."""
    return bool(os.environ.get(name, "").strip())


@dataclass(frozen=True, slots=True)
class _Variable:
    name: str
    field: str
    parse: Callable[[str, str], Any]
    """(variable name, raw text) → the field's value; a UsageError if it does not parse."""


def _text(name: str, raw: str) -> str:
    return raw


def _flag(name: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in _TRUE | _FALSE:
        return word in _TRUE
    raise UsageError(
        f"{name}={raw!r} is not a flag; write 1 (or true, yes, on) or 0 to turn it off"
    )


def _duration(name: str, raw: str) -> timedelta:
    from onward.policies.durations import parse_duration  # pydantic and yaml: only when one is set

    try:
        return parse_duration(raw, negative_ok=True)  # __post_init__ says which may not be
    except UsageError:
        raise UsageError(
            f"{name}={raw!r} is not a duration; write seconds (30, 0.5) or 90s, 30m, 6h, 1d, 2w"
        ) from None


def _count(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a whole number") from None


def _list(name: str, raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _entries(name: str, raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(";") if item.strip())


def _path(name: str, raw: str) -> Path:
    return Path(raw)


def _prices(name: str, raw: str) -> Mapping[str, tuple[float, float]]:
    try:
        return MappingProxyType(
            {
                str(model): (float(pair[0]), float(pair[1]))
                for model, pair in json.loads(raw).items()
            }
        )
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        raise UsageError(
            f"{name}={raw!r} is not valid: write a JSON object of model → "
            '[input_per_million, output_per_million], e.g. {"my-model": [0.5, 1.5]}'
        ) from None


def _api_tokens(name: str, raw: str) -> Mapping[str, str]:
    """``tok:user,tok2:user2`` or a JSON object of token → user."""
    text = raw.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{name} is not valid JSON ({exc}); use tok:user,tok2:user2") from None
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            raise UsageError(f"{name} must map token strings to user names")
        return MappingProxyType(data)
    found: dict[str, str] = {}
    for pair in text.split(","):
        token, sep, user = pair.strip().partition(":")
        if not sep or not token or not user:
            raise UsageError(f"{name} entry {pair.strip()!r} is not TOKEN:USER")
        found[token] = user
    return MappingProxyType(found)


_VARIABLES = (
    _Variable("ONWARD_DB", "db", _text),
    _Variable("ONWARD_AES_KEY", "aes_key", _text),
    _Variable("ONWARD_BUSY_TIMEOUT", "busy_timeout", _duration),
    _Variable("ONWARD_FSYNC", "fsync", _flag),
    _Variable("ONWARD_PG_POOL_SIZE", "pg_pool_size", _count),
    _Variable("ONWARD_PG_OUTAGE", "pg_outage", _duration),
    _Variable("ONWARD_LEASE_TTL", "lease_ttl", _duration),
    _Variable("ONWARD_HEARTBEAT", "heartbeat", _duration),
    _Variable("ONWARD_MAX_WAIT", "max_wait", _duration),
    _Variable("ONWARD_TOOLS", "tools", _list),
    _Variable("ONWARD_HTTP_ALLOW", "http_allow", _text),
    _Variable("ONWARD_MCP", "mcp", _entries),
    _Variable("ONWARD_MCP_COMMANDS", "mcp_commands", _entries),
    _Variable("ONWARD_USER", "user", _text),
    _Variable("ONWARD_SECRET", "secret", _text),
    _Variable("ONWARD_TOKEN_TTL", "token_ttl", _duration),
    _Variable("OPENAI_API_KEY", "openai_api_key", _text),
    _Variable("OPENAI_BASE_URL", "openai_base_url", _text),
    _Variable("ONWARD_MODEL", "model", _text),
    _Variable("ONWARD_PLANNER_MODEL", "planner_model", _text),
    _Variable("ONWARD_STEP_MODEL", "step_model", _text),
    _Variable("ONWARD_JUDGE_MODEL", "judge_model", _text),
    _Variable("ONWARD_MODEL_TIMEOUT", "model_timeout", _duration),
    _Variable("ONWARD_BLOCK_MODEL_REQUESTS", "block_model_requests", _flag),
    _Variable("ONWARD_LOG_PROMPTS", "log_prompts", _flag),
    _Variable("ONWARD_PRICES", "prices", _prices),
    _Variable("ONWARD_CONTEXT_TOKENS", "context_tokens", _count),
    _Variable("ONWARD_EXECUTION_LOG", "execution_log", _path),
    _Variable("ONWARD_FAULT_TOOL_DELAY", "fault_tool_delay", _duration),
    _Variable("ONWARD_FAULT_KILL", "fault_kill", _text),
    _Variable("ONWARD_API_TOKENS", "api_tokens", _api_tokens),
    _Variable("ONWARD_CORS_ORIGINS", "cors_origins", _list),
    _Variable("ONWARD_MAX_BODY", "max_body", _count),
    _Variable("ONWARD_RUN_SLOTS", "run_slots", _count),
    _Variable("ONWARD_USER_RUNS", "user_runs", _count),
    _Variable("ONWARD_CRON_TICK", "cron_tick", _duration),
)
NAMES = tuple(v.name for v in _VARIABLES)
"""Every variable onward reads, in the order of the docstring's table."""


@functools.lru_cache(maxsize=32)
def _parse(values: tuple[str | None, ...]) -> Settings:
    given = {
        v.field: v.parse(v.name, raw)
        for v, raw in zip(_VARIABLES, values, strict=True)
        if raw is not None and raw.strip()
    }
    if "heartbeat" not in given:
        ttl = given.get("lease_ttl", DEFAULT_LEASE_TTL)
        given["heartbeat"] = min(DEFAULT_HEARTBEAT, ttl / 3)
    return Settings(**given)


def _seconds(value: timedelta) -> str:
    return f"{value.total_seconds():g} s"
