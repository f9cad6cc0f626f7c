"""The tool catalog: which tools exist, what each capability takes, and how to call it.

A capability is called over HTTP (the URL always comes from here, never from an LLM),
in-process through a Python callable, or through an ``invoker`` that a source supplies
(an MCP server's tool, an OpenAPI operation; see :mod:`orchestration.sources`). Input
schemas are checked when the catalog loads, so a broken schema is reported with the
capability's name at start-up instead of as a confusing validation failure mid-run. A
catalog is checked whole: every problem of a file is reported at once, each with the
file, tool, capability and JSON path.

A catalog written with :meth:`Catalog.to_dict` reads back with :meth:`Catalog.from_dict`
to the same catalog: a Python tool is written as ``function: module:qualname`` (never as
a URL) and imported again when read; a callable without an importable name (a lambda, a
nested function) cannot be written down and says so.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import pkgutil
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestration._data_files import DataFileError, read_data_file
from orchestration._templates import template_problem
from orchestration._text import describe_validation_error
from orchestration.capability import (
    IDEMPOTENT_METHODS,
    Capability,
    Invoker,
    check_schema,
    schema_problems,
)
from orchestration.circuit import check_circuit_overrides
from orchestration.context import ApprovalCondition
from orchestration.errors import CatalogError, ConfigError
from orchestration.layer_settings import check_layer_overrides
from orchestration.retry_policy import check_overrides
from orchestration.sources import Source, SourceListing, SourceNote

if TYPE_CHECKING:
    from orchestration.sources._runtime import SourceRuntime

__all__ = ["IDEMPOTENT_METHODS", "Capability", "Catalog", "Invoker", "check_schema",
           "function_reference", "schema_problems"]

_TOOL_DEFAULTS = ("timeout_s", "headers", "retry", "layers", "circuit")
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
    # a catalog's wrapper (schema from type hints) names the function it wraps
    return reference if found is fn or found is getattr(fn, "__wrapped__", None) else None


def _resolve_function(reference: Any, base_dir: str | os.PathLike[str] | None = None
                      ) -> Callable[..., Any]:
    """The callable a catalog names as ``function: module:qualname``.

    The module is imported as usual; when no installed module has that name and the
    catalog file's folder (``base_dir``) holds it (``mytools.py`` or ``mytools/``), the
    folder is added at the *end* of ``sys.path`` — it never shadows an installed module —
    so tools kept beside their catalog need no ``PYTHONPATH``."""
    if not isinstance(reference, str) or ":" not in reference:
        raise ValueError(f"function must be 'module:qualname' text, got {reference!r}")
    try:
        found = pkgutil.resolve_name(reference)
    except ModuleNotFoundError as exc:
        if not _add_catalog_folder(reference, exc, base_dir):
            raise ValueError(_not_importable(reference, exc, base_dir)) from exc
        try:
            found = pkgutil.resolve_name(reference)
        except (ImportError, AttributeError, ValueError) as again:
            raise ValueError(f"function {reference!r} cannot be imported: {again}") from again
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"function {reference!r} cannot be imported: {exc}") from exc
    if not callable(found):
        raise ValueError(f"function {reference!r} is not callable")
    return found


def _add_catalog_folder(reference: str, exc: ModuleNotFoundError,
                        base_dir: str | os.PathLike[str] | None) -> bool:
    top = reference.partition(":")[0].split(".")[0]
    if base_dir is None or exc.name != top:
        return False
    folder = Path(base_dir).resolve()
    if not ((folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file()):
        return False
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    importlib.invalidate_caches()
    return True


def _not_importable(reference: str, exc: ModuleNotFoundError,
                    base_dir: str | os.PathLike[str] | None) -> str:
    where = (f" (looked for it installed, then in the catalog's folder {Path(base_dir).resolve()})"
             if base_dir is not None else "")
    return f"function {reference!r} cannot be imported: {exc}{where}"


def _function_fields(fields: dict[str, Any], label: str) -> None:
    """A catalog file's Python tool gets its schemas from its type hints, as with
    ``@catalog.tool``, unless the entry gives ``input_schema``; a function taking
    ``**kwargs`` has nothing to derive and is called with the parameters as given."""
    from orchestration.sources._schema_from_hints import schema_from_signature
    from orchestration.sources.decorated import wrap

    fn = fields["function"]
    if "input_schema" in fields:
        return
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    schema = schema_from_signature(fn, label)
    fields["function"] = wrap(fn, schema)
    fields["input_schema"] = schema.input_schema
    if schema.output_schema is not None:
        fields.setdefault("output_schema", schema.output_schema)
    if not fields.get("description"):
        fields["description"] = inspect.getdoc(fn) or ""


class Catalog:
    """The set of tools and capabilities a run may use.

    Build it from a file (:meth:`from_file`), a dict (:meth:`from_dict`), a tool's
    ``GET /capabilities`` (:meth:`discover`), or in code (:meth:`add_function`,
    :meth:`add_http`). Lookups raise :class:`CatalogError` naming what is unknown.
    """

    def __init__(self) -> None:
        self._caps: dict[tuple[str, str], Capability] = {}
        self._tool_descriptions: dict[str, str] = {}
        # sources the catalog owns (MCP servers, OpenAPI specs, refreshed discovery): a
        # refresh swaps ``_caps`` for a new dict under the lock, so readers never see a
        # half-applied listing and a run's snapshot is never changed
        self._lock = threading.RLock()
        self._sources: dict[str, Source] = {}
        self._owned: dict[str, set[tuple[str, str]]] = {}
        self._notes: dict[str, list[SourceNote]] = {}  # per source: left out or repaired
        self._runtime: SourceRuntime | None = None
        self._revision = 0
        self._fingerprints: dict[int, str] = {}  # by revision; shared with snapshots
        self._snapshot: tuple[int, Catalog] | None = None  # the last one, by revision
        self.path: Path | None = None
        """The file the catalog was read from (:meth:`from_file`), else None."""

    @property
    def revision(self) -> int:
        """Bumped whenever a capability is added or replaced (a refresh included), so what
        is derived from the catalog (the redactor's known secrets) can tell it is out of
        date."""
        return self._revision

    @property
    def fingerprint(self) -> str:
        """A digest of what the catalog offers — every capability's definition and every
        tool's description — the same in every process that loads the same catalog, and
        different as soon as any of it changes. What is derived from a catalog and kept
        across processes says which catalog it was made for with it (a cached plan, a
        workflow's check); computed once per :attr:`revision`."""
        revision = self._revision
        found = self._fingerprints.get(revision)
        if found is None:
            with self._lock:
                caps = sorted(self._caps.values(), key=lambda c: (c.tool, c.name))
                tools = dict(sorted(self._tool_descriptions.items()))
            body = {"tools": tools, "capabilities": [
                cap.model_dump(mode="json", exclude={"function", "invoker"}) for cap in caps]}
            text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
            found = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            self._fingerprints[revision] = found
        return found

    # --- building -----------------------------------------------------------------
    def add(
        self, capability: Capability, *, replace: bool = False, where: str | None = None,
        schemas_checked: bool = False,
    ) -> Capability:
        """Register a capability after checking its schemas and its ``retry`` and
        ``layers`` overrides; errors name ``where`` (the file and tool) and the capability.
        ``schemas_checked``: a source that checked its schemas itself (an OpenAPI document
        checks each shared definition once, not once per operation that uses it)."""
        key = (capability.tool, capability.name)
        prefix = f"{where}: " if where else ""
        name = f"{prefix}capability {capability.key!r}"
        if key in self._caps and not replace:
            raise CatalogError(f"{name} is defined twice")
        problems = [] if schemas_checked else schema_problems(capability.input_schema, name)
        if capability.output_schema is not None and not schemas_checked:
            problems += schema_problems(capability.output_schema, name, "output_schema")
        for check, overrides in ((check_overrides, capability.retry),
                                 (check_layer_overrides, capability.layers),
                                 (check_circuit_overrides, capability.circuit)):
            try:
                check(overrides, source=name)
            except ConfigError as exc:
                problems.append(str(exc))
        if capability.answer_template is not None:
            problem = template_problem(capability.answer_template)
            if problem is not None:
                problems.append(f"{name}: answer_template: {problem}")
        if problems:
            raise CatalogError.of(problems, where or "catalog")
        with self._lock:
            self._caps[key] = capability
            self._tool_descriptions.setdefault(capability.tool, "")
            self._revision += 1
        return capability

    def describe_tool(self, tool: str, description: str) -> None:
        with self._lock:
            self._tool_descriptions[tool] = description
            self._revision += 1

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
        requires_approval: bool | ApprovalCondition = False,
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
            requires_approval=requires_approval,
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

    def _build_and_add(self, where: str, *, context: str | None = None, **fields: Any) -> Capability:
        try:
            cap = Capability(**fields)
        except ValidationError as exc:
            raise CatalogError.of([f"{where}: {describe_validation_error(exc)}"], where) from exc
        return self.add(cap, where=context)

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        source: str = "catalog",
        base_dir: str | os.PathLike[str] | None = None,
        origin: str | None = None,
    ) -> Catalog:
        """Build from ``{"tools": [{"name", "base_url", "capabilities": [...]}]}``.

        A capability gives ``url``, or a ``path`` joined to its tool's ``base_url``, or
        ``function: module:qualname`` for a Python tool; ``${VAR:-default}`` in URLs is
        expanded from the environment. ``mcp_servers:`` and ``openapi:`` lists add those
        sources (see ``docs/tools.md``); relative spec paths are read from ``base_dir``.
        ``origin`` is the ``source`` label of the capabilities listed under ``tools``
        (default ``dict:<source>``). Every problem of the whole catalog is collected and
        raised as one :class:`CatalogError` (its ``problems`` list them).
        """
        catalog = cls()
        if not isinstance(data, Mapping):
            raise CatalogError(f"{source}: expected a mapping with a 'tools' list")
        tools = data.get("tools")
        has_sources = bool(data.get("mcp_servers") or data.get("openapi"))
        if tools is None and has_sources:
            tools = []
        if not isinstance(tools, list):
            raise CatalogError(f"{source}: expected a top-level 'tools' list "
                               "(or 'mcp_servers' / 'openapi' lists)")
        origin = origin or f"dict:{source}"
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
                    fields = _capability_fields(raw, defaults, base_url, where, base_dir)
                    fields.setdefault("source", origin)
                    catalog._build_and_add(f"{where}: capability '{name}.{raw['name']}'",
                                           context=where, tool=name, **fields)
                except CatalogError as exc:
                    problems.extend(exc.problems)
        if problems:
            raise CatalogError.of(problems, source)
        if has_sources:
            try:
                catalog._add_sources_from_dict(data, source=source, base_dir=base_dir)
            except BaseException:
                catalog.close()  # do not leave servers started for a catalog that failed
                raise
        return catalog

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Catalog:
        """Load a YAML (``.yaml``/``.yml``) or JSON catalog file."""
        p = Path(path)
        try:
            data, _ = read_data_file(p, "catalog")
        except DataFileError as exc:
            raise CatalogError(str(exc)) from exc
        catalog = cls.from_dict(data or {}, source=str(p), base_dir=p.parent, origin=f"file:{p}")
        catalog.path = p
        return catalog

    @classmethod
    def discover(cls, *base_urls: str, timeout_s: float = 5.0,
                 refresh_s: float | None = None) -> Catalog:
        """Build a catalog from each tool's ``GET {base_url}/capabilities`` description.

        With ``refresh_s`` the descriptions are fetched again that often in the
        background; runs already started keep the capabilities they planned with.
        """
        from orchestration.sources.discovery import DiscoverySource

        def build(description: dict[str, Any], origin: str) -> Catalog:
            return cls.from_dict({"tools": [description]}, source="discovery", origin=origin)

        source = DiscoverySource(base_urls, build=build, timeout_s=timeout_s,
                                 refresh_s=refresh_s)
        catalog = cls()
        catalog._adopt(source, source.load_sync())
        return catalog

    # --- sources: MCP servers, OpenAPI specs, decorated Python (orchestration/sources/) ---
    def add_mcp_server(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        tools: Sequence[str] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float = 30.0,
        refresh_s: float | None = None,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        error_pattern: str | None = None,
    ) -> list[Capability]:
        """Add every tool of an MCP server as a capability ``name.<tool>`` (extra ``mcp``).

        Give ``command`` (argv of a stdio server, with ``env``/``cwd``) or ``url`` (a
        streamable HTTP endpoint, with ``headers``). The server is connected now to list
        its tools; the session stays open, is shared by every run and closes with
        :meth:`aclose`/:meth:`close`. ``tools`` keeps only the named tools; ``overrides``
        maps a tool name to Capability fields (``idempotent``, ``timeout_s``, ``layers``,
        ...); ``refresh_s`` lists the tools again that often. ``error_pattern`` (a regular
        expression, e.g. ``^Error:``) marks the text results of a server that reports
        failures as ordinary text: they are read as ``isError`` results.
        """
        from orchestration.sources.mcp import MCPServerSource

        source = MCPServerSource(
            name, command=command, env=env, cwd=cwd, url=url, headers=headers, tools=tools,
            timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, refresh_s=refresh_s,
            overrides=overrides, runtime=self._source_runtime(), error_pattern=error_pattern,
        )
        return self._adopt(source, source.load_sync())

    def add_openapi(
        self,
        spec: str | os.PathLike[str],
        *,
        base_url: str | None = None,
        operations: Sequence[str] | None = None,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        strict: bool = False,
        validate: bool = False,
        credentials: Mapping[str, Any] | None = None,
        allow_remote_refs: bool = False,
        upload_dirs: Sequence[str | os.PathLike[str]] = (),
        token_urls: Sequence[str] = (),
    ) -> list[Capability]:
        """Add each operation of an OpenAPI 3.0/3.1 (or Swagger 2.0) spec as a capability.

        Needs the ``openapi`` extra. ``spec`` is a file path or an http(s) URL. The tool
        is named ``name`` (default: the spec's title as an identifier), each capability by
        its ``operationId``;
        ``operations`` keeps only those. ``base_url`` overrides the spec's first server.
        An operation that cannot be mapped is left out and reported in :attr:`skipped`
        (``strict=True`` refuses the document instead). ``credentials`` maps the
        document's security schemes to secrets; ``allow_remote_refs`` lets ``$ref``s
        fetch other origins; ``upload_dirs`` are where file parts may be read from;
        ``token_urls`` are the OAuth2 token URLs a client secret may be sent to.
        See ``docs/tools.md``.
        """
        from orchestration.sources.openapi import OpenAPISource

        source = OpenAPISource(
            spec, base_url=base_url, operations=operations, name=name, headers=headers,
            timeout_s=timeout_s, overrides=overrides, runtime=self._source_runtime(),
            strict=strict, validate=validate, credentials=credentials,
            allow_remote_refs=allow_remote_refs, upload_dirs=[str(d) for d in upload_dirs],
            token_urls=token_urls,
        )
        return self._adopt(source, source.load_sync())

    @classmethod
    def from_openapi(
        cls,
        path_or_url: str | os.PathLike[str],
        base_url: str | None = None,
        operations: Sequence[str] | None = None,
        **options: Any,
    ) -> Catalog:
        """A catalog of one OpenAPI spec's operations (see :meth:`add_openapi`)."""
        catalog = cls()
        catalog.add_openapi(path_or_url, base_url=base_url, operations=operations, **options)
        return catalog

    def tool(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        description: str | None = None,
        idempotent: bool = True,
        timeout_s: float | None = None,
        run_in_thread: bool = False,
        examples: list[dict[str, Any]] | None = None,
        requires_approval: bool | ApprovalCondition = False,
    ) -> Any:
        """Decorator registering a Python function as capability ``name`` (``"calc.add"``).

        The input schema comes from the type hints (pydantic models, ``Annotated``
        constraints, enums, optional and defaulted parameters), the description from the
        docstring, the output schema from the return type; sync and async functions. The
        function is returned unchanged. ``@catalog.tool`` alone names it ``python.<fn>``.
        """
        from orchestration.sources.decorated import register_function

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            register_function(
                self, fn, name=name if isinstance(name, str) else None,
                description=description, idempotent=idempotent, timeout_s=timeout_s,
                run_in_thread=run_in_thread, examples=examples,
                requires_approval=requires_approval,
            )
            return fn

        if callable(name):
            return decorate(name)
        return decorate

    def snapshot(self) -> Catalog:
        """The catalog as it is now, unaffected by later refreshes (what one run uses).

        The snapshot shares the capabilities (and so the sources' sessions) but owns
        nothing: closing it does nothing. Taking one also restarts refresh timers that a
        :meth:`aclose` stopped.
        """
        self._resume_refresh()
        with self._lock:
            # one snapshot per revision: every run started before the catalog changes
            # shares it (nothing writes to a snapshot), rather than copying it per run
            if self._snapshot is not None and self._snapshot[0] == self._revision:
                return self._snapshot[1]
            snap = Catalog()
            snap._caps = dict(self._caps)
            snap._tool_descriptions = dict(self._tool_descriptions)
            # the snapshot is this revision: it shares the fingerprints worked out for it
            snap._revision = self._revision
            snap._fingerprints = self._fingerprints
            snap.path = self.path
            self._snapshot = (self._revision, snap)
        return snap

    async def aclose(self) -> None:
        """Close what the catalog's sources hold open (MCP sessions, HTTP pools, refresh
        timers). Bounded in time; the sources reopen if the catalog is used again."""
        if self._runtime is not None:
            await self._runtime.aclose(list(self._sources.values()))

    def close(self) -> None:
        """:meth:`aclose` for code without an event loop."""
        if self._runtime is not None:
            self._runtime.close(list(self._sources.values()))

    def _source_runtime(self) -> SourceRuntime:
        from orchestration.sources._runtime import SourceRuntime

        if self._runtime is None:
            self._runtime = SourceRuntime()
        return self._runtime

    def _adopt(self, source: Source, listing: SourceListing) -> list[Capability]:
        """Own ``source`` and add its capabilities; on any conflict close it and raise."""
        before = (dict(self._caps), dict(self._tool_descriptions))
        try:
            with self._lock:
                if source.label in self._sources:
                    raise CatalogError(f"{source.label} is added twice")
                clash = [c.key for c in listing.capabilities if (c.tool, c.name) in self._caps]
                if clash:
                    raise CatalogError(f"{source.label}: capabilities {', '.join(clash)} are "
                                       "already defined by another source")
                for cap in listing.capabilities:
                    self.add(cap, schemas_checked=listing.schemas_checked)
                for tool, text in listing.tool_descriptions.items():
                    self._tool_descriptions[tool] = text
                self._revision += 1
                self._sources[source.label] = source
                self._owned[source.label] = {(c.tool, c.name) for c in listing.capabilities}
                self._notes[source.label] = list(listing.notes)
        except BaseException:
            with self._lock:
                self._caps, self._tool_descriptions = before
                self._revision += 1
            if self._runtime is not None and self._runtime.running:
                self._runtime.close([source])
            raise
        self._resume_refresh()
        return list(listing.capabilities)

    def _resume_refresh(self) -> None:
        """Start the refresh timer of every source that has ``refresh_s`` and none running."""
        import weakref

        pending = [s for s in self._sources.values()
                   if s.refresh_s and (self._runtime is None
                                       or not self._runtime.refreshing(s.label))]
        if not pending:
            return
        apply_ref = weakref.WeakMethod(self._apply_listing)

        def apply(label: str, listing: SourceListing) -> bool:
            method = apply_ref()
            return method is not None and method(label, listing)

        runtime = self._source_runtime()
        for source in pending:
            runtime.start_refresh(source, apply)

    def _apply_listing(self, label: str, listing: SourceListing) -> bool:
        """Replace ``label``'s capabilities with a fresh listing (called by the refresher).

        Builds a new dict and swaps it in, so a run's snapshot and any reader iterating
        the old dict are undisturbed. Capabilities that clash with another source or carry
        an invalid schema are left out (and logged). Returns False once the source is gone.
        """
        from orchestration.sources._runtime import log

        with self._lock:
            if label not in self._sources:
                return False
            caps = dict(self._caps)
            for key in self._owned.get(label, ()):
                caps.pop(key, None)
            owned: set[tuple[str, str]] = set()
            for cap in listing.capabilities:
                key = (cap.tool, cap.name)
                try:
                    if key in caps:
                        raise CatalogError("already defined by another source")
                    check_schema(cap.input_schema, f"capability {cap.key!r}")
                    if cap.output_schema is not None:
                        check_schema(cap.output_schema, f"capability {cap.key!r} output")
                except CatalogError as exc:
                    log.warning("refresh of %s: leaving out %s: %s", label, cap.key, exc)
                    continue
                caps[key] = cap
                owned.add(key)
            self._caps = caps
            self._revision += 1
            self._owned[label] = owned
            self._notes[label] = list(listing.notes)
            for tool, text in listing.tool_descriptions.items():
                self._tool_descriptions[tool] = text
        return True

    def _add_sources_from_dict(
        self, data: Mapping[str, Any], *, source: str, base_dir: str | os.PathLike[str] | None
    ) -> None:
        """The ``mcp_servers:`` and ``openapi:`` lists of a catalog file."""
        for key, options_allowed, required in (
            ("mcp_servers", _MCP_KEYS, "name"), ("openapi", _OPENAPI_KEYS, "spec"),
        ):
            entries = data.get(key) or []
            if not isinstance(entries, list):
                raise CatalogError(f"{source}: '{key}' must be a list")
            for index, raw in enumerate(entries):
                where = f"{source}: {key}[{index}]"
                if not isinstance(raw, Mapping) or not isinstance(raw.get(required), str):
                    raise CatalogError(f"{where}: each entry needs a '{required}' string")
                unknown = sorted(set(raw) - options_allowed)
                if unknown:
                    raise CatalogError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: "
                                       f"{', '.join(sorted(options_allowed))})")
                options = _expand_env_deep(dict(raw))
                try:
                    if key == "mcp_servers":
                        self.add_mcp_server(options.pop("name"), **options)
                    else:
                        spec = str(options.pop("spec"))
                        if base_dir is not None and "://" not in spec:
                            spec = str(Path(base_dir) / spec)
                        if base_dir is not None and isinstance(options.get("upload_dirs"), list):
                            options["upload_dirs"] = [str(Path(base_dir) / str(d))
                                                      for d in options["upload_dirs"]]
                        self.add_openapi(spec, **options)
                except CatalogError as exc:
                    raise CatalogError(f"{where}: {exc}") from exc

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

    @property
    def skipped(self) -> list[SourceNote]:
        """What the sources left out (an OpenAPI operation they could not map), each with
        its source, operation, JSON pointer and reason."""
        return [n for notes in self._notes.values() for n in notes if n.skipped]

    @property
    def notes(self) -> list[SourceNote]:
        """What the sources repaired on the way (and the spec validator's findings)."""
        return [n for notes in self._notes.values() for n in notes if not n.skipped]

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


