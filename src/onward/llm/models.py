"""The model factory and the switch that blocks real provider calls (in tests).

``ChatOpenAI`` when ``OPENAI_API_KEY`` is set (``OPENAI_BASE_URL`` for any
OpenAI-compatible server: vLLM, llama.cpp, Ollama; ``ONWARD_MODEL``; temperature 0;
no retries of its own, usage asked for when it streams), no model otherwise: declared
and template plans never need one. With ``ONWARD_BLOCK_MODEL_REQUESTS=1`` (onward's own
tests set it) only loopback servers may be called, so no test can reach a real provider.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping

from langchain_core.language_models import BaseChatModel

from onward.errors import ModelBlockedError as ModelBlockedError
from onward.settings import DEFAULT_MODEL as DEFAULT_MODEL
from onward.settings import Settings, settings


def _loopback(url: str | None) -> bool:
    host = urllib.parse.urlsplit(url or "").hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")


def _settings(env: Mapping[str, str] | None) -> Settings:
    return settings() if env is None else Settings.from_env(env)


def model_from_env(env: Mapping[str, str] | None = None) -> BaseChatModel | None:
    """The configured model (``env``: this mapping instead of ``os.environ``)."""
    s = _settings(env)
    if not s.openai_api_key:
        return None
    base = s.openai_base_url
    if s.block_model_requests and not _loopback(base):
        raise ModelBlockedError(
            "model requests are blocked (ONWARD_BLOCK_MODEL_REQUESTS is set) and "
            f"OPENAI_BASE_URL={base or '(OpenAI)'} is not a loopback server; use "
            "onward.llm.fake.ScriptedChatModel or a local OpenAI-compatible server in tests"
        )
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=s.model,
        api_key=s.openai_api_key,
        base_url=base,
        temperature=0,
        timeout=s.model_timeout.total_seconds(),
        max_retries=0,  # onward classifies and retries failures itself
        stream_usage=True,  # a streamed call reports its tokens as a plain one does
    )


def check_model(
    model: BaseChatModel | None, env: Mapping[str, str] | None = None
) -> BaseChatModel | None:
    """Refuse a model that would reach a real provider while requests are blocked (an
    explicitly built ChatOpenAI too, not only the factory's), and a malformed price table."""
    if model is None:
        return None
    s = _settings(env)  # a malformed ONWARD_PRICES is refused here
    base = getattr(model, "openai_api_base", None)
    if s.block_model_requests and hasattr(model, "openai_api_base") and not _loopback(base):
        raise ModelBlockedError(
            f"model requests are blocked (ONWARD_BLOCK_MODEL_REQUESTS is set) and this model "
            f"would call {base or 'OpenAI'}; use ScriptedChatModel or a loopback server"
        )
    return model


def model_name(model: BaseChatModel) -> str:
    """The name onward prices and reports: the model's, else its (Azure) deployment's."""
    for attr in ("model_name", "model", "deployment_name"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def client_retries(model: BaseChatModel) -> int:
    """How many times the model's own client retries a failed request (``max_retries``:
    a ChatOpenAI left at None retries as the openai client does by default, twice; a
    model without the setting, 0)."""
    retries = getattr(model, "max_retries", 0)
    if retries is None and is_openai_client(model):
        import openai

        return openai.DEFAULT_MAX_RETRIES
    return retries if isinstance(retries, int) and retries > 0 else 0


def is_openai_client(model: BaseChatModel) -> bool:
    """ChatOpenAI or AzureChatOpenAI (langchain-openai's client, its settings)."""
    try:
        from langchain_openai import AzureChatOpenAI, ChatOpenAI
    except ImportError:  # pragma: no cover - a dependency of onward
        return False
    return isinstance(model, ChatOpenAI | AzureChatOpenAI)
