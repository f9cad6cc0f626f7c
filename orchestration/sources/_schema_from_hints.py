"""A JSON Schema from a Python signature, with pydantic doing the type work.

The parameters become the fields of a pydantic model built for the function; its JSON
Schema is the input schema, and validating a call's parameters against the same model
turns JSON back into what the function declared (a dict into a pydantic model, a string
into an enum member). pydantic already knows ``Annotated`` constraints, enums,
``Optional``, defaults, dataclasses and nested models, so nothing here re-implements
type-to-schema rules; this module only shapes the model and cleans the output.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

from orchestration.errors import CatalogError

_NO_VALUE = (inspect.Signature.empty, Any, None, type(None))


@dataclass(frozen=True)
class SignatureSchema:
    """The parameter model of one function and what it yields."""

    model: type[BaseModel]
    field_for_param: dict[str, str]  # parameter name -> model field name
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    output_adapter: TypeAdapter[Any] | None

    def arguments(self, params: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments for the function; raises ``ValidationError``."""
        validated = self.model.model_validate(params)
        return {param: getattr(validated, field) for param, field in self.field_for_param.items()}

    def dump_output(self, value: Any) -> Any:
        """The return value as JSON-compatible data (models, enums, dates converted)."""
        if self.output_adapter is not None:
            return self.output_adapter.dump_python(value, mode="json")
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        return value


def _strip_titles(schema: Any) -> Any:
    """Drop the titles pydantic derives from field names ("A" for ``a``): they repeat the
    property name and cost prompt space. Titles of named models (in ``$defs``) stay."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                out[key] = {name: _strip_property_title(sub) for name, sub in value.items()}
            else:
                out[key] = _strip_titles(value)
        return out
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _strip_property_title(schema: Any) -> Any:
    cleaned = _strip_titles(schema)
    if isinstance(cleaned, dict):
        cleaned.pop("title", None)
    return cleaned


def schema_from_signature(fn: Callable[..., Any], where: str) -> SignatureSchema:
    """Build the parameter model and both schemas of ``fn``; CatalogError names the problem."""
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise CatalogError(f"{where}: cannot read the signature or type hints: {exc}") from exc

    fields: dict[str, Any] = {}
    field_for_param: dict[str, str] = {}
    for index, (name, param) in enumerate(signature.parameters.items()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise CatalogError(f"{where}: parameter {name!r} is {param.kind.description}; a tool "
                               "is called with named JSON parameters, so declare each one by name")
        annotation = hints.get(name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        # the field is named p0, p1, ... and aliased to the parameter, so a parameter may be
        # called "json" or "model_config" without clashing with BaseModel's own attributes
        field = f"p{index}"
        fields[field] = (annotation, Field(default, alias=name))
        field_for_param[name] = field

    try:
        model = create_model(
            f"{getattr(fn, '__name__', 'tool')}_parameters",
            __config__=ConfigDict(extra="forbid", populate_by_name=False),
            **fields,
        )
        input_schema = _strip_titles(model.model_json_schema(by_alias=True))
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
        raise CatalogError(f"{where}: a parameter type has no JSON Schema ({exc}); use JSON "
                           "types, enums, dataclasses or pydantic models") from exc
    input_schema.pop("title", None)

    returns = hints.get("return", inspect.Signature.empty)
    output_schema: dict[str, Any] | None = None
    adapter: TypeAdapter[Any] | None = None
    if returns not in _NO_VALUE:
        try:
            adapter = TypeAdapter(returns)
            output_schema = _strip_titles(adapter.json_schema(mode="serialization"))
        except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
            raise CatalogError(f"{where}: the return type {returns!r} has no JSON Schema "
                               f"({exc}); return JSON types or a pydantic model") from exc
    return SignatureSchema(model, field_for_param, input_schema, output_schema, adapter)


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, located by parameter name (the aliases), without input echo."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(parameters)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
