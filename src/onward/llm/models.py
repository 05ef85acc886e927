"""The model factory, models per role, and the switch that blocks real provider calls.

A model is named as LangChain's ``init_chat_model`` names one: ``provider:name``
(``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``, ``ollama:llama3.1``), or a bare
name, which is OpenAI's. An OpenAI model is a ``ChatOpenAI`` with onward's settings
(``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` for any OpenAI-compatible server: vLLM, llama.cpp,
Ollama; temperature 0; no retries of its own, usage asked for when it streams); another
provider's comes from ``langchain``'s ``init_chat_model`` when ``langchain`` is installed,
else from the provider's own package (:data:`PROVIDERS`), and a package that is missing is
a :class:`~onward.errors.UsageError` naming what to ``pip install``.

Each role may have its own model: the planner (plans, replans), model steps, the judge.
Each role's model is, first found: its ``--ROLE-model`` option, ``--model``, its
``ONWARD_ROLE_MODEL`` variable, ``ONWARD_MODEL``, :data:`DEFAULT_MODEL` (so the command
line wins over the environment, and a role's own setting over the general one at each
level). Roles with different models are one :class:`RoleModels`, which each model call
resolves by its purpose (:func:`for_purpose`); the same model everywhere is that model.
An OpenAI model without ``OPENAI_API_KEY`` is no model when the environment named it
(declared and template plans need none), and an error when the command line did.

With ``ONWARD_BLOCK_MODEL_REQUESTS=1`` (onward's own tests set it) only loopback servers
may be called, so no test can reach a real provider.
"""

from __future__ import annotations

import importlib
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from onward.errors import ModelBlockedError as ModelBlockedError
from onward.errors import UsageError
from onward.settings import DEFAULT_MODEL as DEFAULT_MODEL
from onward.settings import Settings, settings

ROLES = ("planner", "step", "judge")
"""The roles a model may be chosen for (``--planner-model``, ``ONWARD_PLANNER_MODEL``...)."""
PROVIDERS: Mapping[str, tuple[str, str, str]] = {
    "openai": ("langchain_openai", "ChatOpenAI", "langchain-openai"),
    "azure_openai": ("langchain_openai", "AzureChatOpenAI", "langchain-openai"),
    "anthropic": ("langchain_anthropic", "ChatAnthropic", "langchain-anthropic"),
    "ollama": ("langchain_ollama", "ChatOllama", "langchain-ollama"),
    "google_genai": ("langchain_google_genai", "ChatGoogleGenerativeAI", "langchain-google-genai"),
    "google_vertexai": ("langchain_google_vertexai", "ChatVertexAI", "langchain-google-vertexai"),
    "bedrock_converse": ("langchain_aws", "ChatBedrockConverse", "langchain-aws"),
    "mistralai": ("langchain_mistralai", "ChatMistralAI", "langchain-mistralai"),
    "groq": ("langchain_groq", "ChatGroq", "langchain-groq"),
    "fireworks": ("langchain_fireworks", "ChatFireworks", "langchain-fireworks"),
    "together": ("langchain_together", "ChatTogether", "langchain-together"),
    "deepseek": ("langchain_deepseek", "ChatDeepSeek", "langchain-deepseek"),
    "xai": ("langchain_xai", "ChatXAI", "langchain-xai"),
}
"""provider → (module, class, pip package): what a ``provider:name`` model is built with
when ``langchain`` (and so ``init_chat_model``) is not installed."""
INIT_ONLY = frozenset(
    {"azure_ai", "bedrock", "cohere", "huggingface", "ibm", "nvidia", "perplexity", "upstage"}
)
"""Providers built only through ``init_chat_model`` (``pip install langchain``)."""
_URL_FIELDS = ("openai_api_base", "anthropic_api_url", "base_url", "endpoint")


def _loopback(url: str | None) -> bool:
    host = urllib.parse.urlsplit(url or "").hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")


def _settings(env: Mapping[str, str] | None) -> Settings:
    return settings() if env is None else Settings.from_env(env)


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """Models named on the command line (or by a caller): each None is not named."""

    model: str | None = None
    planner: str | None = None
    step: str | None = None
    judge: str | None = None


