"""Swagger 2.0 documents read as the OpenAPI 3.0 they translate to.

Many real APIs still publish Swagger 2.0 (Slack's Web API, SendGrid, Kubernetes, Docker
Engine). The translation is the one the OpenAPI 3.0 specification describes and
converters such as ``swagger2openapi`` apply, done piece by piece as the mapping meets
each piece, so a ``$ref`` keeps resolving against the file that holds it:

* ``host``, ``basePath`` and ``schemes`` → the server URL;
* ``securityDefinitions`` → ``securitySchemes`` (``basic`` → HTTP basic, OAuth2's
  ``application`` flow → client credentials);
* a non-body parameter's own ``type``/``format``/``items``/``enum``/bounds → its
  ``schema``, ``collectionFormat`` → ``style``/``explode``;
* the ``body`` parameter → a request body in the operation's ``consumes`` media type;
  ``formData`` parameters → one form (or multipart, with a ``file``) body;
* a response's ``schema`` → its JSON content (when the operation ``produces`` JSON).

Schemas need nothing more: 2.0's dialect is 3.0's (``type: file`` included), and
``#/definitions/...`` references resolve as the JSON pointers they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["base_url", "body_content", "form_schema", "is_swagger2", "parameter",
           "response", "security_schemes"]

_SCHEMA_KEYS = ("type", "format", "items", "default", "maximum", "exclusiveMaximum",
                "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern",
                "maxItems", "minItems", "uniqueItems", "enum", "multipleOf")
_JSON = re.compile(r"^application/(?:[\w.-]+\+)?json\b|^\*/\*$", re.IGNORECASE)
# collectionFormat → (style, explode) in a query; a path or header takes simple/false
_COLLECTION = {"csv": ("form", False), "multi": ("form", True), "ssv": ("spaceDelimited", False),
               "pipes": ("pipeDelimited", False), "tsv": ("form", False)}


def is_swagger2(document: Mapping[str, Any]) -> bool:
    return str(document.get("swagger", "")).startswith("2.")


def base_url(document: Mapping[str, Any], spec_url: str | None) -> str | None:
    """``scheme://host/basePath``; without ``host`` the spec's own host when it was given
    as a URL (as 2.0 says), else None (the user gives ``base_url``)."""
    host = document.get("host")
    base_path = str(document.get("basePath") or "")
    schemes = [str(s) for s in document.get("schemes") or [] if isinstance(s, str)]
    if not isinstance(host, str) or not host:
        if spec_url is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(spec_url)
        scheme, host = parts.scheme, parts.netloc
    else:
        scheme = "https" if "https" in schemes or not schemes else schemes[0]
    return f"{scheme}://{host}{base_path}".rstrip("/")


def security_schemes(document: Mapping[str, Any]) -> dict[str, Any]:
    """``securityDefinitions`` as OpenAPI 3 ``securitySchemes``."""
    out: dict[str, Any] = {}
    definitions = document.get("securityDefinitions")
    if not isinstance(definitions, Mapping):
        return out
    for name, spec in definitions.items():
        if not isinstance(spec, Mapping):
            continue
        kind = spec.get("type")
        if kind == "basic":
            out[str(name)] = {"type": "http", "scheme": "basic"}
        elif kind == "oauth2":
            flow = {"application": "clientCredentials", "accessCode": "authorizationCode",
                    "implicit": "implicit", "password": "password"}.get(str(spec.get("flow")),
                                                                        str(spec.get("flow")))
            details = {k: spec[k] for k in ("tokenUrl", "authorizationUrl", "scopes") if k in spec}
            out[str(name)] = {"type": "oauth2", "flows": {flow: details}}
        else:
            out[str(name)] = dict(spec)
    return out


def _schema_of(node: Mapping[str, Any]) -> dict[str, Any]:
    """A 2.0 parameter's (or ``items``') own keywords as a JSON Schema."""
    schema = {k: node[k] for k in _SCHEMA_KEYS if k in node}
    if isinstance(schema.get("items"), Mapping):
        schema["items"] = _schema_of(schema["items"])
    return schema


def parameter(param: Mapping[str, Any]) -> dict[str, Any]:
    """A non-body 2.0 parameter as an OpenAPI 3 parameter (a 3.0 one is returned as is)."""
    if "schema" in param or "content" in param:
        return dict(param)
    out = {k: v for k, v in param.items()
           if k in ("name", "in", "description", "required", "deprecated")}
    out["schema"] = _schema_of(param)
    if out["schema"].get("type") == "array":
        style, explode = _COLLECTION.get(str(param.get("collectionFormat") or "csv"),
                                         ("form", False))
        if param.get("in") in ("path", "header"):
            style = "simple"
        out["style"], out["explode"] = style, explode
    return out


def _consumes(op: Mapping[str, Any], document: Mapping[str, Any]) -> list[str]:
    found = op.get("consumes") or document.get("consumes") or []
    return [str(m) for m in found if isinstance(m, str)] if isinstance(found, list) else []


def body_content(param: Mapping[str, Any], op: Mapping[str, Any],
                 document: Mapping[str, Any]) -> dict[str, Any]:
    """The ``content`` of the request body a ``body`` parameter stands for."""
    medias = _consumes(op, document) or ["application/json"]
    return {media: {"schema": param.get("schema", {})} for media in medias}


def form_schema(params: list[Mapping[str, Any]], op: Mapping[str, Any],
                document: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``formData`` parameters as one body: its ``content`` and its description."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in params:
        name = str(param.get("name"))
        field = _schema_of(param)
        if param.get("description"):
            field["description"] = str(param["description"])
        properties[name] = field
        if param.get("required"):
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    medias = _consumes(op, document)
    has_file = any(p.get("type") == "file" for p in params)
    media = ("multipart/form-data" if has_file or "multipart/form-data" in medias
             else "application/x-www-form-urlencoded")
    return {media: {"schema": schema}}, schema


def response(raw: Mapping[str, Any], op: Mapping[str, Any],
             document: Mapping[str, Any]) -> Mapping[str, Any]:
    """A 2.0 response (``schema`` beside the description) as a 3.0 one with content."""
    if "schema" not in raw or "content" in raw:
        return raw
    produces = op.get("produces") or document.get("produces") or ["application/json"]
    medias = [str(m) for m in produces if isinstance(m, str)] if isinstance(produces, list) else []
    media = next((m for m in medias if _JSON.match(m)), None)
    if media is None:
        return {k: v for k, v in raw.items() if k != "schema"}
    return {**{k: v for k, v in raw.items() if k != "schema"},
            "content": {media: {"schema": raw["schema"]}}}
