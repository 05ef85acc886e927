"""The assistants a server offers: named run rules over onward's one graph.

The operator defines them (``onward serve --config serve.yaml``)::

    assistants:
      onward:                       # the default (graph id "onward")
        description: plans, runs, asks before risky steps
      careful:
        description: asks before every step
        policy: {approve_all: true, approve_plan: true}
        budget: {max_steps: 20}
        model_plans: false          # only the template rules plan
      research:
        models: {planner: "openai:gpt-4o", judge: "openai:gpt-4o-mini"}
        mcp: ["search=http://127.0.0.1:8123/mcp"]

Each has a run policy, a budget and whether a model may plan goals the templates do not
match; the operator's may also have their own models (``model``, ``planner``, ``step``,
``judge``: :mod:`onward.llm.models`, over the server's environment) and MCP servers
(``NAME=TARGET`` entries: :mod:`onward.tools.mcp`, allowed as every server is, checked at
start-up) whose tools its runs may use, driven by clients of their own. They are kept in
the store, versioned: a changed definition is a new version at start-up. A chat user
picks one by id or name in a run (``assistant_id``).

A token holder may create assistants too (``POST /assistants``), but only stricter than
the operator's default: a policy and budget that tighten the default's (the run-request
rules of :func:`~onward.serve.requests.tightened_policy`), a model only where the default
lets one plan, never models or MCP servers of its own (403). So nobody grants themself
approvals, tools, models or budget through an assistant.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException
from pydantic import ValidationError

from onward.errors import ForbiddenError, UsageError, refuse_unknown, validation_message
from onward.model.state import Budget
from onward.policies.run import RunPolicy, read_mapping, with_durations
from onward.serve.requests import kind, tightened_budget, tightened_policy
from onward.serve.wire import ASSISTANT_ID, EPOCH, GRAPH_ID
from onward.store.assistants import AssistantRow
from onward.store.database import Store

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from onward.serve.clients import Clients

    ClientsFactory = Callable[[Sequence[str], "BaseChatModel | None"], Clients]

NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
"""LangGraph Server derives a graph's default assistant id from this namespace."""
CONTEXT_FIELDS = ("policy", "budget", "model_plans")
"""What an assistant's ``context`` holds (all onward reads of it)."""
OPERATOR_FIELDS = ("models", "mcp")
"""What only the operator's assistants may have (their own models and MCP servers)."""
DEFINITION_FIELDS = ("description", *CONTEXT_FIELDS, *OPERATOR_FIELDS)
MODEL_ROLES = ("model", "planner", "step", "judge")
MAX_NAME = 200


def assistant_id_of(name: str) -> str:
    """An operator assistant's id: derived from its name, as LangGraph Server does for a
    graph's default assistant (so ``onward`` keeps its id)."""
    return str(uuid.uuid5(NAMESPACE, name))


@dataclass(frozen=True)
class Definition:
    """One assistant of the operator's configuration."""

    name: str
    description: str | None = None
    policy: RunPolicy = field(default_factory=RunPolicy)
    budget: Budget = field(default_factory=Budget)
    model_plans: bool = True
    models: Mapping[str, str] = field(default_factory=dict)
    """Role (``model``, ``planner``, ``step``, ``judge``) → model name."""
    mcp: tuple[str, ...] = ()
    """Refs of its MCP servers (``mcp:NAME=TARGET``)."""

    def context(self) -> dict[str, Any]:
        found = context_json(self.policy, self.budget, self.model_plans)
        if self.models:
            found["models"] = dict(self.models)
        if self.mcp:
            found["mcp"] = list(self.mcp)
        return found


def context_json(policy: RunPolicy, budget: Budget, model_plans: bool) -> dict[str, Any]:
    return {
        "policy": policy.model_dump(mode="json"),
        "budget": budget.model_dump(mode="json", exclude={"steps_used"}),
        "model_plans": model_plans,
    }


@dataclass(frozen=True)
class Assistant:
    """An assistant's version as runs use it."""

    row: AssistantRow
    policy: RunPolicy
    budget: Budget
    model_plans: bool
    models: Mapping[str, str] = field(default_factory=dict)
    mcp: tuple[str, ...] = ()

    @property
    def assistant_id(self) -> str:
        return self.row.assistant_id

    @property
    def own(self) -> bool:
        """Whether its runs need clients of their own (its models, its MCP servers)."""
        return bool(self.models or self.mcp) and self.row.owner is None

    @classmethod
    def of(cls, row: AssistantRow) -> Assistant:
        ctx = row.context
        return cls(
            row,
            RunPolicy.model_validate(ctx.get("policy") or {}),
            Budget.model_validate(ctx.get("budget") or {}),
            bool(ctx.get("model_plans", True)),
            dict(ctx.get("models") or {}),
            tuple(ctx.get("mcp") or ()),
        )

    def json(self) -> dict[str, Any]:
        r = self.row
        created = r.created_at.isoformat() if r.created_at else EPOCH
        return {
            "assistant_id": r.assistant_id,
            "graph_id": r.graph_id,
            "name": r.name,
            "description": r.description,
            "config": {},
            "context": r.context,
            "metadata": {**r.metadata, "created_by": "system" if r.owner is None else "user"},
            "version": r.version,
            "created_at": created,
            "updated_at": created,
        }


