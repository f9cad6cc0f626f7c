"""A document's ``securitySchemes`` as credentials the user gives, applied per request.

Credentials are given per document, by scheme name, either as ``credentials=`` of
``Catalog.add_openapi`` (or the ``credentials:`` key of a catalog file, where
``${VAR}`` reads the environment) or in ``ORCH_OPENAPI_CREDENTIALS``, a JSON object
``{"<tool>": {"<scheme>": ...}}``. They are held in memory as secrets (their ``repr``
shows nothing), added to a request only when it is sent, and never written into a
capability (so ``Catalog.to_dict``, the store and the viewer never see them).

Supported: HTTP ``bearer`` (a token), HTTP ``basic`` (``"user:password"`` or
``{username, password}``), ``apiKey`` in a header, the query or a cookie (the key), and
OAuth2's client-credentials flow (``"client_id:client_secret"`` or ``{client_id,
client_secret}``): the token is fetched from the flow's ``tokenUrl`` — only when that URL
is on the user's ``token_urls`` list, so a document cannot send a client secret to a host
nobody approved — kept until shortly before it expires, and dropped on a 401.
An operation's ``security`` lists alternatives; the first whose schemes all have
credentials is used, and an operation whose alternatives have none is sent without (the
API's 401 is then an ``AUTH_ERROR`` whose message names the schemes to configure).
Other OAuth2 flows and OpenID Connect are not supported: a note says so at load time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
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
    token_url: str = ""  # oauth2 client credentials
    scopes: tuple[str, ...] = field(default_factory=tuple)


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
        elif kind == "oauth2" and isinstance((spec.get("flows") or {}).get("clientCredentials"),
                                             Mapping) and spec["flows"]["clientCredentials"].get("tokenUrl"):
            flow = spec["flows"]["clientCredentials"]
            scopes = tuple(str(k) for k in (flow.get("scopes") or {}))
            schemes[name] = Scheme(name, "oauth2", token_url=str(flow["tokenUrl"]), scopes=scopes)
        elif kind == "oauth2":
            flows = ", ".join(str(f) for f in spec.get("flows") or {}) or "none"
            schemes[name] = Scheme(name, "unsupported", why=f"OAuth2 flow(s) {flows}; only "
                                   "clientCredentials with a tokenUrl is fetched")
        else:
            schemes[name] = Scheme(name, "unsupported", why=f"type {kind!r}")
    return schemes


class Credentials:
    """The secrets of one document, by scheme name."""

    def __init__(self, label: str, tool: str, given: Mapping[str, Any] | None,
                 token_urls: Sequence[str] = ()) -> None:
        self.label = label
        self.token_urls = {str(u) for u in token_urls}
        self._values: dict[str, SecretStr] = {}
        self._tokens: dict[str, tuple[SecretStr, float]] = {}  # scheme -> (token, expires at)
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
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
            if isinstance(value, Mapping) and {"client_id", "client_secret"} <= set(value):
                value = f"{value['client_id']}:{value['client_secret']}"
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            if not isinstance(value, str) or not value:
                raise CatalogError(f"{label}: the credential for scheme {scheme!r} must be a "
                                   "non-empty string (basic: 'user:password' or "
                                   "{username, password})")
            self._values[str(scheme)] = SecretStr(value)

    def names(self) -> set[str]:
        return set(self._values)

    def secret_values(self) -> list[str]:
        """Every secret this document's calls carry — each credential, a basic
        credential's password and its base64 header form, the tokens fetched so far — for
        the redactor, which masks known values wherever they appear verbatim."""
        out: list[str] = []
        for secret in self._values.values():
            value = secret.get_secret_value()
            out.append(value)
            _, colon, password = value.partition(":")
            if colon and password:
                out.append(password)
                out.append(base64.b64encode(value.encode()).decode())
        out.extend(token.get_secret_value() for token, _ in self._tokens.values())
        return out

    def __repr__(self) -> str:
        return f"Credentials({sorted(self._values)})"

    def check(self, schemes: Mapping[str, Scheme]) -> None:
        """A client secret goes only to a token URL the user allowed."""
        for name in self._values:
            scheme = schemes.get(name)
            if scheme is not None and scheme.kind == "oauth2" and scheme.token_url not in self.token_urls:
                raise CatalogError(
                    f"{self.label}: scheme {name!r} fetches its token from {scheme.token_url}; "
                    "a client secret is sent there only when you allow it: "
                    f"token_urls=[{scheme.token_url!r}]")

    def usable(self, schemes: Mapping[str, Scheme], alternatives: list[list[str]]) -> list[str]:
        """The schemes of the first alternative that has every credential (or [])."""
        for names in alternatives:
            if all(n in self._values and n in schemes and schemes[n].kind != "unsupported"
                   for n in names):
                return names
        return []

    async def fetch_tokens(self, schemes: Mapping[str, Scheme], names: list[str],
                           http: httpx.AsyncClient, timeout_s: float) -> None:
        """Make sure each OAuth2 scheme among ``names`` has a token that is not about to
        expire (one fetch at a time; a failure raises :class:`httpx.HTTPError` or
        ``ValueError``, which the caller reports as an auth error)."""
        wanted = [n for n in names if schemes[n].kind == "oauth2"]
        if not wanted:
            return
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            for name in wanted:
                held = self._tokens.get(name)
                if held is not None and held[1] > time.monotonic() + 30:
                    continue
                scheme = schemes[name]
                client_id, _, secret = self._values[name].get_secret_value().partition(":")
                form = {"grant_type": "client_credentials"}
                if scheme.scopes:
                    form["scope"] = " ".join(scheme.scopes)
                response = await http.post(scheme.token_url, data=form, auth=(client_id, secret),
                                           timeout=timeout_s)
                if response.status_code != 200:
                    raise ValueError(f"the token URL {scheme.token_url} answered HTTP "
                                     f"{response.status_code}")
                answer = response.json()
                token = answer.get("access_token") if isinstance(answer, dict) else None
                if not isinstance(token, str) or not token:
                    raise ValueError(f"the token URL {scheme.token_url} gave no access_token")
                lifetime = answer.get("expires_in")
                ttl = float(lifetime) if isinstance(lifetime, int | float) else 3600.0
                self._tokens[name] = (SecretStr(token), time.monotonic() + ttl)

    def forget_tokens(self) -> None:
        """Drop fetched tokens (after a 401: the next call fetches new ones)."""
        self._tokens.clear()

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
                if scheme.kind == "oauth2":
                    held = self._tokens.get(name)
                    if held is not None:
                        headers["Authorization"] = f"Bearer {held[0].get_secret_value()}"
                elif scheme.kind == "bearer":
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
