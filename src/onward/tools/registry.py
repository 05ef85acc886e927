"""Tool specs, the ``@tool`` decorator and the registry plans are validated against."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, create_model

from onward.errors import ToolLoadError
from onward.model.state import SideEffect, StepFailure
from onward.policies import confine
from onward.policies.durations import as_duration
from onward.policies.retry import RetryPolicy
from onward.policies.run import Deadline
from onward.settings import settings
from onward.store.breakers import BreakerPolicy
from onward.verification.checks import Check

if TYPE_CHECKING:
    from onward.llm.stepmodel import StepModel
    from onward.llm.toolloop import StepTools
    from onward.store.artifacts import ArtifactStore

# Verbs that make a tool dangerous enough to need a human by default (used by approvals).
DANGEROUS_TAGS = frozenset({"delete", "overwrite", "send", "pay", "publish"})


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """What a tool may know about the call it is serving."""

    thread_id: str
    """The run's thread id."""
    step_id: str
    """The plan step being executed."""
    attempt: int
    """1 for the first execution of the step, 2 for the next, ..."""
    workdir: Path
    """The run's work directory; relative paths in args resolve against it."""
    idempotency_key: str | None = None
    """Stable key for this logical effect (set for non-pure tools)."""
    confined: bool = False
    """Paths must stay inside ``workdir`` (the run's policy ``confine_paths``)."""
    artifacts: ArtifactStore | None = None
    """The run's artifact store, for a tool whose output is too big for one body: it
    writes rows in chunks (``put_rows``) and its consumers stream them (``rows``).
    None when a tool is called directly (then such a tool returns plain lists)."""
    model: StepModel | None = None
    """The run's chat model as a step calls it (``ctx.model.ask(messages, schema,
    purpose=...)``: onward's ask_json, its usage counted in the run's); None when the run
    has no model or the tool is called directly. onward's model steps use it."""
    previous: Previous | None = None
    """The step's last attempt when the verifier failed its output (its checks, its
    schema or the judge): that output and the findings, so a retry can do better. None on
    a first attempt and after a failure that produced no output."""
    tools: StepTools | None = None
    """For a tool whose spec says ``calls_tools`` (a tool-calling step): the run's tools as
    the step may call them, through execute's protocol (ledger, timeouts, breakers) and the
    run's policy. None for every other tool."""

    def path(self, p: str | os.PathLike[str]) -> Path:
        """Where arg ``p`` is; a confined run refuses one outside ``workdir``
        (onward.policies.confine)."""
        return confine.locate(self.workdir, p, confined=self.confined)

    def glob(self, directory: Path, pattern: str) -> list[Path]:
        """``directory.glob(pattern)`` sorted, under the same rule
        (onward.policies.confine.glob)."""
        return confine.glob(self.workdir, directory, pattern, confined=self.confined)


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What a ``reconcile`` probe found out about an effect whose outcome was unknown."""

    happened: bool
    """True: the effect took place (``result`` is its result). False: it did not, so it is
    safe to perform it now."""
    result: Any = None


@dataclass(frozen=True, slots=True)
class Previous:
    """A step's previous output and what the verifier found wrong with it."""

    findings: tuple[str, ...]
    """The verifier's findings (checks, output contract, judge), in its words."""
    load: Callable[[], Any]
    """Reads the previous output from the artifact store (only when asked)."""

    def output(self) -> Any:
        return self.load()