def load_config(path: str | Path) -> list[Definition]:
    """The assistants of a serve configuration file (YAML or JSON); see the module doc."""
    data = read_mapping(path, "serve configuration", "--config", "a mapping (assistants: ...)")
    refuse_unknown(data, ("assistants",), f"serve configuration {path}")
    raw = data.get("assistants") or {}
    if not isinstance(raw, dict) or not raw:
        raise UsageError(f"serve configuration {path}: assistants must map names to settings")
    out = []
    for name, spec in raw.items():
        where = f"serve configuration {path}, assistant {name!r}"
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise UsageError(f"{where}: a name must be a non-empty string")
        spec = spec or {}
        if not isinstance(spec, dict):
            raise UsageError(f"{where}: its settings must be a mapping")
        refuse_unknown(spec, DEFINITION_FIELDS, where)
        policy, budget = _policy(spec.get("policy"), where), _budget(spec.get("budget"), where)
        model_plans = spec.get("model_plans", True)
        if not isinstance(model_plans, bool):
            raise UsageError(f"{where}: model_plans must be true or false")
        description = spec.get("description")
        if description is not None and not isinstance(description, str):
            raise UsageError(f"{where}: description must be a string")
        models, mcp = _models(spec.get("models"), where), _mcp(spec.get("mcp"), where)
        out.append(Definition(name, description, policy, budget, model_plans, models, mcp))
    return out


def _models(raw: Any, where: str) -> dict[str, str]:
    """An assistant's models, each built once now: a missing package or key is said at
    start-up, not at its first run."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) and v for v in raw.values()):
        raise UsageError(f"{where}: models must map roles to model names (openai:gpt-4o)")
    refuse_unknown(raw, MODEL_ROLES, f"{where}: models")
    from onward.llm.models import ModelChoice, model_from_env

    try:
        model_from_env(choice=ModelChoice(**raw))
    except UsageError as exc:
        raise UsageError(f"{where}: models: {exc}") from None
    return dict(raw)


def _mcp(raw: Any, where: str) -> tuple[str, ...]:
    """An assistant's MCP servers as refs, each allowed (egress policy, ONWARD_MCP_COMMANDS)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(e, str) for e in raw):
        raise UsageError(f"{where}: mcp must be a list of NAME=TARGET entries")
    from onward.tools.mcp import check_allowed, parse, refs_of

    try:
        refs = refs_of(raw)
        for ref in refs:
            check_allowed(parse(ref))
    except UsageError as exc:
        raise UsageError(f"{where}: mcp: {exc}") from None
    return tuple(refs)


def _policy(raw: Any, where: str) -> RunPolicy:
    if raw is None:
        return RunPolicy()
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: policy must be a mapping of policy settings")
    try:
        return RunPolicy.model_validate(with_durations(raw))
    except ValidationError as exc:
        raise UsageError(f"{where}: policy: {validation_message(exc)}") from None


def _budget(raw: Any, where: str) -> Budget:
    if raw is None:
        return Budget()
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: budget must be a mapping of limits")
    refuse_unknown(
        raw, ("max_steps", "max_replans", "max_run_time", "max_tokens", "max_cost"), where
    )
    try:
        return Budget.model_validate(raw)
    except ValidationError as exc:
        raise UsageError(f"{where}: budget: {validation_message(exc)}") from None


