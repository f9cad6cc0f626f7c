"""The tool catalog: which tools exist, what each capability takes, and how to call it.

A capability is called either over HTTP (the URL always comes from here, never from an
LLM) or in-process through a Python callable. Input schemas are checked when the
catalog loads, so a broken schema is reported with the capability's name at start-up
instead of as a confusing validation failure mid-run.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestration import _schema
from orchestration._json import decode
from orchestration._text import describe_validation_error
from orchestration.errors import CatalogError, ConfigError
from orchestration.layer_settings import check_layer_overrides
from orchestration.redaction import DEFAULT_REDACTOR
from orchestration.retry_policy import check_overrides

__all__ = ["IDEMPOTENT_METHODS", "Capability", "Catalog", "check_schema"]

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

    @model_validator(mode="after")
    def _check(self) -> Capability:
        self.method = self.method.upper()
        if (self.url is None) == (self.function is None):
            raise ValueError("needs exactly one of 'url' (HTTP tool) or a Python function")
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

    def __repr_args__(self) -> Any:
        """What ``repr``/``str`` show: header values of credentials and secrets in the URL
        masked (a capability in a log line or a traceback must not print its key)."""
        for name, value in super().__repr_args__():
            if name == "headers" and isinstance(value, dict):
                value = DEFAULT_REDACTOR.redact_value(value)
            elif name == "url" and isinstance(value, str):
                value = DEFAULT_REDACTOR.redact(value)
            yield name, value


def check_schema(schema: Any, where: str) -> None:
    """Reject a schema that is not itself a valid JSON Schema, naming ``where`` and the
    JSON path of every problem (not only the first)."""
    if not isinstance(schema, dict):
        raise CatalogError(f"{where}: input_schema must be a JSON object, got {type(schema).__name__}")
    problems = _schema.check_schema_errors(schema)
    if problems:
        raise CatalogError(f"{where}: " + "; ".join(
            f"invalid input_schema at {path}: {message}" for path, message in problems))


class Catalog:
    """The set of tools and capabilities a run may use.

    Build it from a file (:meth:`from_file`), a dict (:meth:`from_dict`), a tool's
    ``GET /capabilities`` (:meth:`discover`), or in code (:meth:`add_function`,
    :meth:`add_http`). Lookups raise :class:`CatalogError` naming what is unknown.
    """

    def __init__(self) -> None:
        self._caps: dict[tuple[str, str], Capability] = {}
        self._tool_descriptions: dict[str, str] = {}
        self._revision = 0

    @property
    def revision(self) -> int:
        """Bumped whenever a capability is added or replaced, so what is derived from the
        catalog (the redactor's known secrets) can tell it is out of date."""
        return self._revision

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
        check_schema(capability.input_schema, name)
        try:
            check_overrides(capability.retry, source=name)
            check_layer_overrides(capability.layers, source=name)
        except ConfigError as exc:
            raise CatalogError(str(exc)) from exc
        if capability.output_schema is not None:
            check_schema(capability.output_schema, f"{name} output")
        self._caps[key] = capability
        self._tool_descriptions.setdefault(capability.tool, "")
        self._revision += 1
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
            raise CatalogError(f"{where}: {describe_validation_error(exc)}") from exc
        return self.add(cap, where=source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "catalog") -> Catalog:
        """Build from ``{"tools": [{"name", "base_url", "capabilities": [...]}]}``.

        A capability gives ``url`` or a ``path`` joined to its tool's ``base_url``;
        ``${VAR:-default}`` in URLs is expanded from the environment.
        """
        catalog = cls()
        tools = data.get("tools") if isinstance(data, Mapping) else None
        if not isinstance(tools, list):
            raise CatalogError(f"{source}: expected a top-level 'tools' list")
        for t_index, tool in enumerate(tools):
            where = f"{source}: tools[{t_index}]"
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                raise CatalogError(f"{where}: each tool needs a 'name'")
            name = tool["name"]
            where = f"{source}: tool {name!r}"
            catalog.describe_tool(name, str(tool.get("description", "")))
            base_url = _expand_env(str(tool["base_url"])).rstrip("/") if tool.get("base_url") else None
            # tool-level defaults; dict-valued ones (retry, layers, headers) are merged
            # key by key with the capability's, which wins
            defaults = {k: tool[k] for k in _TOOL_DEFAULTS if k in tool}
            caps = tool.get("capabilities")
            if not isinstance(caps, list) or not caps:
                raise CatalogError(f"{where}: needs a non-empty 'capabilities' list")
            for c_index, raw in enumerate(caps):
                if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
                    raise CatalogError(f"{where}: capabilities[{c_index}] needs a 'name'")
                fields = {**defaults, **{k: v for k, v in raw.items() if k != "path"}}
                for key in ("retry", "layers", "headers"):
                    if isinstance(defaults.get(key), Mapping) and isinstance(raw.get(key), Mapping):
                        fields[key] = {**defaults[key], **raw[key]}
                if "url" in fields:
                    fields["url"] = _expand_env(str(fields["url"]))
                elif "path" in raw:
                    if base_url is None:
                        raise CatalogError(
                            f"{where}: capability {raw['name']!r} gives a path but the tool "
                            "has no base_url"
                        )
                    fields["url"] = base_url + "/" + str(raw["path"]).lstrip("/")
                else:
                    raise CatalogError(f"{where}: capability {raw['name']!r} needs 'url' or 'path'")
                catalog._build_and_add(f"{where} capability {raw['name']!r}", source=where,
                                       tool=name, **fields)
        return catalog

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Catalog:
        """Load a YAML (``.yaml``/``.yml``) or JSON catalog file."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise CatalogError(f"cannot read catalog {p}: {exc.strerror or exc}") from exc
        try:
            data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise CatalogError(f"catalog {p} is not valid {p.suffix[1:] or 'YAML'}: {exc}") from exc
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
                    desc = decode(resp.content)  # bounded, like every tool body
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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description (Python callables shown as ``python:<name>``)."""
        tools: dict[str, dict[str, Any]] = {}
        for cap in self:
            entry = tools.setdefault(
                cap.tool,
                {"name": cap.tool, "description": self._tool_descriptions.get(cap.tool, ""),
                 "capabilities": []},
            )
            item = cap.model_dump(exclude={"tool", "function"}, exclude_none=True)
            if cap.function is not None:
                item["url"] = f"python:{getattr(cap.function, '__qualname__', 'callable')}"
            entry["capabilities"].append(item)
        return {"tools": list(tools.values())}