Reconcile = Callable[[str, Any], Reconciled]
"""``reconcile(idempotency_key, args) -> Reconciled``; raise if it still cannot tell."""
Compensate = Callable[[str, Any, Any], Any]
"""``compensate(idempotency_key, args, result)``: undo a completed effect (saga)."""
FixArgs = Callable[[dict[str, Any], StepFailure], dict[str, Any] | None]
"""``fix_args(args, failure) -> new args | None``: a rule that repairs args after a
deterministic or validation failure (the replan node tries it before a fallback tool)."""
ServiceOf = Callable[[dict[str, Any]], str | None]
"""``service_of(args) -> service name | None``, for tools whose service depends on args."""
OutputFindings = Callable[[dict[str, Any], Any], list[str]]
"""``output_findings(args, output) -> findings``: the tool's own contract on an output,
given the step's args as written (a model step's output schema); verify applies it before
the checks, and a finding fails the step as ``validation``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """A registered tool. Frozen: a run's behaviour must not change under it."""

    name: str
    """Unique name plans use in ``tool:``."""
    fn: Callable[..., Any]
    """The implementation; called with validated args as keywords (and ``ctx`` if declared)."""
    args_model: type[BaseModel]
    """Pydantic model the step's args must validate against."""
    description: str = ""
    """One line for humans and planners."""
    side_effect: SideEffect = SideEffect.PURE
    """pure: safe to re-run; idempotent: re-running with the same key is safe; unsafe: neither."""
    timeout: timedelta | None = timedelta(minutes=5)
    """How long before the call is abandoned and the step fails as transient (None: never)."""
    checks: tuple[Check, ...] = ()
    """Default checks applied to every step that uses this tool."""
    tags: frozenset[str] = field(default_factory=frozenset)
    """Verbs such as delete / send / pay; dangerous ones require approval by default."""
    wants_context: bool = False
    """Whether ``fn`` takes a ``ctx: ToolContext`` keyword."""
    reconcile: Reconcile | None = None
    """For unsafe tools: find out whether an interrupted effect happened (else a human must)."""
    compensate: Compensate | None = None
    """Undo a completed effect; run in reverse order when a run is cancelled with
    ``--compensate``, through the ledger (at most once per effect). Must be idempotent: a
    crash mid-compensation calls it again with the same key."""
    deadline: Deadline | None = None
    """How long an approval of this tool may wait (else the run's policy decides)."""
    retry: RetryPolicy | None = None
    """Backoff for transient failures (a step's own ``retry`` wins; else the default)."""
    retry_on: tuple[type[BaseException], ...] = ()
    """Exception types this tool's transient failures raise (besides the defaults)."""
    service: str | ServiceOf | None = None
    """The service this tool calls (or a function of the args naming it): its circuit
    breaker is shared by every run on the store."""
    breaker: BreakerPolicy | None = None
    """When the service's breaker opens and recovers (default BreakerPolicy())."""
    max_concurrent: int | None = None
    """At most this many calls to the service at once in one process."""
    fallback: str | None = None
    """Tool to use instead after a deterministic or validation failure (rules replanner)."""
    fix_args: FixArgs | None = None
    """Rule that repairs the args after a deterministic or validation failure."""
    output_findings: OutputFindings | None = None
    """The tool's own contract on its output, given the step's args (verify applies it
    first, like a default check whose terms the args give)."""
    calls_tools: bool = False
    """The tool calls other tools itself (a tool-calling step): execute hands it the run's
    policy and ``ctx.tools``, and runs it on the step's own thread (it may wait for a person
    inside, as an interrupt)."""

    def service_for(self, args: dict[str, Any]) -> str | None:
        if self.service is None or isinstance(self.service, str):
            return self.service
        try:
            return self.service(args)
        except Exception:  # args still holding ${refs} name no service yet
            return None

    @property
    def requires_approval(self) -> bool:
        return self.side_effect is SideEffect.UNSAFE or bool(self.tags & DANGEROUS_TAGS)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the plain function (handy in notebooks and unit tests)."""
        return self.fn(*args, **kwargs)

    def call(self, args: BaseModel, ctx: ToolContext) -> Any:
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.wants_context:
            kwargs["ctx"] = ctx
        return self.fn(**kwargs)


class Registry:
    """Name → ToolSpec. A later registration under the same name replaces the earlier one."""

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {s.name: s for s in specs}

    def register(self, spec: ToolSpec) -> ToolSpec:
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: s.name))

    def names(self) -> list[str]:
        return sorted(self._specs)


default_registry = Registry()
"""Where ``@tool`` registers; the CLI, the API and the server all read it."""


def _args_model(fn: Callable[..., Any]) -> tuple[type[BaseModel], bool]:
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    wants_context = False
    for name, param in inspect.signature(fn).parameters.items():
        if name == "ctx":
            wants_context = True
            continue
        annotation = hints.get(name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (annotation, default)
    model = create_model(
        f"{fn.__name__}_args",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )
    return model, wants_context


def spec_of(
    *,
    side_effect: SideEffect | str,
    timeout: timedelta | float | None,
    checks: Iterable[Check] = (),
    tags: Iterable[str] = (),
    retry_on: Iterable[type[BaseException]] = (),
    **fields: Any,
) -> ToolSpec:
    """A ToolSpec from the options :func:`tool` takes, as given by a user (a side effect's
    name, a timeout in seconds, any iterables): the one place they are normalised, for
    onward's tools and LangChain's alike."""
    return ToolSpec(
        side_effect=SideEffect(side_effect),
        timeout=None if timeout is None else as_duration(timeout, "timeout"),
        checks=tuple(checks),
        tags=frozenset(tags),
        retry_on=tuple(retry_on),
        **fields,
    )


@overload
def tool(fn: Callable[..., Any], /) -> ToolSpec: ...
@overload
def tool(
    *,
    name: str | None = None,
    side_effect: SideEffect | str = SideEffect.PURE,
    timeout: timedelta | float | None = 300.0,
    checks: Iterable[Check] = (),
    tags: Iterable[str] = (),
    description: str | None = None,
    registry: Registry | None = None,
    reconcile: Reconcile | None = None,
    compensate: Compensate | None = None,
    deadline: Deadline | None = None,
    retry: RetryPolicy | None = None,
    retry_on: Iterable[type[BaseException]] = (),
    service: str | ServiceOf | None = None,
    breaker: BreakerPolicy | None = None,
    max_concurrent: int | None = None,
    fallback: str | None = None,
    fix_args: FixArgs | None = None,
) -> Callable[[Callable[..., Any]], ToolSpec]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    side_effect: SideEffect | str = SideEffect.PURE,
    timeout: timedelta | float | None = 300.0,
    checks: Iterable[Check] = (),
    tags: Iterable[str] = (),
    description: str | None = None,
    registry: Registry | None = None,
    reconcile: Reconcile | None = None,
    compensate: Compensate | None = None,
    deadline: Deadline | None = None,
    retry: RetryPolicy | None = None,
    retry_on: Iterable[type[BaseException]] = (),
    service: str | ServiceOf | None = None,
    breaker: BreakerPolicy | None = None,
    max_concurrent: int | None = None,
    fallback: str | None = None,
    fix_args: FixArgs | None = None,
) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
    """Register a function as a tool. Its typed parameters become the args schema.

    A parameter named ``ctx`` receives the :class:`ToolContext`; non-pure tools find their
    idempotency key there (``ctx.idempotency_key``), stable across crashes and retries. The function
    returns a JSON-serialisable value (or a pydantic model), stored as the
    step's output artifact.
    """

    def decorate(f: Callable[..., Any]) -> ToolSpec:
        model, wants_context = _args_model(f)
        doc = (inspect.getdoc(f) or "").strip().splitlines()
        spec = spec_of(
            name=name or f.__name__,
            fn=f,
            args_model=model,
            description=description if description is not None else (doc[0] if doc else ""),
            side_effect=side_effect,
            timeout=timeout,
            checks=checks,
            tags=tags,
            wants_context=wants_context,
            reconcile=reconcile,
            compensate=compensate,
            deadline=deadline,
            retry=retry,
            retry_on=retry_on,
            service=service,
            breaker=breaker,
            max_concurrent=max_concurrent,
            fallback=fallback,
            fix_args=fix_args,
        )
        return (registry or default_registry).register(spec)

    return decorate(fn) if fn is not None else decorate


def _is_file_ref(ref: str) -> bool:
    return ref.endswith(".py") or os.sep in ref


def normalize_tool_refs(names: Iterable[str]) -> list[str]:
    """File paths made absolute, so a run resumed from another directory finds them
    (in an MCP server's command too: onward.tools.mcp)."""
    return [_normal_ref(r) for r in map(str.strip, names) if r]


def _normal_ref(ref: str) -> str:
    if ref.startswith("mcp:"):
        from onward.tools.mcp import parse

        return parse(ref).ref
    return str(Path(ref).resolve()) if _is_file_ref(ref) else ref


_imported: dict[str, str] = {}
"""Ref → module name, for refs this process imported: execute calls load_tool_modules for
every step (a process serving someone else's run must find its tools), so a repeat must
cost a dict lookup, not path resolution and stat calls."""


def load_tool_modules(names: Iterable[str]) -> list[str]:
    """Import user modules that register tools: file paths (``my_tools.py``) or dotted names."""
    loaded: list[str] = []
    for raw in names:
        ref = raw.strip()
        if not ref:
            continue
        if _imported.get(ref) in sys.modules:
            loaded.append(ref)
            continue
        try:
            mod_name = ref
            if ref.startswith("mcp:"):  # an MCP server's tools (onward.tools.mcp)
                mod_name = "onward.tools.mcp"
                module = importlib.import_module(mod_name)
                module.load_server(ref)
            elif _is_file_ref(ref):
                path = Path(ref).resolve()
                if not path.is_file():
                    raise ToolLoadError(f"tools file {ref} does not exist; check the --tools path")
                mod_name = f"onward_user_tools_{path.stem}"
                if mod_name not in sys.modules:
                    spec = importlib.util.spec_from_file_location(mod_name, path)
                    assert spec is not None
                    assert spec.loader is not None
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[mod_name] = module
                    spec.loader.exec_module(module)
                module = sys.modules[mod_name]
            else:
                # Like `python -m`: a module next to where the user runs onward is importable.
                if os.getcwd() not in sys.path:
                    sys.path.insert(0, os.getcwd())
                module = importlib.import_module(ref)
            _adopt_langchain_tools(module)
        except ToolLoadError:
            raise
        except Exception as exc:
            raise ToolLoadError(
                f"could not import tools from {ref!r}: {type(exc).__name__}: {exc}; "
                "fix the module or the --tools / ONWARD_TOOLS value"
            ) from exc
        _imported[ref] = mod_name
        loaded.append(ref)
    return loaded


def _adopt_langchain_tools(module: Any) -> None:
    """A tools module's module-level LangChain tools register too (unsafe unless the
    module registered them itself: onward.tools.langchain). A module that never imported
    langchain_core has none, and costs no import of it."""
    if "langchain_core.tools" not in sys.modules:
        return
    from onward.tools.langchain import adopt_module_tools

    adopt_module_tools(module)


def tool_modules_from_env() -> list[str]:
    """$ONWARD_TOOLS, and the MCP servers of $ONWARD_MCP as refs (onward.tools.mcp)."""
    found = list(settings().tools)
    if settings().mcp:
        from onward.tools.mcp import refs_from_env

        found.extend(refs_from_env())
    return found
