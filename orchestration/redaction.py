"""Secret redaction for everything dagwright writes about a run: spans, logs, the debug store.

Secrets reach the engine through three doors: tool headers in the catalog, the LLM API
key, and text that flows through a run (parameters, tool errors, LLM prompts and
answers). The first two are known values, so they are removed wherever they appear
verbatim. The third can only be recognised by shape: provider keys (``sk-…``), bearer
tokens, ``Authorization:`` values, ``api_key=…`` style pairs and a few well-known token
formats, plus any regex the operator adds with ``ORCH_REDACT_PATTERNS``.

Redaction is applied at the point where text leaves the engine (span attributes and
events, log records, debug-store records); the caller's own ``RunResult`` is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestration.catalog import Catalog
    from orchestration.config import OrchestratorConfig

__all__ = ["DEFAULT_REDACTOR", "MASK", "SENSITIVE_NAME", "Redactor", "secret_header_values"]

MASK = "[REDACTED]"

# Names of fields/headers whose values are secrets whatever they look like.
SENSITIVE_NAME = re.compile(
    r"(?i)(authorization|api[_-]?key|apikey|access[_-]?key|secret|token(?!s)|password|passwd|"
    r"cookie|credential|private[_-]?key|session[_-]?id|signature)"
)

# (pattern, replacement) pairs. Replacements keep the label so a reader still sees *what*
# was there; group 1 is always the part that is kept.
_BUILTIN: tuple[tuple[str, str], ...] = (
    # "Authorization: Bearer abc", "authorization": "Basic xyz" (header text and JSON)
    (r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?)[^\"'\r\n,}]+", rf"\1{MASK}"),
    # any remaining bearer/basic token
    (r"(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{4,}", rf"\1{MASK}"),
    # api_key=..., "token": "...", password: ... (query strings, JSON, prose)
    (
        r"(?i)(\b[\w-]*(?:api[_-]?key|apikey|access[_-]?key|secret|token(?!s)|password|passwd)"
        r"[\w-]*[\"']?\s*[:=]\s*[\"']?)(?![{\[])[^\s\"'&,;}\]]+",
        rf"\1{MASK}",
    ),
    # provider keys: OpenAI / Anthropic style sk-..., sk-ant-..., sk-proj-...
    (r"\bsk-[A-Za-z0-9_-]{8,}", MASK),
    # AWS access key ids, GitHub and Slack tokens, JWTs
    (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", MASK),
    (r"\bgh[pousr]_[A-Za-z0-9]{20,}\b", MASK),
    (r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b", MASK),
    (r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\b", MASK),
)
_BUILTIN_COMPILED = tuple((re.compile(p), r) for p, r in _BUILTIN)
# Every built-in pattern needs one of these (lower-cased) substrings: text without any
# of them — most text — skips the regexes (plain substring search is far cheaper).
_TRIGGERS = ("authoriz", "bearer", "basic", "key", "secret", "token", "passw", "sk-", "akia",
             "asia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "xox", "eyj")


class Redactor:
    """Removes secrets from text and JSON-like values.

    ``patterns`` are extra regexes (the whole match is masked); ``literals`` are known
    secret values (header values, API keys) masked wherever they appear verbatim.
    Redaction is idempotent: redacting twice gives the same text.
    """

    def __init__(self, patterns: Iterable[str] = (), literals: Iterable[str] = ()) -> None:
        patterns = list(patterns)
        self._extra = tuple(re.compile(p) for p in patterns)
        # a pattern with its own global flags cannot join an alternation: test it alone
        self._extra_any = (re.compile("|".join(f"(?:{p})" for p in patterns))
                           if patterns and not any(p.startswith("(?") and p[2:3].isalpha()
                                                   for p in patterns) else None)
        # longest first, so a secret that contains another is masked whole
        self._literals = tuple(sorted({s for s in literals if len(s) >= 4}, key=len, reverse=True))

    @classmethod
    def from_config(
        cls, config: OrchestratorConfig, catalog: Catalog | None = None
    ) -> Redactor:
        """The redactor of a run: config patterns, the LLM key, sensitive catalog headers."""
        literals: list[str] = []
        if config.llm_api_key is not None:
            literals.append(config.llm_api_key.get_secret_value())
        if catalog is not None:
            for capability in catalog:
                literals.extend(secret_header_values(capability.headers))
        return cls(config.redact_patterns, literals)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED]``."""
        if not text:
            return text
        for literal in self._literals:
            if literal in text:
                text = text.replace(literal, MASK)
        lowered = text.lower()
        if any(trigger in lowered for trigger in _TRIGGERS):
            for pattern, replacement in _BUILTIN_COMPILED:
                text = pattern.sub(replacement, text)
        if self._extra and (self._extra_any is None or self._extra_any.search(text)):
            for pattern in self._extra:
                text = pattern.sub(MASK, text)
        return text

    def redact_value(self, value: Any) -> Any:
        """A copy of a JSON-like value with strings redacted and sensitive keys masked."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {
                k: (MASK if isinstance(k, str) and SENSITIVE_NAME.search(k) and v not in (None, "")
                    else self.redact_value(v))
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value


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


DEFAULT_REDACTOR = Redactor()
"""Built-in patterns only; used where no run (and so no configuration) is in scope."""
