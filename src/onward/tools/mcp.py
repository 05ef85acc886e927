"""MCP tools: the tools of a Model Context Protocol server as onward tools.

A server is named and given by one entry, ``NAME=TARGET``: ``TARGET`` is a streamable-HTTP
URL (``files=http://127.0.0.1:8123/mcp``) or a command line that starts a stdio server
(``files=python /srv/files_server.py``). Entries come from ``--mcp`` (``onward run``,
``submit``, ``resume``), ``ONWARD_MCP`` (``;``-separated; what ``onward serve`` and
``onward worker`` read), a serve assistant's ``mcp`` (:mod:`onward.serve.assistants`) or
the Python API (``Onward(tool_modules=[onward.mcp_server("files", ...)])``); a JSON file in
the common ``{"mcpServers": {...}}`` shape holds several. A run keeps its servers with its tool
modules, as ``mcp:NAME=TARGET`` refs, so a resumed run (a new process) connects again.

Who may be reached is the operator's: an HTTP server's URL goes through the egress policy
(``ONWARD_HTTP_ALLOW``), and a stdio server's command line must start with one of the
command lines in ``ONWARD_MCP_COMMANDS`` (``;``-separated, e.g. ``npx -y
@modelcontextprotocol/server-filesystem;/usr/bin/python3 /srv/files_server.py``). Anything
else is refused with a :class:`~onward.errors.ToolLoadError` that says what to allow, and
nothing is started. Over ``onward serve`` a run's tool modules are the server's
configuration only, so a chat user can never name a server, let alone a command.

Each tool registers as ``mcp__<server>__<tool>`` (the characters every model provider
accepts in a tool name), so it cannot shadow a built-in or a user's tool. Its input
schema becomes the step's args schema (unknown args refused; a schema onward cannot check
is passed to the server as it is), and its annotations give its side-effect class:
``readOnlyHint`` → ``pure``; ``idempotentHint`` → ``idempotent`` (the ledger's key makes
re-running it safe), asking a person first unless ``destructiveHint`` is false; anything
else, an unannotated tool included, → ``unsafe``: a person approves each call and the
ledger makes it happen at most once. A result with ``isError`` is a deterministic failure
(its text the finding); a lost connection or a call past its timeout is transient. The
output is the result's structured content, else its text; like every step output it
reaches a model only fenced, as data.

Sessions are one per server and process, opened when a run's tools are loaded (the
driver's first node) and shared by every call (never one per call): a stdio server's
process lives as long as its driver's, and stops with it (:func:`close_servers`, also
called at exit; a killed driver's server sees its stdin close and exits). A resumed run
(a new driver) starts it again. A server that went away during the run (its process
killed, an HTTP server restarted) does not fail the run: the call that finds the
connection closed marks the session lost, and the session is opened again (the stdio
server started again, after the policy allows it again). A read-only or idempotent tool's
call is then sent again at once on the new session (safe to repeat: the same
idempotency key goes in its ``_meta``); an unsafe tool's fails as transient, its outcome
unknown, and the effect protocol's rules for its class decide (its retry reconnects).
The SDK is async; a session lives on its own event-loop thread, and a tool call (on the
step's thread) waits for its answer there.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import shlex
import shutil
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from onward.errors import DeterministicToolError, ToolLoadError, TransientToolError
from onward.model.state import SideEffect
from onward.settings import settings
from onward.tools.registry import Registry, ToolContext, ToolSpec, default_registry, spec_of
from onward.tools.schemas import model_from_schema

REF_PREFIX = "mcp:"
"""How a run's tool modules hold an MCP server: ``mcp:NAME=TARGET``."""
SEPARATOR = "__"
"""Between ``mcp``, the server's name and the tool's in a registered tool's name."""
CONNECT_TIMEOUT = 30.0
"""Seconds a server has to start and list its tools."""
CALL_TIMEOUT = 300.0
"""A call's timeout (each tool's ``timeout``, and what onward waits for its answer)."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,39}")
_TOOL_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_INSTALL = "MCP tools need the mcp package: pip install 'onward[mcp]'"


@dataclass(frozen=True, slots=True)
class MCPServer:
    """One MCP server: a name and where it is (``url``) or how to start it (``command``)."""

    name: str
    url: str | None = None
    command: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ToolLoadError(
                f"MCP server name {self.name!r} is not valid: use letters, digits and '-' "
                "(at most 40), e.g. files or web-search"
            )
        if (self.url is None) == (not self.command):
            raise ToolLoadError(f"MCP server {self.name!r}: give a URL or a command, not both")

    @property
    def ref(self) -> str:
        """The tool-module ref a run keeps (``mcp:NAME=TARGET``)."""
        return f"{REF_PREFIX}{self.name}={self.target}"

    @property
    def target(self) -> str:
        return self.url if self.url is not None else shlex.join(self.command)

    @property
    def prefix(self) -> str:
        """What each of its tools' registered names starts with."""
        return f"mcp{SEPARATOR}{self.name}{SEPARATOR}"


