"""Reading an OpenAPI document and the files its ``$ref``s name.

References are resolved by the :mod:`referencing` library (the one :mod:`jsonschema` is
built on): JSON pointers, relative URIs against the document that holds the reference,
``$id`` scopes. This module only decides *where* a referenced document may come from:

* a file beside the document (``attributes.yml#/name``) is read from disk;
* a document on the network is fetched only when the spec itself was given as a URL on
  the same origin, or the user passed ``allow_remote_refs=True``: loading a local spec
  never makes a request the user did not ask for.

Every document read is kept, so a file referenced 300 times is parsed once. YAML is read
with libyaml when it is there (OpenAI's 3 MB document parses in a second instead of 20)
and by YAML 1.2's core rules rather than YAML 1.1's (see ``_Loader``), so
``example: 2024-01-01`` stays the text the author wrote instead of becoming a ``date`` no
JSON encoder takes, and ``enum: [on, off]`` stays two strings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urlsplit

import httpx
import referencing
import referencing.jsonschema
import yaml

from orchestration.errors import CatalogError

__all__ = ["Documents", "parse_text", "pointer_of"]

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):
    """Safe YAML read by YAML 1.2's core rules, as the tools that write OpenAPI documents
    (js-yaml, Redocly, Swagger Editor) read it, not PyYAML's YAML 1.1 ones: ``on``/``off``/
    ``yes``/``no`` stay text (an ``enum: [on, off]`` is two strings), ``12:30`` is text,
    not 750 (base 60), ``017`` is 17, not octal, and dates stay text (as JSON Schema wants)."""


_YAML11_ONLY = {"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:bool",
                "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rule) for tag, rule in rules if tag not in _YAML11_ONLY]
    for first, rules in _BaseLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))
_Loader.add_implicit_resolver(  # int before float: the first rule that matches wins
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+.0123456789"))


def _yaml12_int(loader: Any, node: Any) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text.replace("_", ""), 10)  # an explicit !!int may still use separators


def _yaml12_float(loader: Any, node: Any) -> float:
    text = str(loader.construct_scalar(node)).lower()
    if text.endswith(("inf", "nan")):
        return float(text.replace(".", ""))
    return float(text.replace("_", ""))


_Loader.add_constructor("tag:yaml.org,2002:int", _yaml12_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _yaml12_float)

_REMOTE = re.compile(r"^https?://", re.IGNORECASE)
FETCH_TIMEOUT_S = 30.0


def _schemas_only(contents: Any) -> bool:
    return isinstance(contents, dict | bool)


def _id_of(contents: Any) -> str | None:
    found = contents.get("$id") if isinstance(contents, dict) else None
    return found if isinstance(found, str) else None


def _subresources_of(contents: Any) -> Any:
    """Draft 2020-12's subschemas of ``contents``, skipping what is not a schema: an
    OpenAPI document is not one, and real ones hold shapes such as DigitalOcean's
    ``properties: {$ref: 'attributes.yml#/name'}`` (a string where a subschema goes)."""
    if not isinstance(contents, dict):
        return
    found = iter(referencing.jsonschema.DRAFT202012.subresources_of(contents))
    while True:
        try:
            each = next(found)
        except StopIteration:
            return
        except (AttributeError, TypeError):  # a keyword whose value has the wrong shape
            return
        if _schemas_only(each):
            yield each


def _anchors_in(specification: Any, contents: Any) -> Any:
    if not isinstance(contents, dict):
        return
    if isinstance(contents.get("$anchor"), str):
        yield referencing.Anchor(  # type: ignore[call-arg]  # attrs fields, not in the stub
            name=contents["$anchor"], resource=specification.create_resource(contents))
    if isinstance(contents.get("$dynamicAnchor"), str):
        yield referencing.jsonschema.DynamicAnchor(  # type: ignore[call-arg]  # likewise
            name=contents["$dynamicAnchor"], resource=specification.create_resource(contents))


_SPECIFICATION: referencing.Specification[Any] = referencing.Specification(  # type: ignore[call-arg]
    name="openapi (JSON Schema draft 2020-12, tolerant)", id_of=_id_of,
    subresources_of=_subresources_of, anchors_in=_anchors_in,
    maybe_in_subresource=referencing.jsonschema.DRAFT202012.maybe_in_subresource)
"""How the documents are read for references: Draft 2020-12's rules (``$id`` scopes,
anchors) on whatever parts are schemas, the rest ignored instead of raising."""


def parse_text(text: str) -> Any:
    """JSON when it is JSON (ten times faster), else YAML."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return yaml.load(text, Loader=_Loader)  # a safe loader (CSafeLoader or SafeLoader)


def pointer_of(*parts: Any) -> str:
    """``#/paths/~1pets~1{id}/get`` for the parts ``("paths", "/pets/{id}", "get")``."""
    return "#/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class Documents:
    """The root document and every document its references reach."""

    def __init__(self, spec: str, label: str, *, allow_remote_refs: bool) -> None:
        self.spec = spec
        self.label = label
        self.is_url = bool(_REMOTE.match(spec))
        self.allow_remote_refs = allow_remote_refs
        self.base_uri = spec if self.is_url else Path(spec).resolve().as_uri()
        self._origin = _origin(self.base_uri) if self.is_url else None
        self._cache: dict[str, Any] = {}
        self._http: httpx.Client | None = None  # one pool for every document fetched
        try:
            self.root: Any = self._read(self.base_uri, root=True)
        except BaseException:
            self.close()
            raise
        registry: referencing.Registry[Any] = referencing.Registry(
            retrieve=self._retrieve)  # type: ignore[call-arg]  # attrs field, not in the stub
        registry = registry.with_resource(
            self.base_uri, _SPECIFICATION.create_resource(self.root))
        self.resolver = registry.resolver(base_uri=self.base_uri)

    def _read(self, uri: str, *, root: bool = False) -> Any:
        if uri in self._cache:
            return self._cache[uri]
        what = "the spec" if root else f"the referenced document {uri}"
        try:
            if _REMOTE.match(uri):
                if self._http is None:  # a client per fetch costs ~40 ms (its TLS context)
                    self._http = httpx.Client(timeout=FETCH_TIMEOUT_S, follow_redirects=True)
                response = self._http.get(uri)
                response.raise_for_status()
                text = response.text
            elif uri.startswith("file:"):
                text = _file_path(uri).read_text(encoding="utf-8")
            else:
                raise CatalogError(f"{self.label}: cannot read {what}: unsupported URI {uri!r}")
        except (OSError, httpx.HTTPError, UnicodeDecodeError) as exc:
            raise CatalogError(f"{self.label}: cannot read {what}: {exc}") from exc
        try:
            data = parse_text(text)
        except yaml.YAMLError as exc:
            raise CatalogError(f"{self.label}: {what} is not valid YAML or JSON: {exc}") from exc
        self._cache[uri] = data
        return data

    def close(self) -> None:
        """Release the connections of documents fetched over the network."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def _retrieve(self, uri: str) -> referencing.Resource[Any]:
        """The :mod:`referencing` hook: a document a ``$ref`` names, if it may be read."""
        uri = urldefrag(uri)[0]
        if _REMOTE.match(uri) and not self.allow_remote_refs and _origin(uri) != self._origin:
            raise CatalogError(
                f"{uri} is on the network; references are fetched only from the spec's own "
                "origin unless you pass allow_remote_refs=True")
        return _SPECIFICATION.create_resource(self._read(uri))


def _origin(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    return parts.scheme.lower(), parts.netloc.lower()


def _file_path(uri: str) -> Path:
    from urllib.request import url2pathname

    return Path(url2pathname(urlsplit(uri).path))
