"""Who is calling: no token, one token (a single tenant: today's behaviour), or many
tokens each mapped to a tenant (``ORCH_SERVE_TOKENS``).

``ORCH_SERVE_TOKENS`` is a file, or a JSON object, mapping the SHA-256 (hex) of each
bearer token to its tenant: ``{"<sha256 of the token>": "acme"}``, or with the
tenant's limits ``{"<sha256>": {"tenant": "acme", "max_runs": 4,
"max_llm_calls_per_run": 20, "max_tokens_per_run": 50000, "max_cost_per_run": 0.5}}``.
Several tokens may name one tenant (rotation). Only hashes are kept, so the file
grants nothing if it leaks; a presented token is hashed and compared with every entry in
constant time.

A browser signs in once (``/login``) and holds a session cookie: an HMAC of the token's
hash — never the token, nor anything the tokens file holds — under a key every process
derives alike (:func:`cookie_key`: from ``ORCH_SERVE_SESSION_KEY`` and a fixed label), so
every worker of ``serve --workers N`` and every replica sharing the store accepts it, a
restart keeps viewers signed in, and it stops working when its token leaves the file.
Without ``ORCH_SERVE_SESSION_KEY`` the key comes from the label alone, and whoever holds
the tokens file could make a cookie for any token in it; set the key (the same on every
replica) so the file grants nothing. A single-token server's cookie is an HMAC under the
token itself (:func:`session_value`), which every process has.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestration.errors import ConfigError
from orchestration.result import RunLimits

__all__ = ["Access", "Caller", "Tenant", "cookie_key", "read_tenants", "token_hash"]

_HASH = re.compile(r"^(?:sha256:)?([0-9a-fA-F]{64})$")
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_LIMITS = ("max_llm_calls_per_run", "max_tokens_per_run", "max_cost_per_run")


def token_hash(token: str) -> str:
    """The hex SHA-256 of a token, as ``ORCH_SERVE_TOKENS`` names it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Tenant:
    """A tenant of the server: its name (the ``tenant`` of its runs' context), how many
    of its runs may execute at once (None: only the server's bound), its runs' budgets."""

    name: str
    max_runs: int | None = None
    limits: RunLimits | None = None


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: ``tenant`` None on a single-tenant server."""

    tenant: Tenant | None


ANYONE = Caller(None)


def _entry(key: str, value: Any, where: str) -> tuple[str, Tenant]:
    match = _HASH.match(key.strip()) if isinstance(key, str) else None
    if match is None:
        raise ConfigError(f"{where}: {str(key)[:20]!r}… is not the hex SHA-256 of a token "
                          "(64 hex digits; printf %s \"$TOKEN\" | sha256sum prints it)")
    if isinstance(value, str):
        value = {"tenant": value}
    if not isinstance(value, dict) or not isinstance(value.get("tenant"), str):
        raise ConfigError(f"{where}: the entry of {key[:12]}… must be a tenant name or "
                          "{\"tenant\": NAME, \"max_runs\": N, ...}")
    name = value["tenant"]
    if not _TENANT.match(name):
        raise ConfigError(f"{where}: tenant {name[:80]!r} is not usable: 1-128 letters, "
                          "digits, '_', '.', ':' or '-'")
    unknown = set(value) - {"tenant", "max_runs", *_LIMITS}
    if unknown:
        raise ConfigError(f"{where}: tenant {name!r} has unknown key(s) "
                          f"{', '.join(sorted(unknown))}; known: tenant, max_runs, "
                          f"{', '.join(_LIMITS)}")
    max_runs = value.get("max_runs")
    if max_runs is not None and (not isinstance(max_runs, int) or isinstance(max_runs, bool)
                                 or max_runs < 1):
        raise ConfigError(f"{where}: max_runs of tenant {name!r} must be a whole number >= 1")
    given = {k: value[k] for k in _LIMITS if value.get(k) is not None}
    try:
        limits = RunLimits.model_validate(given) if given else None
    except ValidationError as exc:
        raise ConfigError(f"{where}: the limits of tenant {name!r}: {exc.errors()[0]['msg']} "
                          f"({'.'.join(map(str, exc.errors()[0]['loc']))})") from None
    return match.group(1).lower(), Tenant(name, max_runs, limits)


def read_tenants(setting: str) -> dict[str, Tenant]:
    """The tenants ``ORCH_SERVE_TOKENS`` names (a JSON object, or a file holding one),
    by token hash; :class:`ConfigError` naming what is wrong (never a hash whole)."""
    text = setting.strip()
    where = "ORCH_SERVE_TOKENS"
    if not text.startswith("{"):
        path = Path(text).expanduser()
        try:
            text = path.read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read the tokens file {path}: {exc.strerror}"
                              ) from None
        where = f"{where} ({path})"
    try:
        table = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: not JSON: {exc}") from None
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{where}: must be a non-empty JSON object "
                          "{\"<sha256 of a token>\": \"<tenant>\"}")
    return dict(_entry(key, value, where) for key, value in table.items())


class Access:
    """Who may call the server, and as whom."""

    def __init__(self, token: str | None = None,
                 tenants: dict[str, Tenant] | None = None, *,
                 session_key: str | None = None) -> None:
        if token is not None and tenants:
            raise ConfigError("set ORCH_SERVE_TOKEN (one tenant) or ORCH_SERVE_TOKENS "
                              "(tenants by token), not both")
        self.token = token
        self.tenants = dict(tenants or {})
        self._key = cookie_key(session_key)
        self._cookies = {self._cookie_of(h): t for h, t in self.tenants.items()}

    @property
    def required(self) -> bool:
        """Whether requests must show a token (or a session cookie)."""
        return self.token is not None or bool(self.tenants)

    @property
    def multi_tenant(self) -> bool:
        return bool(self.tenants)

    def _cookie_of(self, digest: str) -> str:
        return hmac.new(self._key, digest.encode(), hashlib.sha256).hexdigest()

    def by_token(self, given: str) -> Caller | None:
        """The caller a bearer token (or the token typed at /login) is, if any."""
        if self.token is not None:
            return ANYONE if hmac.compare_digest(given.encode(), self.token.encode()) else None
        digest = token_hash(given)
        found: Tenant | None = None
        for known, tenant in self.tenants.items():  # every entry compared: constant time
            if hmac.compare_digest(digest, known):
                found = tenant
        return Caller(found) if found is not None else None

    def by_cookie(self, value: str) -> Caller | None:
        """The caller a session cookie belongs to, if any."""
        if self.token is not None:
            return ANYONE if hmac.compare_digest(value.encode(),
                                                 session_value(self.token).encode()) else None
        found: Tenant | None = None
        for cookie, tenant in self._cookies.items():
            if hmac.compare_digest(value.encode(), cookie.encode()):
                found = tenant
        return Caller(found) if found is not None else None

    def cookie_for(self, given: str) -> str | None:
        """The session cookie of a browser that signed in with ``given`` (None: refused)."""
        if self.by_token(given) is None:
            return None
        if self.token is not None:
            return session_value(self.token)
        return self._cookie_of(token_hash(given))


_COOKIE_LABEL = b"dagwright-ui-session/v1"


def cookie_key(session_key: str | None) -> bytes:
    """The key a multi-tenant server signs viewer cookies with: derived (HMAC-SHA256, the
    extract step of HKDF) from ``ORCH_SERVE_SESSION_KEY`` with a fixed label, so every
    process given the same setting derives the same key — none is drawn per process."""
    secret = session_key.encode("utf-8") if session_key else b""
    return hmac.new(secret, _COOKIE_LABEL, hashlib.sha256).digest()


def session_value(token: str) -> str:
    """The single-token server's session cookie: an HMAC of the token (not the token)."""
    return hmac.new(token.encode(), b"dagwright-ui-session", hashlib.sha256).hexdigest()
