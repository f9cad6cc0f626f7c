"""One OpenAPI document as a source: its operations as capabilities, one pooled HTTP client.

Loading never refuses a whole document for one operation. Each operation is mapped on
its own; one that cannot be (a ``$ref`` that does not resolve, a parameter without a
name) is left out with its reason and JSON pointer, and what was
repaired on the way (a duplicate ``required`` entry, a schema cut to size, a spec
validation error) is kept as a note: both are the listing's ``notes``, which the catalog
offers as ``Catalog.skipped`` / ``Catalog.notes`` and ``dagwright tools --skipped``
prints. ``strict=True`` refuses the document at the first problem instead, with a
:class:`CatalogError` naming the operation and the pointer. Only what concerns the whole
document (it cannot be read, it is neither OpenAPI 3 nor Swagger 2.0, it has no server
URL and no ``base_url`` was given) is always an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from pydantic import ValidationError

from orchestration._transport import CallResult
from orchestration.capability import IDEMPOTENT_METHODS, Capability
from orchestration.errors import CatalogError
from orchestration.protocol import (
    ErrorCategory,
    ErrorSource,
    StepError,
)
from orchestration.sources import SourceListing, SourceNote
from orchestration.sources._runtime import SourceClosed, SourceRuntime
from orchestration.sources.openapi import _swagger2 as swagger2
from orchestration.sources.openapi._calls import OperationClient
from orchestration.sources.openapi._documents import Documents, pointer_of
from orchestration.sources.openapi._names import NAME, identifier, tool_identifier
from orchestration.sources.openapi._requests import (
    FILE_INPUT_SCHEMA,
    JSON_MEDIA,
    Body,
    Operation,
    Param,
)
from orchestration.sources.openapi._schemas import SchemaBuilder, SchemaProblem, _cause
from orchestration.sources.openapi._security import Credentials, Scheme, read_schemes

__all__ = ["METHODS", "OpenAPIInvoker", "OpenAPISource"]

log = logging.getLogger("dagwright.sources.openapi")

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_FORM = "application/x-www-form-urlencoded"
_XML = re.compile(r"[/+]xml\b", re.IGNORECASE)
_MULTIPART = re.compile(r"^multipart/", re.IGNORECASE)
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})
_MAX_REF_HOPS = 32


class _Skip(Exception):
    """This operation cannot be mapped (its pointer and the reason)."""

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(message)
        self.pointer = pointer
        self.message = message


class OpenAPISource:
    """One OpenAPI document: its operations as capabilities, one pooled HTTP client."""

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
        strict: bool = False,
        validate: bool = False,
        credentials: Mapping[str, Any] | None = None,
        allow_remote_refs: bool = False,
        upload_dirs: Sequence[str | Path] = (),
        token_urls: Sequence[str] = (),
    ) -> None:
        self.spec = str(spec)
        self.is_url = bool(re.match(r"^https?://", self.spec, re.IGNORECASE))
        self.label = f"openapi:{self.spec}"
        self.refresh_s: float | None = None
        self.base_url_override = base_url
        self.operations = list(operations) if operations is not None else None
        self.name = name
        self.headers = {str(k): str(v) for k, v in (headers or {}).items()}
        self.timeout_s = timeout_s
        self.overrides = {str(k): dict(v) for k, v in (overrides or {}).items()}
        self.runtime = runtime
        self.strict = strict
        self.validate = validate
        self.allow_remote_refs = allow_remote_refs
        self.upload_dirs = [Path(d).expanduser().resolve() for d in upload_dirs]
        self._given_credentials = dict(credentials or {})
        self.token_urls = list(token_urls)
        self.credentials: Credentials | None = None
        self.schemes: dict[str, Scheme] = {}
        self.default_security: list[list[str]] = []
        self.base_url = ""
        self.client = OperationClient(self)
        """Sends the operations' requests (reads the fields above as they are then)."""
        self._all_names: list[str] = []
        self._notes: list[SourceNote] = []
        self._current = "(document)"
        self._swagger2: dict[str, Any] | None = None  # the root, when it is Swagger 2.0

    # --- loading ------------------------------------------------------------------
    def load_sync(self) -> SourceListing:
        """Read the document and map every (selected) operation; see the module docstring."""
        docs = Documents(self.spec, self.label, allow_remote_refs=self.allow_remote_refs)
        try:
            return self._load(docs)
        finally:
            docs.close()

    def _load(self, docs: Documents) -> SourceListing:
        data = docs.root
        if not isinstance(data, dict):
            raise CatalogError(f"{self.label}: the spec must be a mapping with 'openapi' and "
                               f"'paths', got {type(data).__name__}")
        version = str(data.get("openapi", ""))
        self._swagger2 = data if swagger2.is_swagger2(data) else None
        if not re.match(r"^3\.[01]\.", version + ".") and self._swagger2 is None:
            found = (f"swagger {data['swagger']}" if "swagger" in data
                     else (f"openapi {version}" if version else "no version"))
            raise CatalogError(f"{self.label}: only OpenAPI 3.0, 3.1 and Swagger 2.0 are "
                               f"supported, the spec says {found} (field 'openapi')")
        self._notes = []
        self.base_url = self._base_url(data, docs.base_uri)
        info: dict[str, Any] = data["info"] if isinstance(data.get("info"), dict) else {}
        tool = self.name or tool_identifier(str(info.get("title") or ""))
        if not NAME.match(tool):
            raise CatalogError(f"{self.label}: tool name {tool!r} must match {NAME.pattern}")
        components: dict[str, Any] = (data["components"] if isinstance(data.get("components"), dict)
                                      else {})
        self.schemes = read_schemes(self._deref_map(
            components.get("securitySchemes") if self._swagger2 is None
            else swagger2.security_schemes(data), docs))
        self.default_security = _alternatives(data.get("security"))
        self.credentials = Credentials(self.label, tool, self._given_credentials, self.token_urls)
        self._check_credentials()
        self.credentials.check(self.schemes)
        builder = SchemaBuilder(oas30=version.startswith("3.0") or self._swagger2 is not None,
                                note=self._note, swagger2=self._swagger2 is not None)
        caps: list[Capability] = []
        seen: dict[str, str] = {}
        self._all_names = []
        paths = data.get("paths")
        if paths is not None and not isinstance(paths, dict):
            self._note_or_raise("#/paths", "'paths' is not a mapping; no operations")
            paths = None
        for path_key, raw_item in (paths or {}).items():
            path_key = str(path_key)
            if path_key.startswith("x-"):  # an extension of the Paths object, not a path
                continue
            item_pointer = pointer_of("paths", path_key)
            self._current = path_key
            try:
                item, item_resolver = _follow(raw_item, docs.resolver, item_pointer)
            except _Skip as skip:
                self._skip(f"(every operation of {path_key})", skip.pointer, skip.message)
                continue
            if not isinstance(item, dict):
                self._skip(f"(every operation of {path_key})", item_pointer,
                           "the path item is not a mapping")
                continue
            for method in METHODS:
                if method not in item:
                    continue
                cap = self._map(tool, path_key, item, item_resolver, method, builder, seen)
                if cap is not None:
                    caps.append(cap)
        self._current = "(document)"
        if self.validate or self.strict:  # after the mapping, whose reports are sharper
            self._validate(docs)
        if self.operations is not None:
            known = {c.name for c in caps} | {str(getattr(c.invoker, "operation_id", ""))
                                              for c in caps}
            missing = [o for o in self.operations if identifier(o, o) not in known]
            if missing:
                raise CatalogError(f"{self.label}: no operation(s) {', '.join(missing)} "
                                   f"({_offered(missing, self._all_names)})")
        description = str(info.get("description") or info.get("title") or "")
        # every definition and every piece around them was checked (and repaired) once
        return SourceListing(caps, {tool: description}, list(self._notes), schemas_checked=True)

    def _map(self, tool: str, path_key: str, item: dict[str, Any], item_resolver: Any,
             method: str, builder: SchemaBuilder, seen: dict[str, str]) -> Capability | None:
        """One operation as a capability, or None (filtered out or skipped, and noted)."""
        pointer = pointer_of("paths", path_key, method)
        where = f"{method.upper()} {path_key}"
        unresolved: _Skip | None = None
        try:  # an operation may itself be a $ref (DigitalOcean's files hold one each)
            op, op_resolver = _follow(item[method], item_resolver, pointer)
        except _Skip as problem:
            op, op_resolver, unresolved = None, item_resolver, problem
        operation_id = op.get("operationId") if isinstance(op, dict) else None
        name = identifier(str(operation_id), "operation") if operation_id else identifier(
            f"{method}_{path_key}".replace("{", "").replace("}", ""), method)
        self._all_names.append(name)
        if self.operations is not None and not ({name, str(operation_id)} & set(self.operations)):
            return None
        self._current = f"{name} ({where})"
        if name in seen:
            renamed = identifier(f"{name}_{method}_{path_key}".replace("{", "").replace("}", ""),
                                 name)
            self._note_or_raise(pointer, f"operationId {name!r} is also used by {seen[name]}; "
                                f"this one is named {renamed!r}")
            name = renamed
        try:
            if unresolved is not None:
                raise unresolved
            if not isinstance(op, dict):
                raise _Skip(pointer, "the operation is not a mapping")
            cap = self._capability(tool, name, path_key, item, item_resolver, method, op,
                                   op_resolver, pointer, builder)
        except (_Skip, SchemaProblem) as problem:
            self._skip(self._current, problem.pointer, problem.message)
            return None
        except CatalogError:
            raise  # the user's own overrides are wrong: not the document's fault
        except Exception as exc:  # a shape nobody foresaw: this operation only
            self._skip(self._current, pointer, f"{type(exc).__name__}: {exc}")
            return None
        seen[name] = where
        return cap

    def _capability(self, tool: str, name: str, path_key: str, item: dict[str, Any],
                    item_resolver: Any, method: str, op: dict[str, Any], op_resolver: Any,
                    pointer: str, builder: SchemaBuilder) -> Capability:
        refs: set[str] = set()
        properties: dict[str, Any] = {}
        required: list[str] = []
        operation = Operation(operation_id=name, method=method.upper(), path=path_key,
                              security=_alternatives(op["security"]) if "security" in op else None)

        # path-level parameters, overridden by the operation's own (same name and location)
        declared: dict[tuple[str, str], tuple[dict[str, Any], Any, str]] = {}
        for owner, owner_resolver, owner_pointer in (
                (item, item_resolver, pointer.rsplit("/", 1)[0]), (op, op_resolver, pointer)):
            raw_params = owner.get("parameters") or []
            if not isinstance(raw_params, list):
                raise _Skip(f"{owner_pointer}/parameters", "'parameters' is not a list")
            for index, raw in enumerate(raw_params):
                where = f"{owner_pointer}/parameters/{index}"
                param, resolver = _follow(raw, owner_resolver, where)
                if self._swagger2 is not None and isinstance(param, dict) \
                        and param.get("in") not in ("body", "formData"):
                    param = swagger2.parameter(param)
                located = ("path", "query", "header", "cookie") + (
                    ("body", "formData") if self._swagger2 is not None else ())
                if not isinstance(param, dict) or not isinstance(param.get("name"), str) \
                        or param.get("in") not in located:
                    raise _Skip(where, "a parameter needs a 'name' and 'in' (path, query, "
                                "header or cookie" + (", body or formData"
                                                       if self._swagger2 is not None else "")
                                + ")")
                declared[(param["name"], param["in"])] = (param, resolver, where)
        body_params = [declared.pop(key) for key in list(declared)
                       if key[1] in ("body", "formData")]
        for (pname, location), (param, resolver, where) in declared.items():
            if location == "header" and pname.lower() in _IGNORED_HEADERS:
                continue  # OpenAPI: these header parameters are ignored
            style = str(param.get("style") or ("form" if location in ("query", "cookie")
                                                else "simple"))
            explode = param.get("explode", style == "form")
            key = pname if pname not in properties else f"{pname}_{location}"
            if key in properties:
                raise _Skip(where, f"parameter {pname!r} is declared twice")
            if "schema" in param:
                schema = builder.schema(param["schema"], resolver, f"{where}/schema", refs)
            elif isinstance(param.get("content"), dict) and param["content"]:
                media = next(iter(param["content"]))
                media_object = param["content"][media]
                schema = (builder.schema(media_object["schema"], resolver,
                                         f"{where}/content/{media}/schema", refs)
                          if isinstance(media_object, dict) and "schema" in media_object else {})
            else:
                schema = {}
            schema = builder.repair(schema, f"{where}/schema")
            text = param.get("description")
            if text and isinstance(schema, dict) and "description" not in schema:
                schema = {**schema, "description": str(text)}
            properties[key] = schema
            if param.get("required") or location == "path":
                required.append(key)
            operation.params.append(Param(key, pname, location, style, bool(explode),
                                          bool(param.get("allowReserved"))))

        body: Any = None
        body_pointer, resolver = f"{pointer}/requestBody", op_resolver
        if "requestBody" in op:
            body, resolver = _follow(op["requestBody"], op_resolver, body_pointer)
            if not isinstance(body, dict):
                raise _Skip(body_pointer, "the requestBody is not a mapping")
        elif body_params:  # Swagger 2.0: the body parameter, or the formData ones
            root = self._swagger2 or {}
            [*bodies] = (p for p in body_params if p[0]["in"] == "body")
            if bodies:
                param, resolver, body_pointer = bodies[0]
                body = {"content": swagger2.body_content(param, op, root),
                        "required": param.get("required"), "description": param.get("description")}
            else:
                content, _ = swagger2.form_schema([p[0] for p in body_params], op, root)
                body = {"content": content, "required": any(p[0].get("required")
                                                            for p in body_params)}
                _, resolver, body_pointer = body_params[0]
        if body is not None:
            content = body.get("content") if isinstance(body.get("content"), dict) else {}
            if content:
                body_key = "body" if "body" not in properties else "_body"
                spec, schema = self._body(content, resolver, body_key, body_pointer, builder, refs)
                text = body.get("description")
                if text and isinstance(schema, dict) and "description" not in schema:
                    schema = {**schema, "description": str(text)}
                properties[body_key] = schema
                if body.get("required"):
                    required.append(body_key)
                operation.body = spec

        input_schema: dict[str, Any] = {"type": "object", "properties": properties,
                                        "additionalProperties": False}
        if required:
            input_schema["required"] = required
        # the pieces were repaired one by one: what is left to check is the frame
        frame = builder.repair({**input_schema, "properties": dict.fromkeys(properties, True)},
                               pointer)
        input_schema = builder.assemble({**frame, "properties": properties}, pointer)
        summary, description = op.get("summary"), op.get("description")
        x_idempotent, key_header = op.get("x-idempotent"), op.get("x-idempotency-key-header")
        fields: dict[str, Any] = {
            "tool": tool, "name": name,
            "description": "\n\n".join(str(t) for t in (summary, description) if t),
            "input_schema": input_schema,
            "output_schema": self._output_schema(op, op_resolver, pointer, builder),
            "method": operation.method,
            "headers": dict(self.headers),
            "timeout_s": self.timeout_s,
            "idempotent": bool(x_idempotent) if isinstance(x_idempotent, bool)
            else operation.method in IDEMPOTENT_METHODS,
            "idempotency_key_header": key_header if isinstance(key_header, str) else None,
            "source": self.label,
        }
        operation_id = str(op.get("operationId") or name)
        override = self.overrides.get(name) or self.overrides.get(operation_id) or {}
        forbidden = {"tool", "name", "invoker", "url", "function", "source", "method"} & set(override)
        if forbidden:
            raise CatalogError(f"{self.label}: operation {name}: overrides may not set "
                               f"{', '.join(sorted(forbidden))}")
        fields.update(override)
        try:
            return Capability(**fields, invoker=OpenAPIInvoker(self, operation))
        except ValidationError as exc:
            problems = [f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}"
                        for e in exc.errors()]
            if override:
                raise CatalogError(f"{self.label}: operation {name}: {'; '.join(problems)}") from exc
            raise _Skip(pointer, "; ".join(problems)) from exc

    def _body(self, content: dict[str, Any], resolver: Any, key: str, pointer: str,
              builder: SchemaBuilder, refs: set[str]) -> tuple[Body, Any]:
        """The body's wire form and input schema, from the media type it prefers."""
        medias = [str(m) for m in content]
        chosen = (next((m for m in medias if JSON_MEDIA.match(m)), None)
                  or next((m for m in medias if m.lower().startswith(_FORM)), None)
                  or next((m for m in medias if _MULTIPART.match(m)), None)
                  or next((m for m in medias if m.lower().startswith("text/")), None)
                  or next((m for m in medias if not _XML.search(m)), None)
                  or next(iter(medias), None))  # XML only: sent as the XML text given
        if chosen is None:
            raise _Skip(f"{pointer}/content", "the request body is only offered as "
                        f"{', '.join(medias)}, which is not supported (JSON, form, "
                        "multipart, text or a file)")
        media_object = content[chosen] if isinstance(content[chosen], dict) else {}
        where = f"{pointer}/content/{pointer_of(chosen)[2:]}"
        schema: Any = {}
        if "schema" in media_object:
            schema = builder.repair(builder.schema(media_object["schema"], resolver,
                                                   f"{where}/schema", refs), f"{where}/schema")
        encoding = {str(k): v for k, v in (media_object.get("encoding") or {}).items()
                    if isinstance(v, dict)}
        if JSON_MEDIA.match(chosen):
            return Body(key, "application/json" if "*" in chosen else chosen, "json"), schema
        if chosen.lower().startswith("text/") or _XML.search(chosen):
            said = schema.get("description") if isinstance(schema, dict) else None
            if _XML.search(chosen):  # the document's XML schema is not a JSON one: say so
                said = f"the body as {chosen} text" + (f": {said}" if said else "")
            return Body(key, chosen, "text"), {"type": "string", **(
                {"description": said} if said else {})}
        if not chosen.lower().startswith(_FORM) and not _MULTIPART.match(chosen):
            return Body(key, chosen, "binary"), dict(FILE_INPUT_SCHEMA)
        kind = "form" if chosen.lower().startswith(_FORM) else "multipart"
        body = Body(key, chosen, kind, encoding)
        if kind == "multipart":
            schema = self._file_fields(schema, body, builder)
        return body, schema

    @staticmethod
    def _file_fields(schema: Any, body: Body, builder: SchemaBuilder) -> Any:
        """A multipart schema whose file properties take a file value (path, bytes or
        ``{filename, content_type, content}``); the file fields are recorded on ``body``.

        A file property is ``format: binary``/``byte``, ``contentMediaType``, a binary
        ``encoding.contentType``, or a property without a type (whose default part
        type OpenAPI 3.1 makes ``application/octet-stream``)."""
        members = [schema]
        if isinstance(schema, dict):
            members += [m for m in schema.get("allOf", []) if isinstance(m, dict)]
        props: dict[str, Any] = {}
        required: list[str] = []
        for member in members:
            member = builder.definition_schema(member)
            if isinstance(member, dict):
                props.update(member.get("properties") or {})
                required += [r for r in member.get("required") or [] if isinstance(r, str)]
        if not props:
            return schema
        out_props: dict[str, Any] = {}
        for name, prop in props.items():
            resolved = builder.definition_schema(prop)
            content_type = str(body.encoding.get(name, {}).get("contentType") or "")
            untyped = resolved == {} or (isinstance(resolved, dict) and not (
                {"type", "$ref", "allOf", "anyOf", "oneOf", "enum", "const"} & set(resolved)))
            if _is_file(resolved) or untyped or (content_type and not content_type.startswith(
                    ("text/", "application/json"))):
                body.file_fields.add(name)
                out_props[name] = {**FILE_INPUT_SCHEMA, "description": "a file: " + str(
                    resolved.get("description", "") if isinstance(resolved, dict) else "")}
            elif (isinstance(resolved, dict) and resolved.get("type") == "array"
                  and _is_file(builder.definition_schema(resolved.get("items")))):
                body.file_fields.add(name)
                out_props[name] = {"type": "array", "items": FILE_INPUT_SCHEMA}
            else:
                out_props[name] = prop
        out: dict[str, Any] = {"type": "object", "properties": out_props}
        if required:
            out["required"] = list(dict.fromkeys(required))
        if isinstance(schema, dict) and "description" in schema:
            out["description"] = schema["description"]
        return out

    def _output_schema(self, op: dict[str, Any], resolver: Any, pointer: str,
                       builder: SchemaBuilder) -> dict[str, Any] | None:
        """The JSON schema of the first 2xx response that declares one (None if it
        cannot be used: the output is then not checked, and a note says why)."""
        responses = op.get("responses")
        if not isinstance(responses, dict):
            return None
        for status in sorted(responses, key=str):
            if not str(status).startswith("2"):
                continue
            where = f"{pointer}/responses/{status}"
            try:
                response, inner = _follow(responses[status], resolver, where)
                if self._swagger2 is not None and isinstance(response, dict):
                    response = swagger2.response(response, op, self._swagger2)
                content = response.get("content") if isinstance(response, dict) else None
                if not isinstance(content, dict):
                    continue
                media = next((m for m in content if JSON_MEDIA.match(str(m))), None)
                if media is None or not isinstance(content[media], dict) \
                        or "schema" not in content[media]:
                    continue
                refs: set[str] = set()
                schema = builder.schema(content[media]["schema"], inner,
                                        f"{where}/content/{media}/schema", refs)
                schema = builder.assemble(builder.repair(schema, where), where)
            except (_Skip, SchemaProblem) as problem:
                self._note_or_raise(problem.pointer, f"output schema not used: {problem.message}")
                return None
            return schema if isinstance(schema, dict) else None
        return None

    def _validate(self, docs: Documents) -> None:
        """The spec validator's findings as notes (never its exceptions): each becomes
        readable text with its pointer; ``strict`` refuses at the first."""
        from jsonschema_path import SchemaPath
        from openapi_spec_validator.shortcuts import get_validator_cls

        def read(uri: str) -> Any:
            docs._retrieve(uri)  # the same policy as our own references
            return docs._read(uri.split("#", 1)[0])

        handlers = {"file": read, "http": read, "https": read, "<all_urls>": read}
        try:
            root = SchemaPath.from_dict(docs.root, base_uri=docs.base_uri, handlers=handlers)
            validator = get_validator_cls(docs.root)(root)
            for count, error in enumerate(validator.iter_errors()):
                if count >= 200:
                    self._notes.append(SourceNote(self.label, "(document)", "#",
                                                  "more spec validation errors not listed"))
                    break
                path = list(getattr(error, "absolute_path", None) or getattr(error, "path", None)
                            or ())
                item = ("(document)" if len(path) < 3 or path[0] != "paths"
                        else f"{str(path[2]).upper()} {path[1]}")
                message = f"spec validation: {getattr(error, 'message', error)}"
                self._current = item
                self._note_or_raise(pointer_of(*path) if path else "#", message)
        except CatalogError:
            raise
        except Exception as exc:  # the validator itself failed: its word is lost, not ours
            ref = getattr(exc, "ref", None)
            why = (f"$ref {ref!r} does not resolve" if ref is not None
                   else f"{type(exc).__name__}: {str(exc)[:300]}")
            self._note_or_raise("#", f"the spec validator stopped: {why}")
        self._current = "(document)"

    def _deref_map(self, raw: Any, docs: Documents) -> Any:
        if not isinstance(raw, dict):
            return raw
        out = {}
        for key, value in raw.items():
            with contextlib.suppress(_Skip):
                out[key] = _follow(value, docs.resolver, "#/components/securitySchemes")[0]
        return out

    def _check_credentials(self) -> None:
        assert self.credentials is not None
        for name, scheme in self.schemes.items():
            if scheme.kind == "unsupported":
                where = (("components", "securitySchemes") if self._swagger2 is None
                         else ("securityDefinitions",))
                self._notes.append(SourceNote(
                    self.label, "(document)", pointer_of(*where, name),
                    f"security scheme {name!r} ({scheme.why}) is not supported; give the "
                    "credential as headers= instead"))
        unknown = self.credentials.names() - set(self.schemes)
        if unknown:
            raise CatalogError(f"{self.label}: credentials given for unknown security "
                               f"scheme(s) {', '.join(sorted(unknown))} (the document has: "
                               f"{', '.join(sorted(self.schemes)) or 'none'})")

    def _base_url(self, data: dict[str, Any], base_uri: str) -> str:
        if self.base_url_override:
            return self.base_url_override.rstrip("/")
        if self._swagger2 is not None:
            url = swagger2.base_url(data, self.spec if self.is_url else None)
            if url is None:
                raise CatalogError(f"{self.label}: the Swagger 2.0 document has no 'host' and "
                                   "was not loaded from a URL; give base_url=...")
            return url
        servers = data.get("servers") or []
        if isinstance(servers, list) and servers and isinstance(servers[0], dict) \
                and servers[0].get("url"):
            server = servers[0]
            url = str(server["url"])
            for var, spec in (server.get("variables") or {}).items():
                default = spec.get("default", "") if isinstance(spec, dict) else ""
                url = url.replace("{" + str(var) + "}", str(default))
            if re.match(r"^https?://", url):
                return url.rstrip("/")
            if self.is_url:
                return urljoin(base_uri, url).rstrip("/")
        raise CatalogError(f"{self.label}: no absolute server URL in the spec's 'servers'; "
                           "give base_url=...")

    # --- notes ----------------------------------------------------------------------
    def _note(self, pointer: str, message: str) -> None:
        self._note_or_raise(pointer, message)

    def _note_or_raise(self, pointer: str, message: str) -> None:
        if self.strict:
            raise CatalogError(f"{self.label}: {self._current} at {pointer}: {message} "
                               "(strict=True refuses the document; without it the problem "
                               "is repaired or the operation left out, and reported)")
        self._notes.append(SourceNote(self.label, self._current, pointer, message))

    def _skip(self, item: str, pointer: str, message: str) -> None:
        if self.strict:
            raise CatalogError(f"{self.label}: {item} at {pointer}: {message}")
        log.warning("%s: %s left out: %s (at %s)", self.label, item, message, pointer)
        self._notes.append(SourceNote(self.label, item, pointer, message, skipped=True))

    async def load(self) -> SourceListing:
        return await asyncio.to_thread(self.load_sync)

    async def send(self, operation: Operation, params: dict[str, Any], timeout_s: float,
                   extra_headers: Mapping[str, str],
                   credentials: Mapping[str, str] | None = None) -> CallResult:
        """One request on the runtime loop, its answer or failure classified (see
        :class:`~orchestration.sources.openapi._calls.OperationClient`)."""
        return await self.client.send(operation, params, timeout_s, extra_headers, credentials)

    async def aclose(self) -> None:
        await self.client.aclose()