def mcp_server(name: str, target: str | Sequence[str]) -> str:
    """The ref of an MCP server for ``Onward(tool_modules=[...])``: ``target`` is an
    ``http(s)://`` URL or a command (a string, split like a shell's, or a list).
    File paths in the command are made absolute, so a resumed run finds them."""
    if isinstance(target, str):
        return parse(f"{name}={target}").ref
    return _normal(MCPServer(name, command=tuple(target))).ref


def is_ref(ref: str) -> bool:
    return ref.startswith(REF_PREFIX)


def parse(entry: str) -> MCPServer:
    """``NAME=TARGET`` (or a ref, ``mcp:NAME=TARGET``) as a server, paths made absolute."""
    text = entry.strip().removeprefix(REF_PREFIX)
    name, sep, target = text.partition("=")
    target = target.strip()
    if not sep or not target:
        raise ToolLoadError(
            f"MCP server {entry!r} is not NAME=TARGET; write e.g. "
            "files=http://127.0.0.1:8123/mcp or files='python files_server.py'"
        )
    if re.match(r"(?i)https?://", target):
        return MCPServer(name.strip(), url=target)
    try:
        command = tuple(shlex.split(target))
    except ValueError as exc:
        raise ToolLoadError(f"MCP server {name!r}: its command {target!r}: {exc}") from None
    return _normal(MCPServer(name.strip(), command=command))


def refs_of(entries: Iterable[str]) -> list[str]:
    """Refs of ``--mcp`` / ``ONWARD_MCP`` values: ``NAME=TARGET`` entries or JSON files
    in the ``{"mcpServers": {NAME: {"command": ..., "args": [...]} | {"url": ...}}}`` shape."""
    refs: list[str] = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        if "=" not in entry and entry.endswith(".json"):
            refs.extend(s.ref for s in _from_file(Path(entry)))
        else:
            refs.append(parse(entry).ref)
    return refs


def refs_from_env() -> list[str]:
    """The servers of ``ONWARD_MCP``, as refs."""
    return refs_of(settings().mcp)


def _from_file(path: Path) -> list[MCPServer]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ToolLoadError(f"cannot read MCP servers from {path}: {exc}") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ToolLoadError(f'{path}: write {{"mcpServers": {{NAME: {{...}}}}}}')
    found = []
    for name, spec in servers.items():
        if not isinstance(spec, dict) or not (spec.get("url") or spec.get("command")):
            raise ToolLoadError(f"{path}: server {name!r} needs a url or a command (and args)")
        if spec.get("url"):
            found.append(MCPServer(str(name), url=str(spec["url"])))
            continue
        args = spec.get("args") or []
        if not isinstance(args, list):
            raise ToolLoadError(f"{path}: server {name!r}: args must be a list")
        command = (str(spec["command"]), *map(str, args))
        found.append(_normal(MCPServer(str(name), command=command)))
    return found


def _normal(server: MCPServer) -> MCPServer:
    """Relative paths of existing files in a command made absolute (as ``--tools`` files)."""
    if not server.command:
        return server
    words = []
    for word in server.command:
        is_path = os.sep in word or word.endswith((".py", ".js"))
        # absolute, not resolved: a venv's python is a symlink that must stay the venv's
        words.append(os.path.abspath(word) if is_path and Path(word).exists() else word)
    return MCPServer(server.name, command=tuple(words))


# ----------------------------------------------------------------------------- the policy


def check_allowed(server: MCPServer) -> None:
    """Refuse a server the operator did not allow (a ToolLoadError saying what would
    allow it): an HTTP URL outside the egress policy, a command no allowed one begins."""
    if server.url is not None:
        from onward.policies.egress import policy_from_env

        try:
            policy_from_env().check(server.url, method="MCP")
        except DeterministicToolError as exc:
            raise ToolLoadError(
                f"MCP server {server.name!r} is not allowed: {exc}"
                + (f"; {exc.hint}" if exc.hint else "")
            ) from None
        return
    allowed = [_words(line) for line in settings().mcp_commands]
    words = _words(shlex.join(server.command))
    if not any(a and words[: len(a)] == a for a in allowed):
        raise ToolLoadError(
            f"MCP server {server.name!r} is not allowed: its command {server.target!r} does "
            "not start with a command line in ONWARD_MCP_COMMANDS; add it there (entries "
            "separated by ';') if this server may be started"
        )


