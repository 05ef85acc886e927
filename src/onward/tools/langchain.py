"""LangChain tools as onward tools: any ``langchain_core`` ``BaseTool`` (a ``@tool`` function
or a ``BaseTool`` subclass) runs as a plan step under onward's one protocol (ledger,
approvals, egress, breakers, failure classes, verification).

Through LangChain's public API only: the tool's ``tool_call_schema`` (its args as a model
fills them in: a pydantic model, or a JSON schema for tools built from one) becomes the
step's args schema, with unknown args refused, so a plan is validated against it before
anything runs; the call is ``tool.invoke(args, config)``, whose ``configurable`` carries
``onward_thread_id``, ``onward_step_id`` and, for tools with side effects,
``onward_idempotency_key`` (a tool with a ``config: RunnableConfig`` parameter reads it).
A ``ToolException`` is a deterministic failure (``DeterministicToolError``); any other
exception is classified as every tool's is. The output follows the JSON-output rule of
every tool (onward.tools.output).

The side-effect class is the registration's: ``register_langchain_tool(t,
side_effect="pure")``. A LangChain tool does not say whether it changes the world, so one
registered without a class, and every module-level LangChain tool of a ``--tools`` /
``ONWARD_TOOLS`` module that the module did not register itself, is ``unsafe``: a person
approves each call before it runs, and the ledger makes it happen at most once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict

from onward.errors import DeterministicToolError, ToolLoadError
from onward.model.state import SideEffect
from onward.policies.retry import RetryPolicy
from onward.store.breakers import BreakerPolicy
from onward.tools.registry import (
    Compensate,
    Reconcile,
    Registry,
    ServiceOf,
    ToolContext,
    ToolSpec,
    default_registry,
    spec_of,
)
from onward.tools.schemas import model_from_schema
from onward.verification.checks import Check


@dataclass(frozen=True, slots=True)
class LangChainCall:
    """A registered LangChain tool's implementation: ``tool.invoke`` with onward's call
    details in the config (the spec's ``fn``; ``tool`` is the object registered)."""

    tool: BaseTool

    def __call__(self, ctx: ToolContext, **args: Any) -> Any:
        configurable = {"onward_thread_id": ctx.thread_id, "onward_step_id": ctx.step_id}
        if ctx.idempotency_key is not None:
            configurable["onward_idempotency_key"] = ctx.idempotency_key
        config: RunnableConfig = {"configurable": configurable, "run_name": self.tool.name}
        try:
            return self.tool.invoke(args, config=config)
        except ToolException as exc:
            raise DeterministicToolError(f"{self.tool.name}: {exc}") from exc


def register_langchain_tool(
    lc_tool: BaseTool,
    *,
    side_effect: SideEffect | str = SideEffect.UNSAFE,
    name: str | None = None,
    description: str | None = None,
    timeout: timedelta | float | None = 300.0,
    checks: Iterable[Check] = (),
    tags: Iterable[str] = (),
    retry: RetryPolicy | None = None,
    retry_on: Iterable[type[BaseException]] = (),
    service: str | ServiceOf | None = None,
    breaker: BreakerPolicy | None = None,
    max_concurrent: int | None = None,
    reconcile: Reconcile | None = None,
    compensate: Compensate | None = None,
    registry: Registry | None = None,
) -> ToolSpec:
    """Register a LangChain tool; returns its spec. ``side_effect`` says what re-running it
    does (pure, idempotent, unsafe: the default, so an undeclared tool asks before it
    runs). The other options are :func:`onward.tool`'s."""
    if not isinstance(lc_tool, BaseTool):
        raise TypeError(
            f"{lc_tool!r} is not a LangChain tool (a langchain_core BaseTool); "
            "decorate a function with onward.tool instead"
        )
    spec = spec_of(
        name=name or lc_tool.name,
        fn=LangChainCall(lc_tool),
        args_model=args_model_of(lc_tool),
        description=description if description is not None else _first_line(lc_tool),
        side_effect=side_effect,
        timeout=timeout,
        checks=checks,
        tags=tags,
        wants_context=True,
        retry=retry,
        retry_on=retry_on,
        service=service,
        breaker=breaker,
        max_concurrent=max_concurrent,
        reconcile=reconcile,
        compensate=compensate,
    )
    return (registry or default_registry).register(spec)


def args_model_of(lc_tool: BaseTool) -> type[BaseModel]:
    """The tool's args as a model fills them in, with unknown args refused (LangChain
    drops them silently; a plan with a misspelt arg must be a validation error)."""
    schema = lc_tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        config = ConfigDict(**{**schema.model_config, "extra": "forbid"})
        return type(f"{lc_tool.name}_args", (schema,), {"model_config": config})
    # A JSON schema (tools built from one), or a pydantic v1 model's.
    found = schema if isinstance(schema, dict) else schema.schema()
    try:
        strict = {**found, "additionalProperties": False}
        return model_from_schema(f"{lc_tool.name}_args", strict)
    except ValueError as exc:
        raise ToolLoadError(f"LangChain tool {lc_tool.name!r}: {exc}") from exc


def adopt_module_tools(module: Any, registry: Registry | None = None) -> list[ToolSpec]:
    """Register the module-level LangChain tools of a tools module that it has not
    registered itself, as ``unsafe``; returns the new specs."""
    registry = registry or default_registry
    adopted = []
    for value in list(vars(module).values()):
        if isinstance(value, BaseTool) and not _registered(registry, value):
            adopted.append(register_langchain_tool(value, registry=registry))
    return adopted


def _registered(registry: Registry, lc_tool: BaseTool) -> bool:
    """Whether ``lc_tool`` (this very object) is registered already, under any name."""
    return any(isinstance(s.fn, LangChainCall) and s.fn.tool is lc_tool for s in registry)


def _first_line(lc_tool: BaseTool) -> str:
    lines = (lc_tool.description or "").strip().splitlines()
    return lines[0] if lines else ""