def _follow(node: Any, resolver: Any, pointer: str) -> tuple[Any, Any]:
    """A non-schema object (parameter, body, response, path item) with its ``$ref``s
    followed, and the resolver for the references inside it."""
    import referencing.exceptions

    for _ in range(_MAX_REF_HOPS):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
            return node, resolver
        ref = node["$ref"]
        try:
            resolved = resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as exc:
            why = _cause(exc)
            raise _Skip(pointer, f"$ref {ref!r} does not resolve{why}") from None
        node, resolver, pointer = resolved.contents, resolved.resolver, ref
    raise _Skip(pointer, f"more than {_MAX_REF_HOPS} $refs in a row (a cycle?)")


def _offered(missing: list[str], names: list[str]) -> str:
    """What the document has, for a CatalogError: all of it when short, else the count
    and the names closest to those asked for (a document may have thousands)."""
    import difflib

    if len(names) <= 30:
        return f"it has: {', '.join(sorted(names)) or 'none'}"
    close = dict.fromkeys(n for m in missing for n in difflib.get_close_matches(m, names, 5, 0.5))
    return f"it has {len(names)}" + (f"; closest: {', '.join(close)}" if close else "")


def _alternatives(security: Any) -> list[list[str]]:
    """A ``security`` list as alternatives of scheme names, those with names first."""
    if not isinstance(security, list):
        return []
    out = [[str(n) for n in req] for req in security if isinstance(req, dict)]
    return sorted(out, key=lambda names: not names)