class Catalog:
    """The server's assistants: the operator's definitions, and those users made."""

    def __init__(
        self,
        definitions: list[Definition],
        policy: RunPolicy | None = None,
        budget: Budget | None = None,
    ) -> None:
        """``policy`` and ``budget``: the default assistant's when ``definitions`` do not
        define ``onward`` (the server's --policy and budget options)."""
        names = [d.name for d in definitions]
        if len(set(names)) != len(names):
            raise UsageError("serve configuration: two assistants have the same name")
        if GRAPH_ID in names and policy is not None:
            raise UsageError(
                f"the serve configuration defines the {GRAPH_ID!r} assistant: give its "
                "policy there, not with --policy"
            )
        if GRAPH_ID not in names:
            default = Definition(
                GRAPH_ID,
                "onward: plan, execute, verify; humans approve what is risky",
                policy or RunPolicy(),
                budget or Budget(),
            )
            definitions = [default, *definitions]
        confine = True
        # Runs started over HTTP always stay in the work directory.
        self.definitions = [
            Definition(
                d.name,
                d.description,
                d.policy.model_copy(update={"confine_paths": confine}),
                d.budget,
                d.model_plans,
                d.models,
                d.mcp,
            )
            for d in definitions
        ]
        self.factory: ClientsFactory | None = None
        """Makes the clients of an assistant with its own models or MCP servers (set by
        the app: the server's store and tool modules)."""
        self._pools: dict[tuple[str, int], Clients] = {}
        self.by_name = {d.name: assistant_id_of(d.name) for d in self.definitions}
        assert self.by_name[GRAPH_ID] == ASSISTANT_ID

    @property
    def default(self) -> Definition:
        return next(d for d in self.definitions if d.name == GRAPH_ID)

    def sync(self, store: Store) -> None:
        """Store the operator's assistants; a changed definition becomes a new version."""
        for d in self.definitions:
            aid = self.by_name[d.name]
            row = store.assistants.get(aid)
            meta = {"source": "config"}
            if row is not None and (row.context, row.description, row.name) == (
                d.context(),
                d.description,
                d.name,
            ):
                continue
            store.assistants.add_version(
                aid,
                graph_id=GRAPH_ID,
                name=d.name,
                description=d.description,
                context=d.context(),
                metadata=meta,
                owner=None,
            )

    def resolve(self, store: Store, ref: str | None, who: str, private: bool) -> Assistant:
        """The assistant a request names (by id, by an operator assistant's name, or the
        graph id for the default); 404 for unknown ones and, with ``private`` (tokens
        configured), for another user's."""
        ref = ref or GRAPH_ID
        aid = self.by_name.get(ref, ref)
        row = store.assistants.get(aid)
        if row is None or (private and row.owner is not None and row.owner != who):
            raise HTTPException(
                404, f"Assistant {ref} not found; the server offers {', '.join(self.by_name)}"
            )
        return Assistant.of(row)

    def visible(self, store: Store, who: str, private: bool) -> list[Assistant]:
        return [
            Assistant.of(r)
            for r in store.assistants.latest()
            if not private or r.owner is None or r.owner == who
        ]

    def own_clients(self, assistant: Assistant) -> Clients | None:
        """The clients of an operator's assistant with its own models or MCP servers (one
        pool per version, made on first use); None for every other assistant."""
        if not assistant.own or self.factory is None:
            return None
        key = (assistant.assistant_id, assistant.row.version)
        if key not in self._pools:
            from onward.llm.models import ModelChoice, model_from_env

            model = None
            if assistant.model_plans:
                model = model_from_env(choice=ModelChoice(**assistant.models))
            self._pools[key] = self.factory(assistant.mcp, model)
        return self._pools[key]

    def pools(self) -> list[Clients]:
        """Every assistant's own clients made so far (drained and closed with the server's)."""
        return list(self._pools.values())

    def user_context(self, raw: Any) -> dict[str, Any]:
        """A user's assistant ``context`` as stored: checked to be no looser than the
        operator's default assistant (a :class:`ForbiddenError` names what would be)."""
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise UsageError(f"context must be an object, not {kind(raw)}")
        for key in OPERATOR_FIELDS:
            if key in raw:
                raise ForbiddenError(
                    f"context.{key}: an assistant made over HTTP may not choose its own "
                    "models or MCP servers; the server's configuration does (onward serve "
                    "--config)"
                )
        refuse_unknown(raw, CONTEXT_FIELDS, "assistant context")
        base = self.default
        policy = tightened_policy(base.policy, raw.get("policy"))
        budget = tightened_budget(base.budget, raw.get("budget"))
        model_plans = raw.get("model_plans", base.model_plans)
        if not isinstance(model_plans, bool):
            raise UsageError("context.model_plans must be true or false")
        if model_plans and not base.model_plans:
            raise ForbiddenError(
                "context.model_plans: the server's default assistant plans without a model; "
                "an assistant made over HTTP may not turn one on"
            )
        return context_json(policy, budget, model_plans)


def graph_schemas(ow: Any) -> dict[str, Any]:
    """The graph's JSON schemas, as ``GET /assistants/{id}/schemas`` answers them (None
    where LangGraph cannot draw one)."""

    def schema(read: Any) -> Any:
        try:
            with warnings.catch_warnings():  # config_schema: deprecated, still asked for
                warnings.simplefilter("ignore")
                return read()
        except Exception:  # a type without a JSON schema: say so, not a 500
            return None

    graph = ow.graph
    return {
        "graph_id": GRAPH_ID,
        "input_schema": schema(graph.get_input_jsonschema),
        "output_schema": schema(graph.get_output_jsonschema),
        "state_schema": schema(lambda: graph.get_output_jsonschema()),
        "config_schema": schema(graph.get_config_jsonschema),
        "context_schema": schema(graph.get_context_jsonschema),
    }