def model_from_env(
    env: Mapping[str, str] | None = None, choice: ModelChoice | None = None
) -> BaseChatModel | None:
    """The configured model: one, a :class:`RoleModels` when roles differ, or None
    (``env``: this mapping instead of ``os.environ``; ``choice``: the command line's)."""
    s = _settings(env)
    choice = choice or ModelChoice()
    specs = {role: _spec_of(role, s, choice) for role in (None, *ROLES)}
    built = {key: _build(key[0], s, explicit=key[1]) for key in set(specs.values())}
    models = {role: built[key] for role, key in specs.items()}
    if len({id(m) for m in models.values()}) == 1:
        return models[None]
    default = models[None] or next(m for m in models.values() if m is not None)
    return RoleModels(default=default, **{r: models[r] for r in ROLES})


def _spec_of(role: str | None, s: Settings, choice: ModelChoice) -> tuple[str, bool]:
    """A role's model name, and whether the command line named it."""
    own = getattr(choice, role) if role else None
    if own or choice.model:
        return own or choice.model or "", True
    env = getattr(s, f"{role}_model") if role else None
    return env or s.model or DEFAULT_MODEL, False


def provider_of(spec: str) -> tuple[str, str]:
    """``provider:name`` → (provider, name); a bare name is OpenAI's."""
    provider, sep, name = spec.partition(":")
    if sep and (provider in PROVIDERS or provider in INIT_ONLY):
        return provider, name
    return "openai", spec  # ft:gpt-4o-mini:org::id is an OpenAI fine-tune's name


def chat_model(spec: str, env: Mapping[str, str] | None = None) -> BaseChatModel:
    """The model ``spec`` names (``openai:gpt-4o-mini``, ``anthropic:...``, a bare OpenAI
    name), built with onward's settings; a UsageError says what is missing."""
    model = _build(spec, _settings(env), explicit=True)
    assert model is not None  # explicit: an error rather than None
    return model


def _build(spec: str, s: Settings, *, explicit: bool) -> BaseChatModel | None:
    provider, name = provider_of(spec.strip())
    if not name:
        raise UsageError(f"model {spec!r} names no model; write provider:name, e.g. openai:gpt-4o")
    if provider == "openai":
        return _openai(name, s, explicit=explicit)
    model = _other(provider, name, spec)
    base = _base_url(model)
    if s.block_model_requests and not (_loopback(base) or (provider == "ollama" and not base)):
        raise ModelBlockedError(
            f"model requests are blocked (ONWARD_BLOCK_MODEL_REQUESTS is set) and {spec} would "
            f"call {base or provider}; use ScriptedChatModel or a loopback server"
        )
    return model


def _openai(name: str, s: Settings, *, explicit: bool) -> BaseChatModel | None:
    if not s.openai_api_key:
        if not explicit:
            return None
        raise UsageError(
            f"model openai:{name} needs OPENAI_API_KEY (and OPENAI_BASE_URL for a server "
            "other than OpenAI's); set it, or name another provider's model"
        )
    base = s.openai_base_url
    if s.block_model_requests and not _loopback(base):
        raise ModelBlockedError(
            "model requests are blocked (ONWARD_BLOCK_MODEL_REQUESTS is set) and "
            f"OPENAI_BASE_URL={base or '(OpenAI)'} is not a loopback server; use "
            "onward.llm.fake.ScriptedChatModel or a local OpenAI-compatible server in tests"
        )
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=name,
        api_key=s.openai_api_key,
        base_url=base,
        temperature=0,
        timeout=s.model_timeout.total_seconds(),
        max_retries=0,  # onward classifies and retries failures itself
        stream_usage=True,  # a streamed call reports its tokens as a plain one does
    )


def _other(provider: str, name: str, spec: str) -> BaseChatModel:
    """Another provider's model: ``init_chat_model`` if ``langchain`` is installed, else
    the provider's class; its package missing is a UsageError naming it."""
    module, cls, package = PROVIDERS.get(provider, ("", "", f"langchain-{provider}"))
    missing = UsageError(
        f"model {spec!r} needs the {package} package: pip install {package} "
        "(or pick a provider that is installed)"
    )
    try:
        init_chat_model = importlib.import_module("langchain.chat_models").init_chat_model
    except ImportError:
        if not module:
            known = ", ".join(sorted(PROVIDERS))
            raise UsageError(
                f"model {spec!r}: unknown provider {provider!r}; use one of {known}, or "
                "pip install langchain for every provider init_chat_model knows"
            ) from None
        try:
            made: BaseChatModel = getattr(importlib.import_module(module), cls)(
                model=name, temperature=0
            )
        except ImportError:
            raise missing from None
        return made
    try:
        found: BaseChatModel = init_chat_model(name, model_provider=provider, temperature=0)
        return found
    except ImportError:
        raise missing from None
    except ValueError as exc:
        raise UsageError(f"model {spec!r}: {exc}") from None


