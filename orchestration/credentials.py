"""Per-run credentials for tools: sent with the run's calls, never recorded anywhere.

``Orchestrator.run(query, credentials={"petstore": {"Authorization": "Bearer <the user's
token>"}})`` gives one run the headers to send to the tools it names, in place of the
catalog's own credentials for those tools (an end user's OAuth token for an OpenAPI
source, a header for an MCP server over HTTP). A name is, most specific first, a
capability (``tool.capability``), a tool (``petstore``), or a source (``openapi:...``,
``mcp:name``: what ``dagwright tools`` lists as a capability's source).

Redaction by construction: the values live only in the run's services
(:class:`RunCredentials`, in :class:`~orchestration.services.RunServices`) and are added
by the transport to the request being sent, after the call was observed — so no run
state, store row, event, span, log record, debug-store record, viewer page or API answer
is ever given them. What the run records is the *names* it was given credentials for
(``RunState.credentials_for``): a resumed run that still has calls for those tools asks
for them again (:class:`~orchestration.errors.CredentialsRequired`), and a call made
without them is refused (``CREDENTIALS_MISSING``, not sent) rather than sent with the
catalog's own credentials on the user's behalf. Should a tool echo a credential back, in
its answer or its error, the value is masked before the engine keeps it.

Not on the Temporal backend: the only way from a client to an activity is the
workflow's history, which Temporal records and keeps; see ``docs/context.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from orchestration.errors import InvalidInput
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.redaction import Redactor

if TYPE_CHECKING:
    from orchestration._transport import CallResult
    from orchestration.capability import Capability
    from orchestration.catalog import Catalog

__all__ = ["MISSING", "Credentials", "RunCredentials", "check_credentials"]

Credentials = Mapping[str, Mapping[str, str]]
"""What a caller gives: a tool, source or capability name → its headers."""

MAX_NAMES = 64
MAX_HEADERS = 20
MAX_VALUE_CHARS = 8192
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")  # an RFC 9110 token
_BAD_VALUE = re.compile(r"[\x00\r\n]")


class _Missing:
    """The credentials of a tool the run was given them for, absent from this execution."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def _can_carry_headers(capability: Capability) -> bool:
    """Whether a call of ``capability`` can carry per-run headers: an HTTP tool, or a
    source whose invoker takes credentials (OpenAPI; MCP over HTTP)."""
    if capability.url is not None:
        return True
    return bool(getattr(capability.invoker, "accepts_credentials", False))


def _names_of(capability: Capability) -> tuple[str, str, str]:
    """The names a caller may give credentials under, most specific first."""
    return capability.key, capability.tool, capability.source


