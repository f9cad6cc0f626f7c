"""A document's ``securitySchemes`` as credentials the user gives, applied per request.

Credentials are given per document, by scheme name, either as ``credentials=`` of
``Catalog.add_openapi`` (or the ``credentials:`` key of a catalog file, where
``${VAR}`` reads the environment) or in ``ORCH_OPENAPI_CREDENTIALS``, a JSON object
``{"<tool>": {"<scheme>": ...}}``. They are held in memory as secrets (their ``repr``
shows nothing), added to a request only when it is sent, and never written into a
capability (so ``Catalog.to_dict``, the store and the viewer never see them).

Supported: HTTP ``bearer`` (a token), HTTP ``basic`` (``"user:password"`` or
``{username, password}``) and ``apiKey`` in a header, the query or a cookie (the key).
An operation's ``security`` lists alternatives; the first whose schemes all have
credentials is used, and an operation whose alternatives have none is sent without (the
API's 401 is then an ``AUTH_ERROR`` whose message names the schemes to configure).
OAuth2 and OpenID Connect schemes are not supported yet: a note says so at load time.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from orchestration.errors import CatalogError

__all__ = ["CREDENTIALS_ENV", "Credentials", "Scheme", "read_schemes"]

CREDENTIALS_ENV = "ORCH_OPENAPI_CREDENTIALS"


@dataclass(frozen=True)
class Scheme:
    """One security scheme: where its credential goes."""

    name: str
    kind: str  # bearer | basic | apiKey | unsupported
    location: str = "header"  # header | query | cookie
    param: str = "Authorization"
    why: str = ""  # for an unsupported scheme


def read_schemes(raw: Any) -> dict[str, Scheme]:
    """The document's ``components/securitySchemes`` (already dereferenced)."""
    schemes: dict[str, Scheme] = {}
    if not isinstance(raw, Mapping):
        return schemes
    for name, spec in raw.items():
        name = str(name)
        if not isinstance(spec, Mapping):
            continue
        kind = str(spec.get("type", ""))
        if kind == "http":
            scheme = str(spec.get("scheme", "")).lower()
            if scheme in ("bearer", "basic"):
                schemes[name] = Scheme(name, scheme)
            else:
                schemes[name] = Scheme(name, "unsupported", why=f"HTTP scheme {scheme!r}")
        elif kind == "apiKey" and spec.get("in") in ("header", "query", "cookie"):
            schemes[name] = Scheme(name, "apiKey", str(spec["in"]), str(spec.get("name", "")))
        else:
            schemes[name] = Scheme(name, "unsupported", why=f"type {kind!r}")
    return schemes


class Credentials:
    """The secrets of one document, by scheme name."""

    def __init__(self, label: str, tool: str, given: Mapping[str, Any] | None) -> None:
        self.label = label
        self._values: dict[str, SecretStr] = {}
        merged: dict[str, Any] = {}
        from_env = os.environ.get(CREDENTIALS_ENV)
        if from_env:
            try:
                table = json.loads(from_env)
            except ValueError as exc:
                raise CatalogError(f"{CREDENTIALS_ENV} must be a JSON object "
                                   f"{{tool: {{scheme: credential}}}}: {exc}") from None
            if not isinstance(table, dict):
                raise CatalogError(f"{CREDENTIALS_ENV} must be a JSON object "
                                   "{tool: {scheme: credential}}")
            entry = table.get(tool)
            if isinstance(entry, dict):
                merged.update(entry)
        merged.update(given or {})
        for scheme, value in merged.items():
            if isinstance(value, Mapping) and {"username", "password"} <= set(value):
                value = f"{value['username']}:{value['password']}"
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            if not isinstance(value, str) or not value:
                raise CatalogError(f"{label}: the credential for scheme {scheme!r} must be a "
                                   "non-empty string (basic: 'user:password' or "
                                   "{username, password})")
            self._values[str(scheme)] = SecretStr(value)

    def names(self) -> set[str]:
        return set(self._values)

    def __repr__(self) -> str:
        return f"Credentials({sorted(self._values)})"

    def apply(self, schemes: Mapping[str, Scheme], alternatives: list[list[str]],
              headers: dict[str, str], query: list[tuple[str, str]],
              cookies: dict[str, str]) -> None:
        """Add the credentials of the first alternative that has them all."""
        for names in alternatives:
            if not all(n in self._values and n in schemes
                       and schemes[n].kind != "unsupported" for n in names):
                continue
            for name in names:
                scheme, secret = schemes[name], self._values[name].get_secret_value()
                if scheme.kind == "bearer":
                    headers["Authorization"] = f"Bearer {secret}"
                elif scheme.kind == "basic":
                    token = base64.b64encode(secret.encode("utf-8")).decode("ascii")
                    headers["Authorization"] = f"Basic {token}"
                elif scheme.location == "header":
                    headers[scheme.param] = secret
                elif scheme.location == "query":
                    query.append((scheme.param, secret))
                else:
                    cookies[scheme.param] = secret
            return
