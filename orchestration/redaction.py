"""Secret redaction for everything dagwright writes about a run: spans, logs, the debug store.

Secrets reach the engine through three doors: the catalog (header values, credentials in
URLs), the LLM API key, and text that flows through a run (parameters, tool errors, LLM
prompts and answers). The first two are known values, so they are removed wherever they
appear verbatim — the catalog is read again whenever it changes, so a capability added
after the orchestrator was built is covered too. The third can only be recognised by
shape, and the redactor understands the shapes secrets travel in:

* **key/value pairs** in prose, query strings, headers and JSON — ``password=…``,
  ``"api_key": "…"``, ``X-Api-Key: …`` — *including JSON encoded inside JSON* (a tool
  output or error body quoted in a prompt is JSON in a JSON string: ``\\"token\\": \\"…\\"``,
  at any depth of escaping);
* **URLs**: credentials in the userinfo (``https://user:pass@host``, ``https://TOKEN@host``)
  and sensitive query parameters (``?key=…&sig=…``);
* **headers**: ``Authorization``, bearer/basic tokens, ``Cookie``/``Set-Cookie`` lines;
* **well-known token formats**: provider keys (``sk-…``), AWS, GitHub, Slack, JWTs;
* **a value cut by clipping**: the token just before a ``… [truncated N chars]`` marker may
  be the prefix of a secret the patterns no longer recognise, so it is masked;

plus any regex the operator adds with ``ORCH_REDACT_PATTERNS``.

Every built-in pattern runs in linear time: words are matched whole with possessive
quantifiers and anchored at their start, so no text — ``"api key: " + "a-" * 16000``
included — can make the regex engine backtrack (a redactor on the event loop that takes
seconds stalls every step of every run).

Redaction is applied at the point where text leaves the engine (span attributes and
events, log records, debug-store records, reprs, CLI output); the caller's own
``RunResult`` is left as it is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    from orchestration.catalog import Catalog
    from orchestration.config import OrchestratorConfig

__all__ = ["DEFAULT_REDACTOR", "MASK", "SENSITIVE_NAME", "Redactor", "redact_url",
           "secret_header_values", "secret_url_parts"]

MASK = "[REDACTED]"

# Names of fields/headers whose values are secrets whatever they look like.
SENSITIVE_NAME = re.compile(
    r"(?i)(authorization|api[_-]?key|apikey|access[_-]?key|secret|token(?!s)|password|passwd|"
    r"cookie|credential(?!s?_for\b)|private[_-]?key|session[_-]?id|signature)"
)
# (credentials_for: the names of the tools a run has per-run credentials for, as the run
# and a credentials_required answer list them — names, never values)
# Query parameters whose short names mark a secret only inside a URL.
_SENSITIVE_QUERY_NAMES = frozenset({"key", "sig", "code", "auth", "pwd", "pass", "sid", "state",
                                    "client_secret", "x-amz-signature", "x-amz-credential"})

# --- the shapes (each pattern is linear: see the module docstring) ------------------------

# "Authorization: Bearer abc", authorization='Token xyz' (header text, logfmt). A quoted
# key is JSON or a repr: its string value is _PAIR's, and anything else (an object, a
# number) is structure this must not eat
_AUTHORIZATION = re.compile(r"(?i)(\bauthorization\s*+[:=]\s*+[\"']?)[^\"'\r\n,}]++")
# any remaining bearer/basic token (not a lower-case word: "a bearer token is required")
_SCHEME_TOKEN = re.compile(
    r"(?i)(\b(?:bearer|basic)\s++)(?-i:(?![a-z]++\b))[A-Za-z0-9._~+/=-]{4,}+")
# Cookie / Set-Cookie header lines: every cookie on the line (a quoted key is JSON or a
# repr, whose string value _PAIR masks: the rest of its line is other members)
_COOKIE_LINE = re.compile(r"(?im)((?<![\w-])(?:set-)?cookie\s*+:\s*+)[^\r\n]++")
# key = value, key: value, "key": "value", \"key\": \"value\" ...: the key is a whole word
# (matched possessively from its first character), the value unquoted, quoted, or quoted
# one or more JSON-encodings deep (a run of backslashes before the quote ends it)
_PAIR = re.compile(
    r"(?<![\w-])(?P<key>[\w-]++)"
    r"(?P<sep>(?:\\*+[\"'])?\s*+[:=]\s*+)"
    r"(?P<val>\\*+\"(?:[^\"\\\n]++|\\++(?!\"))*+"
    r"|\\*+'[^'\n]*+"
    r"|(?![{\[])[^\s\"'\\&,;}\]]++)"
)
# scheme://userinfo@ — the userinfo masked whole (a token may be the user name)
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*+://)(?P<userinfo>[^\s/?#@\"'<>\\]++)@")
# a userinfo that is a placeholder (USER, USER:PASSWORD), as dagwright's own messages show
_PLACEHOLDER_USERINFO = re.compile(r"[A-Z][A-Z_]*+(?::[A-Z][A-Z_]*+)?")
# ?name=value / &name=value in URLs
_QUERY_PAIR = re.compile(r"(?<=[?&;])(?P<key>[A-Za-z0-9_.~%\[\]-]++)=(?P<val>[^&#\s\"'<>\\]++)")
# the token a clip cut, just before its "… [truncated N chars]" marker (a quote before it
# is the string's own, kept so that JSON stays JSON)
_CUT_TOKEN = re.compile(
    r"(?<![^\s…\"'])[^\s…\"']{4,}+(?=…\s\[[^\]\n]{0,40}?truncated\s\d++\schars\])")
_TOKEN_FORMATS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bsk-[A-Za-z0-9_-]{8,}+"),  # OpenAI / Anthropic style sk-, sk-ant-, sk-proj-
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}+\b"),  # GitHub
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}+\b"),  # Slack
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{5,}+"),  # JWT
)

# Every shape needs one of these (lower-cased) substrings: text without any of them —
# most text — skips the regexes (plain substring search is far cheaper).
_PAIR_TRIGGERS = ("authoriz", "key", "secret", "token", "passw", "cookie", "credential",
                  "session", "signature")
_TOKEN_TRIGGERS = ("bearer", "basic", "sk-", "akia", "asia", "ghp_", "gho_", "ghu_", "ghs_",
                   "ghr_", "xox", "eyj")


def _is_sensitive_key(key: str) -> bool:
    return bool(SENSITIVE_NAME.search(key))


def _mask_pair(match: re.Match[str]) -> str:
    if not _is_sensitive_key(match["key"]):
        return match.group(0)
    value = match["val"]
    opening = re.match(r"\\*[\"']", value)
    if opening is None and _QUOTED_KEY.match(match["sep"]):
        # a quoted key with an unquoted value is a JSON (or repr) number or literal:
        # masking it would break the document, and a secret travels as a string
        return match.group(0)
    body = value[opening.end():] if opening else value
    if body and body.strip("*") == "":
        return match.group(0)  # already masked by whoever wrote it ("********")
    if not opening and body in ("null", "true", "false", "None", "REDACTED"):
        return match.group(0)  # no secret there, and masking it would break JSON text
    return match["key"] + match["sep"] + (opening.group(0) if opening else "") + MASK


_QUOTED_KEY = re.compile(r"\\*[\"']")


def _mask_query(match: re.Match[str]) -> str:
    key = match["key"]
    if _is_sensitive_key(key) or key.lower() in _SENSITIVE_QUERY_NAMES:
        return f"{key}={MASK}" if match["val"] != MASK else match.group(0)
    return match.group(0)


def _mask_userinfo(match: re.Match[str]) -> str:
    if match["userinfo"] in ("REDACTED:REDACTED", "REDACTED", MASK):
        return match.group(0)  # masked already (url.full follows the HTTP conventions)
    if _PLACEHOLDER_USERINFO.fullmatch(match["userinfo"]):
        return match.group(0)  # USER:PASSWORD in an example of a URL's form
    return f"{match['scheme']}{MASK}@"


class Redactor:
    """Removes secrets from text and JSON-like values.

    ``patterns`` are extra regexes (the whole match is masked); ``literals`` are known
    secret values (header values, API keys) masked wherever they appear verbatim; a
    ``catalog`` adds the secrets of its capabilities (header values, URL credentials and
    sensitive query values), read again whenever the catalog changes.
    Redaction is idempotent: redacting twice gives the same text.
    """

    def __init__(
        self,
        patterns: Iterable[str] = (),
        literals: Iterable[str] = (),
        *,
        catalog: Catalog | None = None,
    ) -> None:
        patterns = list(patterns)
        self._extra = tuple(re.compile(p) for p in patterns)
        # a pattern with its own global flags cannot join an alternation: test it alone
        self._extra_any = (re.compile("|".join(f"(?:{p})" for p in patterns))
                           if patterns and not any(p.startswith("(?") and p[2:3].isalpha()
                                                   for p in patterns) else None)
        self._own_literals = {s for s in literals if len(s) >= 4}
        self._catalog = catalog
        self._catalog_revision = -1
        self._literals: tuple[str, ...] = ()
        self._refresh_literals()
        # short texts redacted before, for as long as the known secrets are the same: a
        # service's answers repeat names, statuses and messages run after run, and each
        # costs a dozen pattern searches
        self._done: dict[str, str] = {}
        self._done_for: tuple[str, ...] = self._literals

    @classmethod
    def from_config(
        cls, config: OrchestratorConfig, catalog: Catalog | None = None
    ) -> Redactor:
        """The redactor of a run: config patterns, the LLM key, the catalog's secrets."""
        literals: list[str] = []
        if config.llm_api_key is not None:
            literals.append(config.llm_api_key.get_secret_value())
        return cls(config.redact_patterns, literals, catalog=catalog)

    def _refresh_literals(self) -> tuple[str, ...]:
        """The known secrets, the catalog's re-read when it changed since the last call."""
        catalog = self._catalog
        if catalog is None:
            if not self._literals and self._own_literals:
                self._literals = _longest_first(self._own_literals)
            return self._literals
        revision = catalog.revision
        if revision != self._catalog_revision:
            found = set(self._own_literals)
            for capability in catalog:
                found.update(secret_header_values(capability.headers))
                if capability.url:
                    found.update(secret_url_parts(capability.url))
                # credentials a source holds apart from the capability (an OpenAPI
                # document's securitySchemes), whatever header or parameter carries them
                secret_values = getattr(capability.invoker, "secret_values", None)
                if callable(secret_values):
                    found.update(secret_values())
            self._literals = _longest_first({s for s in found if len(s) >= 4})
            self._catalog_revision = revision
        return self._literals

    def known_secrets(self) -> tuple[str, ...]:
        """The known secret values now (read again when the catalog changed): the same
        object as long as they have not changed, so a cache of redacted text can tell
        when it is stale."""
        return self._refresh_literals()

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED]``."""
        if not text:
            return text
        literals = self._refresh_literals()
        if len(text) > _REMEMBERED_CHARS:
            return self._redact(text, literals)
        if literals is not self._done_for:
            self._done = {}
            self._done_for = literals
        done = self._done.get(text)
        if done is None:
            if len(self._done) >= _REMEMBERED:
                self._done = {}
            done = self._done[text] = self._redact(text, literals)
        return done

    def _redact(self, text: str, literals: tuple[str, ...]) -> str:
        for literal in literals:
            if literal in text:
                text = text.replace(literal, MASK)
        lowered = text.lower()
        if any(trigger in lowered for trigger in _PAIR_TRIGGERS):
            text = _AUTHORIZATION.sub(rf"\1{MASK}", text)
            if "cookie" in lowered:
                text = _COOKIE_LINE.sub(rf"\1{MASK}", text)
            text = _PAIR.sub(_mask_pair, text)
        if "://" in text and "@" in text:
            text = _URL_USERINFO.sub(_mask_userinfo, text)
        if "=" in text and ("?" in text or "&" in text):
            text = _QUERY_PAIR.sub(_mask_query, text)
        if any(trigger in lowered for trigger in _TOKEN_TRIGGERS):
            text = _SCHEME_TOKEN.sub(rf"\1{MASK}", text)
            for pattern in _TOKEN_FORMATS:
                text = pattern.sub(MASK, text)
        if "truncated" in text:
            text = _CUT_TOKEN.sub(MASK, text)
        if self._extra and (self._extra_any is None or self._extra_any.search(text)):
            for extra in self._extra:
                text = extra.sub(MASK, text)
        return text

    def redact_value(self, value: Any) -> Any:
        """A copy of a JSON-like value with the same shape: every string redacted, and
        under a key that names a secret every string masked whole (numbers, booleans and
        null are kept, keys are never changed), so a document stays the same document."""
        if isinstance(value, str):
            return self.redact(value)
        return _ValueWalk(self).value(value)


_REMEMBERED_CHARS = 512
"""Texts up to this long are redacted once per set of known secrets."""
_REMEMBERED = 16_384


class _ValueWalk:
    """One :meth:`Redactor.redact_value` of a document: the known secrets read once for
    the whole walk (not once per string) and the plain JSON types tested by exact type
    before the abstract ``Mapping`` (a service redacts every answer it sends: a run's
    result is a few hundred values)."""

    __slots__ = ("done", "redactor")

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        literals = redactor._refresh_literals()
        if literals is not redactor._done_for:
            redactor._done = {}
            redactor._done_for = literals
        self.done = redactor._done

    def text(self, text: str) -> str:
        done = self.done.get(text)
        if done is not None:
            return done
        return self.redactor.redact(text)

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is dict:
            return self.mapping(value)
        if kind is list:
            return [self.value(v) for v in value]
        if kind in _ATOMS:
            return value
        # the same, for subclasses and other mappings and sequences
        if isinstance(value, str):
            return self.redactor.redact(value)
        if isinstance(value, Mapping):
            return self.mapping(value)
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def mapping(self, value: Mapping[Any, Any]) -> dict[Any, Any]:
        return {k: (_mask_strings(v) if isinstance(k, str) and _sensitive_name(k)
                    else self.value(v))
                for k, v in value.items()}


_ATOMS = frozenset({int, float, bool, type(None)})


@functools.lru_cache(maxsize=4096)
def _sensitive_name(key: str) -> bool:
    """Whether a key names a secret (keys repeat in every document: decided once)."""
    return SENSITIVE_NAME.search(key) is not None


def _mask_strings(value: Any) -> Any:
    """``value`` with every non-empty string in it masked, its shape kept."""
    if isinstance(value, str):
        return MASK if value else value
    if isinstance(value, Mapping):
        return {k: _mask_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_strings(v) for v in value]
    return value


def _longest_first(literals: Iterable[str]) -> tuple[str, ...]:
    # longest first, so a secret that contains another is masked whole
    return tuple(sorted(set(literals), key=len, reverse=True))


def secret_header_values(headers: Mapping[str, str]) -> list[str]:
    """Values of headers whose names mark them as credentials (and their bare tokens)."""
    out: list[str] = []
    for name, value in headers.items():
        if not value or not SENSITIVE_NAME.search(name):
            continue
        out.append(value)
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in ("bearer", "basic", "token", "apikey"):
            out.append(token.strip())
    return out


def secret_url_parts(url: str) -> list[str]:
    """The secrets a URL carries: its userinfo (user and password) and the values of
    sensitive query parameters — known values, masked wherever a message repeats them."""
    try:
        parts = urlsplit(url)
        found: list[str] = []
        if parts.password:
            found.append(parts.password)
        elif parts.username and len(parts.username) >= 12:  # a token used as the user name
            found.append(parts.username)
        for key, value in parse_qsl(parts.query, keep_blank_values=False):
            if value and (_is_sensitive_key(key) or key.lower() in _SENSITIVE_QUERY_NAMES):
                found.append(value)
    except ValueError:  # an unparsable URL: the patterns still mask what they recognise
        return []
    return found


def redact_url(url: str, redactor: Redactor | None = None) -> str:
    """``url`` as it may be shown: credentials and sensitive query values masked."""
    return (redactor or DEFAULT_REDACTOR).redact(url)


DEFAULT_REDACTOR = Redactor()
"""Built-in patterns only; used where no run (and so no configuration) is in scope."""