def _base_url(model: BaseChatModel) -> str | None:
    for attr in _URL_FIELDS:
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


class RoleModels(BaseChatModel):
    """A model per role (planner, step, judge; None: ``default``). onward's model calls
    pick theirs by purpose (:func:`for_purpose`); called directly it is ``default``, and
    tools are bound to the step model (a tool-calling step's)."""

    default: BaseChatModel
    planner: BaseChatModel | None = None
    step: BaseChatModel | None = None
    judge: BaseChatModel | None = None

    @property
    def _llm_type(self) -> str:
        return "onward-roles"

    def for_role(self, role: str | None) -> BaseChatModel:
        found = getattr(self, role, None) if role in ROLES else None
        return found if isinstance(found, BaseChatModel) else self.default

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self.default._generate(messages, stop, run_manager, **kwargs)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.for_role("step").bind_tools(tools, **kwargs)

    def models(self) -> Iterator[BaseChatModel]:
        yield self.default
        for role in ROLES:
            found = getattr(self, role)
            if found is not None:
                yield found


def role_models(
    default: BaseChatModel | str | None = None,
    *,
    planner: BaseChatModel | str | None = None,
    step: BaseChatModel | str | None = None,
    judge: BaseChatModel | str | None = None,
) -> BaseChatModel:
    """A model per role for ``Onward(model=...)``: models, or names
    (``openai:gpt-4o``) built by :func:`chat_model`. ``default`` serves the roles not
    given (at least one model must be)."""

    def made(m: BaseChatModel | str | None) -> BaseChatModel | None:
        return chat_model(m) if isinstance(m, str) else m

    roles = {"planner": made(planner), "step": made(step), "judge": made(judge)}
    base = made(default) or next((m for m in roles.values() if m is not None), None)
    if base is None:
        raise UsageError("role_models: give at least one model (default, planner, step, judge)")
    return RoleModels(default=base, **roles)


def role_of(purpose: str) -> str | None:
    """The role a model call's purpose is for: plan, replan (and a milestone's expansion)
    the planner's; judge, judge-goal the judge's; step (and a tool-calling step's turns)
    the step model's."""
    if purpose.startswith("judge"):
        return "judge"
    if "plan" in purpose or purpose.startswith(("milestone", "expand")):
        return "planner"
    if purpose.startswith(("step", "tool")):
        return "step"
    return None


def for_purpose(model: BaseChatModel, purpose: str) -> BaseChatModel:
    """The model a call with ``purpose`` asks: a :class:`RoleModels`' for the role, else
    ``model`` itself."""
    return model.for_role(role_of(purpose)) if isinstance(model, RoleModels) else model


def check_model(
    model: BaseChatModel | None, env: Mapping[str, str] | None = None
) -> BaseChatModel | None:
    """Refuse a model that would reach a real provider while requests are blocked (an
    explicitly built ChatOpenAI too, not only the factory's), and a malformed price table."""
    if model is None:
        return None
    if isinstance(model, RoleModels):
        for each in model.models():
            check_model(each, env)
        return model
    s = _settings(env)  # a malformed ONWARD_PRICES is refused here
    base = getattr(model, "openai_api_base", None)
    if s.block_model_requests and hasattr(model, "openai_api_base") and not _loopback(base):
        raise ModelBlockedError(
            f"model requests are blocked (ONWARD_BLOCK_MODEL_REQUESTS is set) and this model "
            f"would call {base or 'OpenAI'}; use ScriptedChatModel or a loopback server"
        )
    return model


def model_name(model: BaseChatModel) -> str:
    """The name onward prices and reports: the model's, else its (Azure) deployment's (a
    :class:`RoleModels`: its default's)."""
    if isinstance(model, RoleModels):
        return model_name(model.default)
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