def _is_file(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    return ((schema.get("format") in ("binary", "byte") and schema.get("type") in ("string", None))
            or "contentMediaType" in schema or schema.get("contentEncoding") == "base64")


class OpenAPIInvoker:
    """The catalog's invoker for one operation: hands the request to the runtime loop,
    whose single HTTP pool serves every run, loop and thread."""

    accepts_credentials = True
    """A run's own credentials replace the document's for its calls (``credentials=``)."""

    def __init__(self, source: OpenAPISource, operation: Operation) -> None:
        self.source = source
        self.operation = operation

    @property
    def operation_id(self) -> str:
        return self.operation.operation_id

    def secret_values(self) -> list[str]:
        """The document's credentials, for the redactor (never stored anywhere)."""
        credentials = self.source.credentials
        return credentials.secret_values() if credentials is not None else []

    async def call(
        self, params: dict[str, Any], *, timeout_s: float, headers: Mapping[str, str],
        credentials: Mapping[str, str] | None = None,
    ) -> CallResult:
        try:
            return await self.source.runtime.run(
                self.source.send(self.operation, params, timeout_s, headers, credentials))
        except SourceClosed as exc:
            return CallResult(error=StepError(
                category=ErrorCategory.CONNECTION_ERROR, code="SOURCE_CLOSED",
                source=ErrorSource.TRANSPORT,
                message=f"{self.source.label}: {exc}", retryable=True, request_sent=True))

    def __repr__(self) -> str:
        return f"OpenAPIInvoker({self.operation.method} {self.operation.path})"
