"""OpenAPI 3.0/3.1 operations as capabilities (extra ``dagwright[openapi]``).

Libraries: ``openapi-spec-validator`` validates the spec (3.0 and 3.1 rules, each error
located by its JSON path) and ``jsonschema-path``, which it is built on, follows every
``$ref`` (local, other files, URLs) through the ``referencing`` library, so the input and
output schemas handed to the engine are self-contained: references are inlined, and a
recursive one becomes a ``$defs`` entry. Both are maintained by the python-openapi
project, which also publishes openapi-core; prance, the older alternative, resolves
references but brings its own parser stack.

Each operation becomes one capability named by its ``operationId`` (or ``<method>_<path>``
without one). Its input schema is an object whose properties are the operation's path,
query and header parameters, plus ``body`` for a JSON request body. A call renders the
path template, the query string, the headers and the body; the answer needs no envelope:
a 2xx JSON body is the output, and error statuses are classified by the status table in
``docs/tools.md`` (400/422 carry the body in ``details["body"]`` for layer 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import httpx
import yaml
from pydantic import ValidationError

from orchestration._transport import CallResult
from orchestration.capability import IDEMPOTENT_METHODS, Capability
from orchestration.errors import CatalogError
from orchestration.protocol import ErrorCategory, ErrorSource, StepError, classify_http_response
from orchestration.sources import SourceListing
from orchestration.sources._runtime import SourceClosed, SourceRuntime

__all__ = [
    "METHODS",
    "OpenAPIInvoker",
    "OpenAPISource",
    "Operation",
    "classify_answer",
    "identifier"
]

try:
    import jsonschema.exceptions
    from jsonschema_path import SchemaPath
    from openapi_spec_validator.shortcuts import get_validator_cls
    from openapi_spec_validator.validation.exceptions import ValidatorDetectError
    from referencing.exceptions import Unresolvable
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise CatalogError(
        "OpenAPI specs need the 'openapi' extra: pip install 'dagwright[openapi]' "
        f"({_missing})") from _missing

log = logging.getLogger("dagwright.sources.openapi")

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_JSON_MEDIA = re.compile(r"^application/(?:[\w.-]+\+)?json\b", re.IGNORECASE)


def identifier(text: str, fallback: str) -> str:
    """``text`` as a catalog name: other characters become ``_``, a leading digit gets one."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.-")
    if not name:
        return fallback
    return name if _NAME.match(name) else f"_{name}"


# --- schemas --------------------------------------------------------------------------
def _ref_of(node: Any) -> str | None:
    return node.get("$ref") if isinstance(node, dict) and isinstance(node.get("$ref"), str) else None


class _Materializer:
    """Copies a schema out of the spec with every ``$ref`` followed.

    A reference is inlined, except one that leads back into a schema being copied
    (``Pet.children: [Pet]``): that target becomes ``$defs/<name>`` and is referenced
    locally, which the engine's validator and coercer resolve. OpenAPI 3.0's dialect is
    translated where it differs from JSON Schema (``nullable``, boolean
    ``exclusiveMinimum``/``exclusiveMaximum``).
    """

    def __init__(self, oas30: bool) -> None:
        self.oas30 = oas30
        self.defs: dict[str, Any] = {}
        self._named: dict[int, str] = {}
        self._open: set[int] = set()

    def schema(self, path: SchemaPath, ref: str | None = None) -> Any:
        with path.resolve() as resolved:
            node = resolved.contents
        if not isinstance(node, dict | list):
            return node
        key = id(node)
        if key in self._named and key not in self._open:
            return {"$ref": f"#/$defs/{self._named[key]}"}
        if key in self._open:  # a cycle: the target becomes a named definition
            name = self._named.get(key) or self._new_name(ref)
            self._named[key] = name
            return {"$ref": f"#/$defs/{name}"}
        self._open.add(key)
        try:
            out: Any
            if isinstance(node, list):
                out = [self.schema(path / i, _ref_of(item)) for i, item in enumerate(node)]
            else:
                out = {k: self.schema(path / k, _ref_of(v)) for k, v in node.items() if k != "$ref"}
                if self.oas30:
                    out = _from_oas30(out)
        finally:
            self._open.discard(key)
        if key in self._named:
            self.defs[self._named[key]] = out
            return {"$ref": f"#/$defs/{self._named[key]}"}
        return out

    def _new_name(self, ref: str | None) -> str:
        base = identifier((ref or "schema").rsplit("/", 1)[-1], "schema")
        name, n = base, 2
        while name in self.defs or name in self._named.values():
            name, n = f"{base}_{n}", n + 1
        return name

    def finish(self, schema: dict[str, Any]) -> dict[str, Any]:
        if self.defs:
            schema["$defs"] = {**schema.get("$defs", {}), **self.defs}
        return schema


