"""The model factory and the switch that blocks real provider calls (in tests).

``ChatOpenAI`` when ``OPENAI_API_KEY`` is set (``OPENAI_BASE_URL`` for any
OpenAI-compatible server: vLLM, llama.cpp, Ollama; ``ONWARD_MODEL``; temperature 0),
no model otherwise: declared and template plans never need one. With
``ONWARD_BLOCK_MODEL_REQUESTS=1`` (onward's own tests set it) only loopback servers
may be called, so no test can reach a real provider.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping

from langchain_core.language_models import BaseChatModel

from onward.errors import ModelBlockedError as ModelBlockedError

DEFAULT_MODEL = "gpt-4o-mini"


def _loopback(url: str | None) -> bool:
    host = urllib.parse.urlsplit(url or "").hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")


def blocked(env: Mapping[str, str] = os.environ) -> bool:
    return env.get("ONWARD_BLOCK_MODEL_REQUESTS", "") not in ("", "0")


def model_from_env(env: Mapping[str, str] = os.environ) -> BaseChatModel | None:
    key = env.get("OPENAI_API_KEY")
    if not key:
        return None
    base = env.get("OPENAI_BASE_URL") or None
    if blocked(env) and not _loopback(base):
        raise ModelBlockedError(
            "model requests are blocked (ONWARD_BLOCK_MODEL_REQUESTS is set) and "
            f"OPENAI_BASE_URL={base or '(OpenAI)'} is not a loopback server; use "
            "onward.llm.fake.ScriptedChatModel or a local OpenAI-compatible server in tests"
        )
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=env.get("ONWARD_MODEL") or DEFAULT_MODEL,
        api_key=key,
        base_url=base,
        temperature=0,
        timeout=float(env.get("ONWARD_MODEL_TIMEOUT") or 60),
        max_retries=0,  # onward classifies and retries failures itself
    )


def check_model(
    model: BaseChatModel | None, env: Mapping[str, str] = os.environ
) -> BaseChatModel | None:
    """Refuse a model that would reach a real provider while requests are blocked (an
    explicitly built ChatOpenAI too, not only the factory's), and a malformed price table."""
    if model is None:
        return None
    from onward.llm.usage import prices

    prices()
    base = getattr(model, "openai_api_base", None)
    if blocked(env) and hasattr(model, "openai_api_base") and not _loopback(base):
        raise ModelBlockedError(
            f"model requests are blocked (ONWARD_BLOCK_MODEL_REQUESTS is set) and this model "
            f"would call {base or 'OpenAI'}; use ScriptedChatModel or a loopback server"
        )
    return model


def model_name(model: BaseChatModel) -> str:
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__