_MCP_KEYS = frozenset({"name", "command", "env", "cwd", "url", "headers", "tools", "timeout_s",
                       "connect_timeout_s", "refresh_s", "overrides", "error_pattern"})
_OPENAPI_KEYS = frozenset({"spec", "name", "base_url", "operations", "headers", "timeout_s",
                           "overrides", "strict", "validate", "credentials",
                           "allow_remote_refs", "upload_dirs", "token_urls"})


def _expand_env_deep(value: Any) -> Any:
    """``${VAR:-default}`` expanded in every string of a nested list/dict."""
    if isinstance(value, str):
        return _expand_env(value)
    if isinstance(value, Mapping):
        return {k: _expand_env_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env_deep(v) for v in value]
    return value


def _capability_fields(
    raw: Mapping[str, Any], defaults: Mapping[str, Any], base_url: str | None, where: str,
    base_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """A capability entry of a catalog file as :class:`Capability` fields: tool defaults
    merged in, the URL built and expanded, a ``function`` reference imported."""
    label = f"{where}: capability {raw['name']!r}"
    defaults = {k: ({"enabled": v} if k == "circuit" and isinstance(v, bool) else v)
                for k, v in defaults.items()}
    raw = {k: ({"enabled": v} if k == "circuit" and isinstance(v, bool) else v)
           for k, v in raw.items()}
    fields = {**defaults, **{k: v for k, v in raw.items() if k != "path"}}
    for key in ("retry", "layers", "headers", "circuit"):
        if isinstance(defaults.get(key), Mapping) and isinstance(raw.get(key), Mapping):
            fields[key] = {**defaults[key], **raw[key]}
    if "function" in fields:
        if "url" in fields or "path" in raw:
            raise CatalogError(f"{label} gives both 'function' and a URL; a Python tool has no URL")
        try:
            fields["function"] = _resolve_function(fields["function"], base_dir)
        except ValueError as exc:
            raise CatalogError(f"{label}: {exc}") from None
        _function_fields(fields, label)
    elif "url" in fields:
        fields["url"] = _expand_env(str(fields["url"]))
    elif "path" in raw:
        if base_url is None:
            raise CatalogError(f"{label} gives a path but the tool has no base_url")
        fields["url"] = base_url + "/" + str(raw["path"]).lstrip("/")
    else:
        raise CatalogError(f"{label} needs 'url', 'path' or 'function'")
    return fields

