"""One operation's request, rendered from a step's parameters as the document says.

Parameters go where the document puts them (path, query, header, cookie) in its
``style``/``explode``; the body goes in the media type the operation takes:

* JSON (``application/json``, ``*+json``) as JSON;
* ``application/x-www-form-urlencoded`` as form fields — arrays repeated (or joined when
  ``explode: false``), objects as ``name[key]`` (``deepObject``) or their own fields, per
  the ``encoding`` object of each property;
* ``multipart/form-data`` as parts: a file part from a path (only under the directories
  the user allowed with ``upload_dirs``), from bytes, or from
  ``{filename, content_type, content | content_base64}``; other values as text parts
  (objects and arrays as JSON);
* ``text/*`` as text, other media types (``application/octet-stream``) as a file value.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["FILE_INPUT_SCHEMA", "JSON_MEDIA", "Body", "Operation", "Param", "Request",
           "RequestError"]

JSON_MEDIA = re.compile(r"^application/(?:[\w.-]+\+)?json\b|^\*/\*$|^application/\*$",
                        re.IGNORECASE)
"""Media types read and written as JSON (``*/*`` included: a JSON body is what it gets)."""

FILE_INPUT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "description": "path of a file to upload (it must lie in a "
         "directory the catalog allows with upload_dirs)"},
        {"type": "object", "properties": {
            "filename": {"type": "string"},
            "content_type": {"type": "string"},
            "content": {"type": "string", "description": "the file's text"},
            "content_base64": {"type": "string", "description": "the file's bytes, base64"},
        }, "additionalProperties": False},
    ],
}
"""How a file part is given in the parameters (bytes are accepted too, from code)."""


class RequestError(ValueError):
    """The parameters cannot be rendered as a request (nothing was sent)."""


@dataclass
class Param:
    """One parameter: ``key`` in the input schema, ``name`` on the wire."""

    key: str
    name: str
    location: str  # path | query | header | cookie
    style: str
    explode: bool
    allow_reserved: bool = False


@dataclass
class Body:
    """The request body: its input property, media type and how each field is encoded."""

    key: str
    media: str
    kind: str  # json | form | multipart | text | binary
    encoding: dict[str, dict[str, Any]] = field(default_factory=dict)
    file_fields: set[str] = field(default_factory=set)


@dataclass
class Request:
    method: str
    path: str
    query: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    content: dict[str, Any] = field(default_factory=dict)  # httpx keyword arguments


@dataclass
class Operation:
    """What a call needs to render a request for one operation."""

    operation_id: str
    method: str
    path: str
    params: list[Param] = field(default_factory=list)
    body: Body | None = None
    security: list[list[str]] | None = None  # alternatives of scheme names; None: the document's

    @property
    def body_key(self) -> str | None:
        return self.body.key if self.body is not None else None

    def render(self, params: Mapping[str, Any], *, upload_dirs: Sequence[Path] = ()) -> Request:
        """The request for ``params``; :class:`RequestError` when they cannot make one."""
        request = Request(self.method, self.path)
        for p in self.params:
            value = params.get(p.key)
            if value is None:
                if p.location == "path":
                    raise RequestError(f"path parameter {p.key!r} is missing")
                continue
            if p.location == "path":
                request.path = request.path.replace(
                    "{" + p.name + "}", quote(_path_value(p, value), safe=""))
            elif p.location == "header":
                request.headers[p.name] = _simple(value, p.explode)
            elif p.location == "cookie":
                request.cookies[p.name] = _simple(value, p.explode)
            else:
                request.query.extend(_query_pairs(p, value))
        if self.body is not None and params.get(self.body.key) is not None:
            request.content = _body(self.body, params[self.body.key], upload_dirs)
        return request


# --- parameters ------------------------------------------------------------------------
def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _simple(value: Any, explode: bool = False) -> str:
    """``style: simple`` (path and header parameters)."""
    if isinstance(value, list):
        return ",".join(_scalar(v) for v in value)
    if isinstance(value, dict):
        if explode:
            return ",".join(f"{k}={_scalar(v)}" for k, v in value.items())
        return ",".join(f"{k},{_scalar(v)}" for k, v in value.items())
    return _scalar(value)


def _path_value(p: Param, value: Any) -> str:
    if p.style == "label":
        return "." + _simple(value, p.explode).replace(",", "." if p.explode else ",")
    if p.style == "matrix":
        if isinstance(value, list) and p.explode:
            return "".join(f";{p.name}={_scalar(v)}" for v in value)
        return f";{p.name}={_simple(value, p.explode)}"
    return _simple(value, p.explode)


def _query_pairs(p: Param, value: Any) -> list[tuple[str, str]]:
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


# --- bodies ----------------------------------------------------------------------------
def _body(body: Body, value: Any, upload_dirs: Sequence[Path]) -> dict[str, Any]:
    if body.kind == "json":
        return {"json": value, "headers": {"Content-Type": body.media}}
    if body.kind == "text":
        text = value if isinstance(value, str) else json.dumps(value)
        return {"content": text.encode("utf-8"), "headers": {"Content-Type": body.media}}
    if body.kind == "binary":
        _, content, content_type = _file(body.key, value, upload_dirs)
        media = body.media if "*" not in body.media else content_type
        return {"content": content, "headers": {"Content-Type": media}}
    if not isinstance(value, Mapping):
        raise RequestError(f"{body.key!r} must be an object of fields ({body.media}), "
                           f"got {type(value).__name__}")
    if body.kind == "form":
        pairs: list[tuple[str, str]] = []
        for name, item in value.items():
            if item is None:
                continue
            encoding = body.encoding.get(name, {})
            style = encoding.get("style", "form")
            explode = encoding.get("explode", style == "form")
            pairs.extend(_query_pairs(Param(name, name, "query", style, bool(explode)), item))
        return {"content": urlencode(pairs).encode("ascii"),
                "headers": {"Content-Type": "application/x-www-form-urlencoded"}}
    files: list[tuple[str, tuple[str | None, bytes, str]]] = []
    for name, item in value.items():
        if item is None:
            continue
        items = item if isinstance(item, list) and name in body.file_fields else [item]
        for one in items:
            if name in body.file_fields:
                files.append((name, _file(name, one, upload_dirs)))
            else:
                declared = body.encoding.get(name, {}).get("contentType")
                text = one if isinstance(one, str) else _scalar(one)
                plain = isinstance(one, str | int | float | bool)
                part_type = str(declared or ("text/plain" if plain else "application/json"))
                files.append((name, (None, text.encode("utf-8"), part_type)))
    return {"files": files}


def _file(name: str, value: Any, upload_dirs: Sequence[Path]) -> tuple[str, bytes, str]:
    """``(filename, content, content_type)`` of a file value."""
    if isinstance(value, bytes | bytearray):
        return name, bytes(value), "application/octet-stream"
    if isinstance(value, str):
        path = Path(value).expanduser()
        if not upload_dirs:
            raise RequestError(f"{name!r}: uploading a file from a path needs the catalog's "
                               "upload_dirs=[...] (directories files may be read from); or "
                               "give {filename, content_type, content}")
        resolved = path.resolve()
        if not any(resolved.is_relative_to(d) for d in upload_dirs):
            raise RequestError(f"{name!r}: {value!r} is not inside an allowed upload "
                               f"directory ({', '.join(map(str, upload_dirs))})")
        try:
            content = resolved.read_bytes()
        except OSError as exc:
            raise RequestError(f"{name!r}: cannot read {value!r}: {exc.strerror}") from exc
        guessed = mimetypes.guess_type(resolved.name)[0] or "application/octet-stream"
        return resolved.name, content, guessed
    if isinstance(value, Mapping):
        filename = str(value.get("filename") or name)
        content_type = str(value.get("content_type") or mimetypes.guess_type(filename)[0]
                           or "application/octet-stream")
        if "content_base64" in value:
            try:
                data = base64.b64decode(str(value["content_base64"]), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise RequestError(f"{name!r}: content_base64 is not base64: {exc}") from exc
            return filename, data, content_type
        if "content" in value:
            content = value["content"]
            data = content if isinstance(content, bytes) else str(content).encode("utf-8")
            return filename, data, content_type
    raise RequestError(f"{name!r} must be a file: a path, bytes, or "
                       "{filename, content_type, content | content_base64}")
