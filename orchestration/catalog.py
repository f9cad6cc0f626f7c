"""The tool catalog: which tools exist, what each capability takes, and how to call it.

A capability is called either over HTTP (the URL always comes from here, never from an
LLM) or in-process through a Python callable. Input schemas are checked when the
catalog loads, so a broken schema is reported with the capability's name at start-up
instead of as a confusing validation failure mid-run. A catalog is checked whole: every
problem of a file is reported at once, each with the file, tool, capability and JSON path.

A catalog written with :meth:`Catalog.to_dict` reads back with :meth:`Catalog.from_dict`
to the same catalog: a Python tool is written as ``function: module:qualname`` (never as
a URL) and imported again when read; a callable without an importable name (a lambda, a
nested function) cannot be written down and says so.
"""

from __future__ import annotations

import inspect
import json
import os
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestration import _schema
from orchestration._text import describe_validation_error
from orchestration.errors import CatalogError, ConfigError
from orchestration.layer_settings import check_layer_overrides
from orchestration.retry_policy import check_overrides

__all__ = ["IDEMPOTENT_METHODS", "Capability", "Catalog", "check_schema", "function_reference",
           "schema_problems"]

_TOOL_DEFAULTS = ("timeout_s", "headers", "retry", "layers")
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand_env(text: str) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` in catalog strings (e.g. base URLs)."""

    def repl(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value is None:
            if default is None:
                raise CatalogError(f"catalog refers to ${{{name}}} but it is not set")
            return default
        return value

    return _ENV_REF.sub(repl, text)


class Capability(BaseModel):
    """One callable operation of a tool.

    ``idempotent`` defaults from the HTTP method (GET/PUT/DELETE yes, POST/PATCH no) and is
    True for Python callables unless stated. A non-idempotent capability is never re-sent
    after an ambiguous failure unless it names an ``idempotency_key_header``.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    tool: str = Field(pattern=_NAME)
    name: str = Field(pattern=_NAME)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    output_schema: dict[str, Any] | None = None
    url: str | None = None
    method: str = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float | None = Field(None, gt=0)
    idempotent: bool | None = None
    idempotency_key_header: str | None = None
    function: Callable[..., Any] | None = Field(default=None, exclude=True, repr=False)
    run_in_thread: bool = False
    examples: list[dict[str, Any]] = Field(default_factory=list)
    retry: dict[str, Any] = Field(
        default_factory=dict, description="Per-capability overrides of the retry policy."
    )
    layers: dict[str, Any] = Field(
        default_factory=dict,
        description="Per-capability overrides of layer settings, e.g. "
        "{'validation_feedback_enabled': false, 'max_validation_retries': 1}.",
    )
    max_calls_per_run: int | None = Field(
        None, ge=1,
        description="Budget: at most this many calls of this capability per run (every "
        "attempt sent counts); the next one is not sent and the run stops.",
    )

    @model_validator(mode="after")
    def _check(self) -> Capability:
        self.method = self.method.upper()
        if (self.url is None) == (self.function is None):
            raise ValueError("needs exactly one of 'url' (HTTP tool) or 'function' (Python tool)")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                hint = (" (a Python tool is written as function: module:qualname)"
                        if parts.scheme == "python" else "")
                raise ValueError(f"url must be an http:// or https:// URL, got {self.url!r}{hint}")
        if self.idempotent is None:
            self.idempotent = self.function is not None or self.method in IDEMPOTENT_METHODS
        return self

    @property
    def key(self) -> str:
        """``tool.capability``, the name used in logs, metrics and prompts."""
        return f"{self.tool}.{self.name}"

    @property
    def is_idempotent(self) -> bool:
        return bool(self.idempotent)


def schema_problems(schema: Any, where: str, what: str = "input_schema") -> list[str]:
    """Every way ``schema`` is not a valid JSON Schema, each naming ``where`` and its
    JSON path."""
    if not isinstance(schema, dict):
        return [f"{where}: {what} must be a JSON object, got {type(schema).__name__}"]
    return [f"{where}: invalid {what} at {path}: {message}"
            for path, message in _schema.check_schema_errors(schema)]


def check_schema(schema: Any, where: str) -> None:
    """Reject a schema that is not itself a valid JSON Schema, naming ``where`` and the
    JSON path of every problem (not only the first)."""
    problems = schema_problems(schema, where)
    if problems:
        raise CatalogError.of(problems, where)


def function_reference(fn: Callable[..., Any]) -> str | None:
    """``module:qualname`` that imports back to ``fn`` itself, or None (a lambda, a
    nested function, a callable object: nothing a catalog file can name)."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    reference = f"{module}:{qualname}"
    try:
        found = pkgutil.resolve_name(reference)
    except (ImportError, AttributeError, ValueError):
        return None
    return reference if found is fn else None


def _resolve_function(reference: Any) -> Callable[..., Any]:
    """The callable a catalog names as ``function: module:qualname``."""
    if not isinstance(reference, str) or ":" not in reference:
        raise ValueError(f"function must be 'module:qualname' text, got {reference!r}")
    try:
        found = pkgutil.resolve_name(reference)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"function {reference!r} cannot be imported: {exc}") from exc
    if not callable(found):
        raise ValueError(f"function {reference!r} is not callable")
    return found


class Catalog:
    """The set of tools and capabilities a run may use.

    Build it from a file (:meth:`from_file`), a dict (:meth:`from_dict`), a tool's
    ``GET /capabilities`` (:meth:`discover`), or in code (:meth:`add_function`,
    :meth:`add_http`). Lookups raise :class:`CatalogError` naming what is unknown.
    """

    def __init__(self) -> None:
        self._caps: dict[tuple[str, str], Capability] = {}
        self._tool_descriptions: dict[str, str] = {}

    # --- building -----------------------------------------------------------------
    def add(
        self, capability: Capability, *, replace: bool = False, where: str | None = None
    ) -> Capability:
        """Register a capability after checking its schemas and its ``retry`` and
        ``layers`` overrides; errors name ``where`` (the file and tool) and the capability."""
        key = (capability.tool, capability.name)
        prefix = f"{where}: " if where else ""
        name = f"{prefix}capability {capability.key!r}"
        if key in self._caps and not replace:
            raise CatalogError(f"{name} is defined twice")
        problems = schema_problems(capability.input_schema, name)
        if capability.output_schema is not None:
            problems += schema_problems(capability.output_schema, name, "output_schema")
        for check, overrides in ((check_overrides, capability.retry),
                                 (check_layer_overrides, capability.layers)):
            try:
                check(overrides, source=name)
            except ConfigError as exc:
                problems.append(str(exc))
        if problems:
            raise CatalogError.of(problems, where or "catalog")
        self._caps[key] = capability
        self._tool_descriptions.setdefault(capability.tool, "")
        return capability

    def describe_tool(self, tool: str, description: str) -> None:
        self._tool_descriptions[tool] = description

    def add_function(
        self,
        fn: Callable[..., Any],
        *,
        tool: str,
        capability: str,
        input_schema: dict[str, Any] | None = None,
        description: str | None = None,
        output_schema: dict[str, Any] | None = None,
        idempotent: bool = True,
        timeout_s: float | None = None,
        run_in_thread: bool = False,
        examples: list[dict[str, Any]] | None = None,
    ) -> Capability:
        """Register an in-process tool. ``fn`` is called with the parameters as keywords.

        ``fn`` may be sync or async. A sync function runs on the event loop unless
        ``run_in_thread`` is set (use that for blocking code). It returns its data, or
        raises :class:`orchestration.ToolFailed` to report a structured tool error.
        """
        if not callable(fn):
            raise CatalogError(f"capability {tool}.{capability}: fn is not callable")
        doc = description if description is not None else inspect.getdoc(fn) or ""
        return self._build_and_add(
            f"capability {tool}.{capability}",
            tool=tool,
            name=capability,
            description=doc,
            input_schema=input_schema or {"type": "object"},
            output_schema=output_schema,
            function=fn,
            idempotent=idempotent,
            timeout_s=timeout_s,
            run_in_thread=run_in_thread,
            examples=examples or [],
        )

    def add_http(
        self,
        *,
        tool: str,
        capability: str,
        url: str,
        method: str = "POST",
        input_schema: dict[str, Any] | None = None,
        **fields: Any,
    ) -> Capability:
        """Register an HTTP capability at ``url``."""
        return self._build_and_add(
            f"capability {tool}.{capability}",
            tool=tool,
            name=capability,
            url=url,
            method=method,
            input_schema=input_schema or {"type": "object"},
            **fields,
        )

    def _build_and_add(self, where: str, *, source: str | None = None, **fields: Any) -> Capability:
        try:
            cap = Capability(**fields)
        except ValidationError as exc:
            raise CatalogError.of([f"{where}: {describe_validation_error(exc)}"], where) from exc
        return self.add(cap, where=source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "catalog") -> Catalog:
        """Build from ``{"tools": [{"name", "base_url", "capabilities": [...]}]}``.

        A capability gives ``url``, or a ``path`` joined to its tool's ``base_url``, or
        ``function: module:qualname`` for a Python tool; ``${VAR:-default}`` in URLs is
        expanded from the environment. Every problem of the whole catalog is collected
        and raised as one :class:`CatalogError` (its ``problems`` list them).
        """
        catalog = cls()
        tools = data.get("tools") if isinstance(data, Mapping) else None
        if not isinstance(tools, list):
            raise CatalogError(f"{source}: expected a top-level 'tools' list")
        problems: list[str] = []
        for t_index, tool in enumerate(tools):
            where = f"{source}: tools[{t_index}]"
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                problems.append(f"{where}: each tool needs a 'name'")
                continue
            name = tool["name"]
            where = f"{source}: tool {name!r}"
            catalog.describe_tool(name, str(tool.get("description", "")))
            try:
                base_url = (_expand_env(str(tool["base_url"])).rstrip("/")
                            if tool.get("base_url") else None)
            except CatalogError as exc:
                problems.append(f"{where}: {exc}")
                base_url = None
            # tool-level defaults; dict-valued ones (retry, layers, headers) are merged
            # key by key with the capability's, which wins
            defaults = {k: tool[k] for k in _TOOL_DEFAULTS if k in tool}
            caps = tool.get("capabilities")
            if not isinstance(caps, list) or not caps:
                problems.append(f"{where}: needs a non-empty 'capabilities' list")
                continue
            for c_index, raw in enumerate(caps):
                if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
                    problems.append(f"{where}: capabilities[{c_index}] needs a 'name'")
                    continue
                try:
                    fields = _capability_fields(raw, defaults, base_url, where)
                    catalog._build_and_add(f"{where}: capability '{name}.{raw['name']}'",
                                           source=where, tool=name, **fields)
                except CatalogError as exc:
                    problems.extend(exc.problems)
        if problems:
            raise CatalogError.of(problems, source)
        return catalog

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Catalog:
        """Load a YAML (``.yaml``/``.yml``) or JSON catalog file."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise CatalogError(f"cannot read catalog {p}: {exc.strerror or exc}") from exc
        kind = "json" if p.suffix == ".json" else "yaml"
        try:
            data = json.loads(text) if kind == "json" else yaml.safe_load(text)
        except json.JSONDecodeError as exc:
            raise CatalogError(f"{p}:{exc.lineno}:{exc.colno}: catalog is not valid json: "
                               f"{exc.msg}") from exc
        except yaml.YAMLError as exc:
            raise CatalogError(_yaml_error(p, exc)) from exc
        return cls.from_dict(data or {}, source=str(p))

    @classmethod
    def discover(cls, *base_urls: str, timeout_s: float = 5.0) -> Catalog:
        """Build a catalog from each tool's ``GET {base_url}/capabilities`` description."""
        tools = []
        with httpx.Client(timeout=timeout_s) as client:
            for base in base_urls:
                url = base.rstrip("/") + "/capabilities"
                try:
                    resp = client.get(url)
                    resp.raise_for_status()
                    desc = resp.json()
                except (httpx.HTTPError, ValueError) as exc:
                    raise CatalogError(f"cannot discover tool at {url}: {exc}") from exc
                if isinstance(desc, dict) and isinstance(desc.get("data"), dict):
                    desc = desc["data"]  # tolerate an enveloped answer
                if not isinstance(desc, dict):
                    raise CatalogError(f"{url}: expected a JSON object describing the tool")
                tools.append({**desc, "name": desc.get("tool", desc.get("name")), "base_url": base})
        return cls.from_dict({"tools": tools}, source="discovery")

    # --- lookup -------------------------------------------------------------------
    def get(self, tool: str, capability: str) -> Capability:
        """The capability, or a :class:`CatalogError` that lists what does exist."""
        cap = self._caps.get((tool, capability))
        if cap is not None:
            return cap
        if tool not in self._tool_descriptions:
            known = ", ".join(sorted(self._tool_descriptions)) or "none"
            raise CatalogError(f"unknown tool {tool!r} (known tools: {known})")
        names = ", ".join(sorted(c for t, c in self._caps if t == tool))
        raise CatalogError(f"tool {tool!r} has no capability {capability!r} (it has: {names})")

    def has(self, tool: str, capability: str) -> bool:
        return (tool, capability) in self._caps

    def __iter__(self) -> Iterator[Capability]:
        return iter(self._caps.values())

    def __len__(self) -> int:
        return len(self._caps)

    @property
    def tools(self) -> dict[str, str]:
        """Tool name → description."""
        return dict(self._tool_descriptions)

    def to_dict(self, *, skip_unnamed_functions: bool = False) -> dict[str, Any]:
        """The catalog as data that :meth:`from_dict` reads back to the same catalog.

        A Python tool is written as ``function: module:qualname``. One whose callable
        has no importable name (a lambda, a nested function) cannot be written down: a
        :class:`CatalogError` names it, unless ``skip_unnamed_functions`` leaves it out.
        """
        tools: dict[str, dict[str, Any]] = {}
        unnamed: list[str] = []
        for cap in self:
            item = cap.model_dump(exclude={"tool", "function"}, exclude_none=True)
            if cap.function is not None:
                reference = function_reference(cap.function)
                if reference is None:
                    unnamed.append(cap.key)
                    continue
                item["function"] = reference
            entry = tools.setdefault(
                cap.tool,
                {"name": cap.tool, "description": self._tool_descriptions.get(cap.tool, ""),
                 "capabilities": []},
            )
            entry["capabilities"].append(item)
        if unnamed and not skip_unnamed_functions:
            raise CatalogError(
                f"cannot write capability {', '.join(unnamed)}: its Python function has no "
                "importable name (a lambda or a nested function), so a catalog file could not "
                "call it; define it at module level, or pass skip_unnamed_functions=True")
        return {"tools": list(tools.values())}


def _capability_fields(
    raw: Mapping[str, Any], defaults: Mapping[str, Any], base_url: str | None, where: str
) -> dict[str, Any]:
    """A capability entry of a catalog file as :class:`Capability` fields: tool defaults
    merged in, the URL built and expanded, a ``function`` reference imported."""
    label = f"{where}: capability {raw['name']!r}"
    fields = {**defaults, **{k: v for k, v in raw.items() if k != "path"}}
    for key in ("retry", "layers", "headers"):
        if isinstance(defaults.get(key), Mapping) and isinstance(raw.get(key), Mapping):
            fields[key] = {**defaults[key], **raw[key]}
    if "function" in fields:
        if "url" in fields or "path" in raw:
            raise CatalogError(f"{label} gives both 'function' and a URL; a Python tool has no URL")
        try:
            fields["function"] = _resolve_function(fields["function"])
        except ValueError as exc:
            raise CatalogError(f"{label}: {exc}") from None
    elif "url" in fields:
        fields["url"] = _expand_env(str(fields["url"]))
    elif "path" in raw:
        if base_url is None:
            raise CatalogError(f"{label} gives a path but the tool has no base_url")
        fields["url"] = base_url + "/" + str(raw["path"]).lstrip("/")
    else:
        raise CatalogError(f"{label} needs 'url', 'path' or 'function'")
    return fields


def _yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    """A YAML error located in the file (PyYAML says ``<unicode string>``)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    detail = f"{problem} ({context})" if context else str(problem)
    return f"{where}: catalog is not valid yaml: {detail}"