def _words(line: str) -> list[str]:
    """A command line as compared: the program as found on PATH, paths absolute."""
    try:
        words = shlex.split(line)
    except ValueError:
        return []
    if not words:
        return []
    program = shutil.which(words[0]) or words[0]
    return [os.path.abspath(program), *_normal(MCPServer("x", command=tuple(words))).command[1:]]


# ----------------------------------------------------------------------------- sessions


@dataclass(eq=False)
class _Session:
    """One connected server: its event-loop thread, the SDK's client, its tools."""

    server: MCPServer
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    tools: list[Any] = field(default_factory=list)
    client: Any = None
    stop: asyncio.Event | None = None
    ended: Future[None] = field(default_factory=Future)
    lost: bool = False
    """A call found its connection closed: the next call opens a new session."""

    def open(self) -> None:
        ready: Future[None] = Future()
        thread = threading.Thread(
            target=self._run, args=(ready,), name=f"mcp-{self.server.name}", daemon=True
        )
        thread.start()
        try:
            ready.result(CONNECT_TIMEOUT)
        except FutureTimeout:
            self.close()
            raise ToolLoadError(
                f"MCP server {self.server.name!r} did not answer within {CONNECT_TIMEOUT:g} s"
            ) from None
        except ToolLoadError:
            raise
        except BaseException as exc:
            raise ToolLoadError(
                f"MCP server {self.server.name!r} ({self.server.target}) could not be "
                f"started: {_reason(exc)}"
            ) from None

    def _run(self, ready: Future[None]) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main(ready))
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
        finally:
            if not self.ended.done():
                self.ended.set_result(None)
            self.loop.close()

    async def _main(self, ready: Future[None]) -> None:
        from mcp import Client, StdioServerParameters

        server = self.server
        target: Any = server.url
        if target is None:
            target = StdioServerParameters(command=server.command[0], args=list(server.command[1:]))
        self.stop = asyncio.Event()
        async with Client(target, read_timeout_seconds=CALL_TIMEOUT) as client:
            self.client = client
            self.tools = await _list_tools(client)
            ready.set_result(None)
            await self.stop.wait()

    @property
    def alive(self) -> bool:
        return not self.lost and not self.ended.done() and self.client is not None

    def call(self, name: str, args: dict[str, Any], meta: dict[str, Any], timeout: float) -> Any:
        if not self.alive:
            raise TransientToolError(f"MCP server {self.server.name!r} is not connected")
        coro = self.client.call_tool(name, args, meta=meta or None)
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TransientToolError(  # sent and not answered: it may have acted
                f"MCP tool {name!r} of {self.server.name!r} did not answer within {timeout:g} s",
                maybe_happened=True,
            ) from None
        except Exception as exc:
            self.lost = self.lost or _closed(exc)
            raise TransientToolError(  # sent on a live session: it may have acted
                f"MCP tool {name!r} of {self.server.name!r}: {_reason(exc)}",
                maybe_happened=True,
            ) from exc

    def close(self) -> None:
        stop = self.stop
        if stop is not None and not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # its loop ended meanwhile
                return
            with contextlib.suppress(FutureTimeout):
                self.ended.result(10.0)


