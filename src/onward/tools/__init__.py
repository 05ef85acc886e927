"""Tool registry, spec and built-in tools (registered on import)."""

from onward.tools import effects, files, model_step, orders, tool_calling, web  # noqa: F401
from onward.tools.registry import (
    Reconciled,
    Registry,
    ToolContext,
    ToolSpec,
    default_registry,
    load_tool_modules,
    tool,
    tool_modules_from_env,
)

__all__ = [
    "Reconciled",
    "Registry",
    "ToolContext",
    "ToolSpec",
    "default_registry",
    "load_tool_modules",
    "tool",
    "tool_modules_from_env",
]