def _from_oas30(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0 schema keywords that mean something else in JSON Schema."""
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), bool) and node.pop(bound) and limit in node:
            node[bound] = node.pop(limit)
    if node.get("nullable") is True:
        node.pop("nullable")
        if isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
            if isinstance(node.get("enum"), list) and None not in node["enum"]:
                node["enum"] = [*node["enum"], None]
        else:
            node = {"anyOf": [node, {"type": "null"}]}
    elif isinstance(node.get("nullable"), bool):
        node.pop("nullable")
    return node


# --- operations -----------------------------------------------------------------------
@dataclass
class _Param:
    name: str
    location: str  # path | query | header
    style: str
    explode: bool


@dataclass
class Operation:
    """What a call needs to render a request for one operation."""

    operation_id: str
    method: str
    path: str
    params: list[_Param] = field(default_factory=list)
    body_key: str | None = None

    def render(self, params: Mapping[str, Any]) -> tuple[str, list[tuple[str, str]], dict[str, str], Any]:
        """(path, query pairs, headers, json body or ...) from a step's parameters."""
        path = self.path
        query: list[tuple[str, str]] = []
        headers: dict[str, str] = {}
        for p in self.params:
            if p.name not in params or params[p.name] is None:
                if p.location == "path":
                    raise ValueError(f"path parameter {p.name!r} is missing")
                continue
            value = params[p.name]
            if p.location == "path":
                path = path.replace("{" + p.name + "}", quote(_simple(value), safe=""))
            elif p.location == "header":
                headers[p.name] = _simple(value)
            else:
                query.extend(_query_pairs(p, value))
        body: Any = ...
        if self.body_key is not None and self.body_key in params:
            body = params[self.body_key]
        return path, query, headers, body


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _simple(value: Any) -> str:
    """``style: simple`` (path and header parameters)."""
    if isinstance(value, list):
        return ",".join(_scalar(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k},{_scalar(v)}" for k, v in value.items())
    return _scalar(value)


def _query_pairs(p: _Param, value: Any) -> list[tuple[str, str]]:
    """``style: form`` (the default), ``spaceDelimited``, ``pipeDelimited``, ``deepObject``."""
    if isinstance(value, list):
        if p.explode and p.style == "form":
            return [(p.name, _scalar(v)) for v in value]
        sep = {"spaceDelimited": " ", "pipeDelimited": "|"}.get(p.style, ",")
        return [(p.name, sep.join(_scalar(v) for v in value))]
    if isinstance(value, dict):
        if p.style == "deepObject":
            return [(f"{p.name}[{k}]", _scalar(v)) for k, v in value.items()]
        if p.explode:
            return [(str(k), _scalar(v)) for k, v in value.items()]
        return [(p.name, ",".join(f"{k},{_scalar(v)}" for k, v in value.items()))]
    return [(p.name, _scalar(value))]


# --- the source -----------------------------------------------------------------------
class OpenAPISource:
    """One OpenAPI spec: its operations as capabilities, one pooled HTTP client."""

    def __init__(
        self,
        spec: Any,
        *,
        base_url: str | None,
        operations: Sequence[str] | None,
        name: str | None,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
        overrides: Mapping[str, Mapping[str, Any]] | None,
        runtime: SourceRuntime,
    ) -> None:
        self.spec = str(spec)
        self.is_url = bool(re.match(r"^https?://", self.spec))
        self.label = f"openapi:{self.spec}"
        self.refresh_s: float | None = None
        self.base_url_override = base_url
        self.operations = list(operations) if operations is not None else None
        self.name = name
        self.headers = {str(k): str(v) for k, v in (headers or {}).items()}
        self.timeout_s = timeout_s
        self.overrides = {str(k): dict(v) for k, v in (overrides or {}).items()}
        self.runtime = runtime
        self.base_url = ""
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._all_names: list[str] = []

    # --- loading ------------------------------------------------------------------
    def _read(self) -> tuple[dict[str, Any], str]:
        """The spec document and its base URI (for relative ``$ref``s and server URLs)."""
        try:
            if self.is_url:
                response = httpx.get(self.spec, timeout=30.0, follow_redirects=True)
                response.raise_for_status()
                text, base_uri = response.text, self.spec
            else:
                path = Path(self.spec)
                text, base_uri = path.read_text(encoding="utf-8"), path.resolve().as_uri()
        except (OSError, httpx.HTTPError) as exc:
            raise CatalogError(f"{self.label}: cannot read the spec: {exc}") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CatalogError(f"{self.label}: the spec is not valid YAML/JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise CatalogError(f"{self.label}: the spec must be a mapping with 'openapi' and 'paths'")
        return data, base_uri

    def _validate(self, data: dict[str, Any], root: SchemaPath) -> None:
        version = str(data.get("openapi", ""))
        if not version.startswith("3."):
            found = f"swagger {data['swagger']}" if "swagger" in data else (version or "no version")
            raise CatalogError(f"{self.label}: only OpenAPI 3.0 and 3.1 are supported, the spec "
                               f"says {found} (field 'openapi')")
        try:
            validator = get_validator_cls(data)(root)
            error = jsonschema.exceptions.best_match(validator.iter_errors())
        except ValidatorDetectError as exc:
            raise CatalogError(f"{self.label}: unknown OpenAPI version {version!r}") from exc
        except Unresolvable as exc:
            raise CatalogError(f"{self.label}: a $ref does not resolve: {exc}") from exc
        if error is not None:
            where = getattr(error, "json_path", None) or "$"
            raise CatalogError(f"{self.label}: the spec does not validate at {where}: "
                               f"{error.message}")

    def load_sync(self) -> SourceListing:
        """Read, validate and resolve the spec; one capability per (selected) operation."""
        data, base_uri = self._read()
        root = SchemaPath.from_dict(data, base_uri=base_uri)
        self._validate(data, root)
        self.base_url = self._base_url(data, base_uri)
        tool = self.name or identifier(str(data.get("info", {}).get("title", "")).lower(), "api")
        if not _NAME.match(tool):
            raise CatalogError(f"{self.label}: tool name {tool!r} must match {_NAME.pattern}")
        oas30 = str(data["openapi"]).startswith("3.0")
        caps: list[Capability] = []
        seen: dict[str, str] = {}
        self._all_names = []
        try:
            for path_key, path_item in (root / "paths").str_items():
                with path_item.open() as item:
                    methods = [m for m in METHODS if m in item]
                for method in methods:
                    cap = self._capability(tool, path_key, path_item, method, oas30)
                    if cap is None:
                        continue
                    if cap.name in seen:
                        raise CatalogError(f"{self.label}: operations {seen[cap.name]} and "
                                           f"{method.upper()} {path_key} share the name {cap.name!r}")
                    seen[cap.name] = f"{method.upper()} {path_key}"
                    caps.append(cap)
        except Unresolvable as exc:
            raise CatalogError(f"{self.label}: a $ref does not resolve: {exc}") from exc
        if self.operations is not None:
            known = {c.name for c in caps}
            missing = [o for o in self.operations if identifier(o, o) not in known]
            if missing:
                raise CatalogError(f"{self.label}: no operation(s) {', '.join(missing)} "
                                   f"(it has: {', '.join(sorted(self._all_names)) or 'none'})")
        info = data.get("info", {})
        description = str(info.get("description") or info.get("title") or "")
        return SourceListing(caps, {tool: description})

    def _base_url(self, data: dict[str, Any], base_uri: str) -> str:
        if self.base_url_override:
            return self.base_url_override.rstrip("/")
        servers = data.get("servers") or []
        if servers and isinstance(servers[0], dict) and servers[0].get("url"):
            server = servers[0]
            url = str(server["url"])
            for var, spec in (server.get("variables") or {}).items():
                url = url.replace("{" + var + "}", str(spec.get("default", "")))
            if re.match(r"^https?://", url):
                return url.rstrip("/")
            if self.is_url:
                return urljoin(base_uri, url).rstrip("/")
        raise CatalogError(f"{self.label}: no absolute server URL in the spec's 'servers'; "
                           "give base_url=...")

    def _capability(self, tool: str, path_key: str, path_item: SchemaPath, method: str,
                    oas30: bool) -> Capability | None:
        op_path = path_item / method
        with op_path.open() as op:
            operation_id = op.get("operationId")
            summary, description = op.get("summary"), op.get("description")
            x_idempotent = op.get("x-idempotent")
            key_header = op.get("x-idempotency-key-header")
        name = identifier(str(operation_id) if operation_id else
                          f"{method}_{path_key}".replace("{", "").replace("}", ""), method)
        self._all_names.append(name)
        if self.operations is not None and not ({name, str(operation_id)} & set(self.operations)):
            return None
        where = f"{self.label}: operation {name} ({method.upper()} {path_key})"
        materializer = _Materializer(oas30)
        properties: dict[str, Any] = {}
        required: list[str] = []
        operation = Operation(operation_id=name, method=method.upper(), path=path_key)

        # path-level parameters, overridden by the operation's own (same name and location)
        declared: dict[tuple[str, str], SchemaPath] = {}
        for source in (path_item, op_path):
            if "parameters" in source:
                for param_path in source / "parameters":
                    with param_path.open() as param:
                        declared[(param["name"], param["in"])] = param_path
        for (pname, location), param_path in declared.items():
            if location == "cookie":
                log.warning("%s: cookie parameter %r is not sent", where, pname)
                continue
            with param_path.open() as param:
                style = param.get("style") or ("form" if location == "query" else "simple")
                explode = param.get("explode", style == "form")
                is_required = bool(param.get("required")) or location == "path"
                text = param.get("description")
                has_schema, content = "schema" in param, param.get("content")
            if pname in properties:
                raise CatalogError(f"{where}: parameter {pname!r} appears in two locations; "
                                   "rename one with an override of the spec")
            if has_schema:
                schema = materializer.schema(param_path / "schema")
            elif content:
                media = next(iter(content))
                schema = materializer.schema(param_path / "content" / media / "schema")
            else:
                schema = {}
            if text and isinstance(schema, dict) and "description" not in schema:
                schema = {**schema, "description": text}
            properties[pname] = schema
            if is_required:
                required.append(pname)
            operation.params.append(_Param(pname, location, style, bool(explode)))

        if "requestBody" in op_path:
            body_path = op_path / "requestBody"
            with body_path.open() as body:
                content = body.get("content") or {}
                body_required = bool(body.get("required"))
                body_text = body.get("description")
            media = next((m for m in content if _JSON_MEDIA.match(m)), None)
            if media is None:
                message = f"{where}: only JSON request bodies are supported (it takes {', '.join(content)})"
                if self.operations is not None:
                    raise CatalogError(message)
                log.warning("%s; operation left out", message)
                return None
            body_key = "body" if "body" not in properties else "_body"
            schema = (materializer.schema(body_path / "content" / media / "schema")
                      if "schema" in content[media] else {})
            if body_text and isinstance(schema, dict) and "description" not in schema:
                schema = {**schema, "description": body_text}
            properties[body_key] = schema
            if body_required:
                required.append(body_key)
            operation.body_key = body_key

        input_schema: dict[str, Any] = {"type": "object", "properties": properties,
                                        "additionalProperties": False}
        if required:
            input_schema["required"] = required
        input_schema = materializer.finish(input_schema)

        fields: dict[str, Any] = {
            "tool": tool, "name": name,
            "description": "\n\n".join(str(t) for t in (summary, description) if t),
            "input_schema": input_schema,
            "output_schema": self._output_schema(op_path, oas30),
            "method": operation.method,
            "headers": dict(self.headers),
            "timeout_s": self.timeout_s,
            "idempotent": bool(x_idempotent) if isinstance(x_idempotent, bool)
            else operation.method in IDEMPOTENT_METHODS,
            "idempotency_key_header": key_header if isinstance(key_header, str) else None,
            "source": self.label,
        }
        override = self.overrides.get(name) or self.overrides.get(str(operation_id)) or {}
        forbidden = {"tool", "name", "invoker", "url", "function", "source", "method"} & set(override)
        if forbidden:
            raise CatalogError(f"{where}: overrides may not set {', '.join(sorted(forbidden))}")
        fields.update(override)
        try:
            return Capability(**fields, invoker=OpenAPIInvoker(self, operation))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}"
                                 for e in exc.errors())
            raise CatalogError(f"{where}: {problems}") from exc

    @staticmethod
    def _output_schema(op_path: SchemaPath, oas30: bool) -> dict[str, Any] | None:
        """The JSON schema of the first 2xx response that declares one."""
        if "responses" not in op_path:
            return None
        responses = op_path / "responses"
        for status in sorted(responses.str_keys()):
            if not str(status).startswith("2"):
                continue
            with (responses / status).open() as response:
                content = response.get("content") or {}
            media = next((m for m in content if _JSON_MEDIA.match(m)), None)
            if media is not None and "schema" in content[media]:
                materializer = _Materializer(oas30)
                schema = materializer.schema(responses / status / "content" / media / "schema")
                return materializer.finish(schema) if isinstance(schema, dict) else None
        return None

    async def load(self) -> SourceListing:
        return await asyncio.to_thread(self.load_sync)

    # --- calling ------------------------------------------------------------------
    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = httpx.AsyncClient(follow_redirects=False)
            self._client_loop = loop
        return self._client

    async def send(self, operation: Operation, params: dict[str, Any], timeout_s: float,
                   extra_headers: Mapping[str, str]) -> CallResult:
        """One request on the runtime loop, its answer or failure classified."""
        try:
            path, query, param_headers, body = operation.render(params)
        except ValueError as exc:
            return CallResult(error=StepError(
                category=ErrorCategory.INPUT_ERROR, code="BAD_ARGUMENTS", message=str(exc),
                source=ErrorSource.VALIDATION, retryable=True, request_sent=False))
        url = self.base_url + path
        headers = {**self.headers, **dict(extra_headers), **param_headers}
        kwargs: dict[str, Any] = {"params": query, "headers": headers, "timeout": timeout_s}
        if body is not ...:
            kwargs["json"] = body
        try:
            response = await self._http().request(operation.method, url, **kwargs)
        except (httpx.ConnectTimeout, httpx.PoolTimeout):
            return _fault(ErrorCategory.TIMEOUT, "CONNECT_TIMEOUT",
                          f"could not connect to {url} within {timeout_s:g}s", sent=False)
        except httpx.TimeoutException:
            return _fault(ErrorCategory.TIMEOUT, "READ_TIMEOUT",
                          f"{url} did not answer within {timeout_s:g}s", sent=True)
        except httpx.ConnectError as exc:
            return _fault(ErrorCategory.CONNECTION_ERROR, "CONNECTION_REFUSED",
                          f"cannot connect to {url}: {exc}", sent=False)
        except httpx.HTTPError as exc:
            return _fault(ErrorCategory.CONNECTION_ERROR, "CONNECTION_DROPPED",
                          f"{url}: {type(exc).__name__}: {exc}", sent=True)
        return classify_answer(response.status_code, response.content, dict(response.headers))

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._client_loop is asyncio.get_running_loop():
            await client.aclose()
        self._client_loop = None


def _fault(category: ErrorCategory, code: str, message: str, *, sent: bool) -> CallResult:
    return CallResult(error=StepError(category=category, code=code, message=message,
                                      source=ErrorSource.TRANSPORT, retryable=True,
                                      request_sent=sent))


def classify_answer(status: int, body: bytes, headers: dict[str, str]) -> CallResult:
    """A plain REST answer: 2xx → its JSON (or text, or None when empty); an error status
    → the protocol's status table, with a 400/422 body kept in ``details["body"]``."""
    content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
    text = body.decode("utf-8", errors="replace")
    parsed: Any = None
    is_json = False
    if text.strip():
        with contextlib.suppress(ValueError):
            parsed, is_json = json.loads(text), True
    if 200 <= status < 300:
        if not text.strip():
            return CallResult(data=None)
        if is_json:
            return CallResult(data=parsed)
        if _JSON_MEDIA.match(content_type):
            return CallResult(error=StepError(
                category=ErrorCategory.INVALID_RESPONSE, code="NON_JSON_RESPONSE",
                source=ErrorSource.RESPONSE,
                message=f"HTTP {status} says JSON but the body is not: {text[:200]!r}",
                http_status=status))
        return CallResult(data=text)
    classified = classify_http_response(status, body, headers)
    error = classified.error
    assert error is not None
    if status in (400, 422) and is_json:
        error = error.model_copy(update={"details": {**error.details, "body": parsed}})
    return CallResult(error=error)


class OpenAPIInvoker:
    """The catalog's invoker for one operation: hands the request to the runtime loop,
    whose single HTTP pool serves every run, loop and thread."""

    def __init__(self, source: OpenAPISource, operation: Operation) -> None:
        self.source = source
        self.operation = operation

    async def call(
        self, params: dict[str, Any], *, timeout_s: float, headers: Mapping[str, str]
    ) -> CallResult:
        try:
            return await self.source.runtime.run(
                self.source.send(self.operation, params, timeout_s, headers))
        except SourceClosed as exc:
            return CallResult(error=StepError(
                category=ErrorCategory.CONNECTION_ERROR, code="SOURCE_CLOSED",
                source=ErrorSource.TRANSPORT,
                message=f"{self.source.label}: {exc}", retryable=True, request_sent=True))

    def __repr__(self) -> str:
        return f"OpenAPIInvoker({self.operation.method} {self.operation.path})"