async def _list_tools(client: Any) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _closed(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection to the server is gone."""
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return isinstance(exc, MCPError) and exc.error.code == CONNECTION_CLOSED


def _reason(exc: BaseException) -> str:
    """An exception's message, looking inside the task groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


_sessions: dict[MCPServer, _Session] = {}
_lock = threading.Lock()


def session(server: MCPServer) -> _Session:
    """The process's session with ``server``, connected (again, if it was lost) after
    the policy allowed it."""
    with _lock:
        found = _sessions.get(server)
        if found is not None and found.alive:
            return found
        if found is not None:  # lost: its loop ends, and a stdio server with it
            del _sessions[server]
            found.close()
        check_allowed(server)
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise ToolLoadError(_INSTALL) from None
        made = _Session(server)
        made.open()
        _sessions[server] = made
        return made


def close_servers() -> None:
    """Stop every MCP session of this process (a stdio server's process ends with it)."""
    with _lock:
        sessions = list(_sessions.values())
        _sessions.clear()
    for s in sessions:
        s.close()


atexit.register(close_servers)


# ----------------------------------------------------------------------------- tools


def load_server(ref: str, registry: Registry | None = None) -> list[ToolSpec]:
    """Connect to the server of ``ref`` (if the policy allows it) and register its tools."""
    server = parse(ref)
    found = session(server)
    return [register_tool(server, t, registry) for t in found.tools]


def side_effect_of(annotations: Any) -> tuple[SideEffect, frozenset[str]]:
    """An MCP tool's annotations as onward's side-effect class and tags: read-only is
    pure; idempotent is idempotent (tagged ``overwrite``, so a person approves it, unless
    it says it is not destructive); anything else is unsafe."""
    if annotations is None:
        return SideEffect.UNSAFE, frozenset()
    if annotations.read_only_hint is True:
        return SideEffect.PURE, frozenset()
    if annotations.idempotent_hint is True:
        tags = frozenset() if annotations.destructive_hint is False else frozenset({"overwrite"})
        return SideEffect.IDEMPOTENT, tags
    return SideEffect.UNSAFE, frozenset()


def register_tool(server: MCPServer, mcp_tool: Any, registry: Registry | None = None) -> ToolSpec:
    side_effect, tags = side_effect_of(mcp_tool.annotations)
    name = server.prefix + _TOOL_CHARS.sub("_", mcp_tool.name)
    description = (mcp_tool.description or mcp_tool.title or "").strip().splitlines()
    spec = spec_of(
        name=name,
        fn=MCPCall(
            server,
            mcp_tool.name,
            _unwraps(mcp_tool.output_schema),
            resend=side_effect is not SideEffect.UNSAFE,
        ),
        args_model=_args_model(name, mcp_tool.input_schema),
        description=(description[0] if description else "") + f" (MCP server {server.name})",
        side_effect=side_effect,
        timeout=CALL_TIMEOUT,
        tags=tags | {"mcp"},
        wants_context=True,
        service=f"mcp:{server.name}",
    )
    return (registry or default_registry).register(spec)


def _args_model(name: str, schema: Mapping[str, Any] | None) -> type[BaseModel]:
    """The tool's input schema with unknown args refused; a schema onward cannot check
    (``$ref``, ``allOf``...) takes any args, and the server checks them."""
    try:
        return model_from_schema(f"{name}_args", {**(schema or {}), "additionalProperties": False})
    except ValueError:
        return create_model(f"{name}_args", __config__=ConfigDict(extra="allow"))


def _unwraps(output_schema: Mapping[str, Any] | None) -> bool:
    """Whether the server wraps a plain result as ``{"result": ...}`` (the SDK's way)."""
    props = (output_schema or {}).get("properties")
    return isinstance(props, dict) and list(props) == ["result"]


@dataclass(frozen=True, slots=True)
class MCPCall:
    """A registered MCP tool's implementation: ``tools/call`` on the process's session,
    with onward's call details in the request's ``_meta``."""

    server: MCPServer
    tool: str
    unwrap: bool = False
    resend: bool = False
    """Safe to send again on a new session when the connection was lost (read-only or
    idempotent)."""

    def __call__(self, ctx: ToolContext, **args: Any) -> Any:
        meta = {"onward/thread_id": ctx.thread_id, "onward/step_id": ctx.step_id}
        if ctx.idempotency_key is not None:
            meta["onward/idempotency_key"] = ctx.idempotency_key
        connected = self._session()
        try:
            result = connected.call(self.tool, args, meta, CALL_TIMEOUT)
        except TransientToolError:
            if not (connected.lost and self.resend):
                raise
            result = self._session().call(self.tool, args, meta, CALL_TIMEOUT)
        return output_of(result, self.tool, self.unwrap)

    def _session(self) -> _Session:
        try:
            return session(self.server)
        except ToolLoadError as exc:
            raise TransientToolError(str(exc)) from None


def output_of(result: Any, tool: str, unwrap: bool = False) -> Any:
    """A ``CallToolResult`` as a step's output, or the deterministic failure it reports."""
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    if result.is_error:
        raise DeterministicToolError(
            f"MCP tool {tool!r} failed: {' '.join(texts) or 'no reason given'}"
        )
    structured = result.structured_content
    if structured is not None:
        if unwrap and isinstance(structured, dict) and list(structured) == ["result"]:
            return structured["result"]
        return structured
    others = [c.model_dump(mode="json", exclude_none=True) for c in result.content]
    if len(texts) == len(others):
        return texts[0] if len(texts) == 1 else texts
    return others