class RunCredentials:
    """The credentials of one run, by name; the values are held as secrets (their
    ``repr`` shows only the names) and handed only to the transport.

    ``required`` are the names the run was first given credentials for (after a resume,
    they may be missing from this execution: calls of those tools are then refused)."""

    __slots__ = ("_by_name", "_redactor", "required")

    def __init__(self, given: Credentials | None, *, required: Iterable[str] = ()) -> None:
        self._by_name: dict[str, dict[str, SecretStr]] = {
            name: {header: SecretStr(value) for header, value in headers.items()}
            for name, headers in (given or {}).items()}
        self.required = frozenset(required) | frozenset(self._by_name)
        literals: list[str] = []
        for headers in self._by_name.values():
            for secret in headers.values():
                value = secret.get_secret_value()
                literals.append(value)
                _, _, token = value.partition(" ")
                if token.strip():
                    literals.append(token.strip())
        self._redactor = Redactor(literals=literals) if literals else None

    @property
    def names(self) -> list[str]:
        """The names given in this execution, sorted (what the run records)."""
        return sorted(self._by_name)

    def __repr__(self) -> str:
        return f"RunCredentials({self.names})"

    def __bool__(self) -> bool:
        return bool(self.required)

    def for_capability(self, capability: Capability) -> dict[str, str] | _Missing | None:
        """The headers to send with a call of ``capability``: this run's, :data:`MISSING`
        when the run was given credentials for it but this execution was not, None when
        the run has none for it (the catalog's own apply)."""
        for name in _names_of(capability):
            headers = self._by_name.get(name)
            if headers is not None:
                return {header: secret.get_secret_value() for header, secret in headers.items()}
        if any(name in self.required for name in _names_of(capability)):
            return MISSING
        return None

    def missing_error(self, capability: Capability) -> StepError:
        """The refusal of a call whose credentials this execution lacks."""
        name = next(n for n in _names_of(capability) if n in self.required)
        return StepError(
            category=ErrorCategory.AUTH_ERROR, code="CREDENTIALS_MISSING",
            message=f"not sent: this run was started with credentials for {name!r}, and this "
                    "execution was not given them again; resume the run with "
                    f"resume(run_id, credentials={{{name!r}: {{...}}}})",
            source=ErrorSource.ENGINE, retryable=False, request_sent=False,
            details={"credentials_for": name})

    def scrub(self, result: CallResult) -> CallResult:
        """``result`` with every value of this run's credentials masked wherever a tool
        echoed one back (its data, its error), the document's shape kept."""
        return result.with_echoes_masked(self._redactor)

    def needed_by(self, capabilities: Iterable[Capability]) -> list[str]:
        """The required names missing from this execution that ``capabilities`` use."""
        return sorted({n for cap in capabilities
                       if self.for_capability(cap) is MISSING
                       for n in _names_of(cap) if n in self.required})


def check_credentials(given: Any, catalog: Catalog) -> dict[str, dict[str, str]] | None:
    """The credentials a caller gave, checked against the catalog before the run starts;
    :class:`InvalidInput` naming the name or header at fault (never a value)."""
    if given is None:
        return None
    if not isinstance(given, Mapping):
        raise InvalidInput("credentials must be a mapping {tool or source name: {header: "
                           f"value}}, not {type(given).__name__}")
    if len(given) > MAX_NAMES:
        raise InvalidInput(f"credentials name {len(given)} tools; at most {MAX_NAMES}")
    capabilities = list(catalog)
    checked: dict[str, dict[str, str]] = {}
    for name, headers in given.items():
        if not isinstance(name, str):
            raise InvalidInput("credentials: every key is a tool, source or capability name")
        matching = [c for c in capabilities if name in _names_of(c)]
        if not matching:
            known = sorted({c.tool for c in capabilities} | {c.source for c in capabilities})
            raise InvalidInput(f"credentials for {name[:100]!r}: the catalog has no tool, "
                               f"source or capability of that name (known: "
                               f"{', '.join(known[:30])})")
        refused = [c.key for c in matching if not _can_carry_headers(c)]
        if refused:
            raise InvalidInput(f"credentials for {name!r}: {', '.join(refused[:5])} cannot "
                               "carry per-run headers (a Python tool, or an MCP server over "
                               "stdio); give per-run credentials to HTTP tools, OpenAPI "
                               "sources and MCP servers over HTTP")
        if not isinstance(headers, Mapping) or not headers:
            raise InvalidInput(f"credentials for {name!r} must be a non-empty mapping "
                               "{header name: value}")
        if len(headers) > MAX_HEADERS:
            raise InvalidInput(f"credentials for {name!r} have {len(headers)} headers; "
                               f"at most {MAX_HEADERS}")
        out: dict[str, str] = {}
        for header, value in headers.items():
            if not isinstance(header, str) or not _HEADER_NAME.match(header):
                raise InvalidInput(f"credentials for {name!r}: {str(header)[:60]!r} is not an "
                                   "HTTP header name")
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            if not isinstance(value, str) or not value or len(value) > MAX_VALUE_CHARS \
                    or _BAD_VALUE.search(value):
                raise InvalidInput(f"credentials for {name!r}: the value of header {header!r} "
                                   f"must be non-empty text of at most {MAX_VALUE_CHARS} "
                                   "characters without line breaks (the value is not shown)")
            out[header] = value
        checked[name] = out
    return checked or None
