"""A JSON schema as a pydantic model: what a model step's output contract and a LangChain
tool whose args schema is a JSON schema (a dict) are validated with.

The common subset of JSON Schema is supported: ``type`` (object, array, string, integer,
number, boolean, null, or a list of them), ``properties`` and ``required``,
``additionalProperties: false``, ``items``, ``enum`` and ``const``, ``anyOf`` / ``oneOf``,
``description`` and ``default``, and the bounds ``minLength``, ``maxLength``, ``pattern``,
``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``minItems``,
``maxItems``. Anything else (``$ref``, ``allOf``, formats) is refused with a message that
says what (a ValueError), so a contract never silently checks less than it says.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

_SCALARS: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": int | float,
    "boolean": bool,
    "null": type(None),
}
_BOUNDS = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
    "minItems": "min_length",
    "maxItems": "max_length",
}
_KNOWN = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "description",
    "default",
    "title",
    "examples",
    *_BOUNDS,
}
MAX_DEPTH = 20
"""Deeper schemas are refused (a contract is a document's shape, not a recursion)."""


def model_from_schema(name: str, schema: dict[str, Any]) -> type[BaseModel]:
    """A pydantic model that validates what ``schema`` (an object schema) describes."""
    if schema.get("type", "object") != "object":
        raise ValueError("the schema's top level must be an object (type: object)")
    return _object_model(_name(name), schema, 0)


def _name(text: str) -> str:
    return re.sub(r"\W", "_", text) or "Schema"


def _object_model(name: str, schema: dict[str, Any], depth: int) -> type[BaseModel]:
    _known(schema)
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict):
        raise ValueError(f"{name}: properties must be a mapping")
    required = set(schema.get("required") or ())
    extra: Literal["forbid", "allow"] = (
        "forbid" if schema.get("additionalProperties") is False else "allow"
    )
    fields: dict[str, Any] = {}
    for key, sub in properties.items():
        if not isinstance(sub, dict):
            raise ValueError(f"{name}.{key}: a property's schema must be a mapping")
        annotation = _type(f"{name}_{key}", sub, depth + 1)
        default = ... if key in required else sub.get("default")
        fields[key] = (annotation, Field(default, **_bounds(sub)))
    config = ConfigDict(extra=extra, populate_by_name=True)
    model: type[BaseModel] = create_model(name, __config__=config, **fields)
    return model


def _type(name: str, schema: dict[str, Any], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError(f"{name}: nested deeper than {MAX_DEPTH} levels")
    _known(schema)
    if "const" in schema:
        return Literal[schema["const"]]
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return _union([_type(f"{name}_{i}", s, depth + 1) for i, s in enumerate(options)])
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([_type(name, {**schema, "type": k}, depth) for k in kind])
    if kind == "object" or (kind is None and "properties" in schema):
        return _object_model(name, schema, depth)
    if kind == "array":
        items = schema.get("items")
        return list[_type(f"{name}_item", items, depth + 1) if items else Any]  # type: ignore[misc]
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind is None:
        return Any
    raise ValueError(f"{name}: unknown type {kind!r}")


def _union(types: list[Any]) -> Any:
    union = types[0]
    for t in types[1:]:
        union = union | t
    return union


def _bounds(schema: dict[str, Any]) -> dict[str, Any]:
    found = {arg: schema[key] for key, arg in _BOUNDS.items() if key in schema}
    if "description" in schema:
        found["description"] = schema["description"]
    return found


def _known(schema: dict[str, Any]) -> None:
    unknown = sorted(k for k in schema if k not in _KNOWN)
    if unknown:
        raise ValueError(
            f"the schema uses {', '.join(unknown)}, which onward does not check; use "
            "type, properties, required, items, enum, anyOf and the length and number bounds"
        )
