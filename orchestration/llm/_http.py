"""HTTP plumbing shared by the provider clients: one POST, status classification,
redaction of the API key, and small helpers for provider answers.

Every failure becomes an :class:`~orchestration.errors.LLMError` with a classified kind,
and the key is scrubbed from every message and raw body an error carries.
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from collections.abc import Mapping
from typing import Any

import httpx

from orchestration._json import UnreadableJSON, decode, is_limit
from orchestration._text import clip
from orchestration.errors import LLMError, LLMErrorKind
from orchestration.protocol import parse_retry_after


def token_count(value: Any, default: int) -> int:
    """A provider-reported token count, or ``default`` when it is missing or nonsense."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


# --- HTTP helpers shared by the provider clients ------------------------------------------

RAW_BODY_LIMIT = 2000
"""How much of a provider's body an :class:`LLMError` keeps in ``raw``."""

_MIN_SECRET_LEN = 4


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced.

    Some providers echo the key they received in their 401 message; that text goes into
    exceptions, logs and the debug store, so it is scrubbed before it leaves the client.
    """
    if secret and len(secret) >= _MIN_SECRET_LEN:
        return text.replace(secret, "[redacted]")
    return text


_NAME_INVALID = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(name: str) -> str:
    """``name`` made acceptable as a schema or tool name (``^[A-Za-z0-9_-]{1,64}$``).

    Both providers reject other names with a 400, which would look like a model failure.
    """
    cleaned = _NAME_INVALID.sub("_", name)[:64]
    return cleaned or "response"


def provider_error_message(body_text: str) -> str | None:
    """The human-readable message of a provider error body, in any of the usual shapes.

    OpenAI and Anthropic nest it under ``error.message``; Ollama sends ``error`` as a
    string; older vLLM puts ``message`` at the top level; FastAPI-based servers ``detail``.
    """
    try:
        body = decode(body_text)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    if isinstance(body.get("message"), str):
        return str(body["message"])
    detail = body.get("detail")
    if isinstance(detail, str):
        return detail
    if detail is not None:
        return json.dumps(detail)
    return None


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    *,
    payload: dict[str, Any],
    headers: Mapping[str, str],
    timeout_s: float,
    provider: str,
    secret: str | None,
) -> httpx.Response:
    """POST ``payload`` and return the response whatever its status.

    Transport failures become :class:`LLMError`. ``timeout_s`` is enforced both per
    socket operation (httpx) and for the whole call, since a server that trickles bytes
    would otherwise never trip a per-read timeout.
    """
    try:
        async with asyncio.timeout(timeout_s):
            return await client.post(url, json=payload, headers=dict(headers), timeout=timeout_s)
    except (httpx.HTTPError, TimeoutError) as exc:
        raise transport_error(exc, url, timeout_s=timeout_s, provider=provider,
                              secret=secret) from exc


def transport_error(
    exc: httpx.HTTPError | TimeoutError,
    url: str,
    *,
    timeout_s: float,
    provider: str,
    secret: str | None,
) -> LLMError:
    """The :class:`LLMError` for a request that got no answer (nothing was received)."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return LLMError(
            LLMErrorKind.TIMEOUT,
            f"no answer from {url} within {timeout_s:g}s ({type(exc).__name__})",
            provider=provider,
        )
    if isinstance(exc, httpx.ConnectError):
        return LLMError(
            LLMErrorKind.CONNECTION,
            redact(f"cannot connect to {url}: {exc or type(exc).__name__}", secret),
            provider=provider,
        )
    if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError):
        # Connection reset, or closed before a complete answer arrived.
        return LLMError(
            LLMErrorKind.CONNECTION,
            redact(f"connection to {url} failed: {exc or type(exc).__name__}", secret),
            provider=provider,
        )
    # Bad URL scheme, local protocol misuse, ...: a configuration problem.
    return LLMError(
        LLMErrorKind.OTHER,
        redact(f"request to {url} failed: {type(exc).__name__}: {exc}", secret),
        provider=provider,
    )


def setting_hint(status: int, message: str, *, url: str, base_url: str, base_example: str) -> str:
    """What to check for an answer that usually means a wrong setting, or "".

    A 401 names the key setting; a 404 the model when the provider says the model is
    unknown, else the base URL (the usual cause: an OpenAI-compatible base URL without
    its ``/v1``), with the URL that was actually requested.
    """
    if status in (401, 403):
        return (" — check the API key: ORCH_LLM_API_KEY (or api_key= where you build the "
                "client); it is missing, wrong or lacks access")
    if status == 404:
        if "model" in message.lower():
            return " — check ORCH_LLM_MODEL: the provider does not know that model"
        return (f" — check ORCH_LLM_BASE_URL: nothing answers at {url}; the base URL should "
                f"look like {base_example} (it is {base_url})")
    return ""


def error_for_status(
    response: httpx.Response, *, provider: str, secret: str | None, hint: str = ""
) -> LLMError:
    """Classify a non-2xx answer into an :class:`LLMError` carrying the provider's message
    (and ``hint``, what to check, when the client knows it)."""
    status = response.status_code
    body = redact(response.text, secret)
    message = provider_error_message(body) or (body.strip() and clip(body.strip(), 300))
    message = (message or response.reason_phrase or "no error message") + hint
    raw = clip(body, RAW_BODY_LIMIT)
    if status == 429:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if retry_after is None:
            retry_after_ms = parse_retry_after(response.headers.get("retry-after-ms"))
            retry_after = retry_after_ms / 1000 if retry_after_ms is not None else None
        return LLMError(
            LLMErrorKind.RATE_LIMIT, message, status=status, retry_after_s=retry_after,
            provider=provider, raw=raw,
        )
    if status in (401, 403):
        kind = LLMErrorKind.AUTH
    elif status == 408:
        kind = LLMErrorKind.TIMEOUT
    elif status >= 500:  # includes Anthropic's 529 "overloaded"
        kind = LLMErrorKind.SERVER
    else:
        kind = LLMErrorKind.OTHER
    return LLMError(kind, message, status=status, provider=provider, raw=raw)


def malformed(
    response: httpx.Response, reason: str, provider: str, secret: str | None
) -> LLMError:
    """A 2xx answer that cannot be read; ``raw`` keeps the start of the body for debugging."""
    return LLMError(
        LLMErrorKind.MALFORMED,
        reason,
        status=response.status_code,
        provider=provider,
        raw=clip(redact(response.text, secret), RAW_BODY_LIMIT),
    )


def json_object_body(
    response: httpx.Response, *, provider: str, secret: str | None
) -> dict[str, Any]:
    """The body of a 2xx answer as a JSON object, or a MALFORMED :class:`LLMError`."""
    try:
        data = decode(response.content)  # bounded: a provider's body is input like any other
    except UnreadableJSON as exc:
        content_type = response.headers.get("content-type", "no content type")
        reason = (f"answer is not JSON ({content_type})" if not is_limit(exc)
                  else f"answer holds {exc}")
        raise malformed(response, reason, provider, secret) from None
    if not isinstance(data, dict):
        raise malformed(response, "answer is not a JSON object", provider, secret)
    return data


class HTTPLLMClient:
    """What every provider client over httpx shares.

    The connection pool: borrowed from the caller (``http_client``, then the caller owns
    it and its event loop), or owned — created lazily for the running event loop and
    replaced when a call comes from another loop, because an httpx pool cannot outlive
    the loop it was made in (each sync ``Orchestrator.run()`` runs its own loop). Also the
    API key and extra headers, and a ``repr`` written out so that the key can never end
    up in a repr or a log line.
    """

    provider = "http"
    structured_output: str

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout_s: float,
        http_client: httpx.AsyncClient | None,
        extra_headers: dict[str, str] | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self._api_key = api_key
        self._extra_headers = dict(extra_headers or {})
        self._lent = http_client
        self._owned: httpx.AsyncClient | None = None
        self._owned_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    def _pool(self) -> httpx.AsyncClient:
        """The pool to send through, made for the running loop if it is ours."""
        if self._lent is not None:
            return self._lent
        loop = asyncio.get_running_loop()
        if self._owned is None or self._owned_loop is None or self._owned_loop() is not loop:
            self._owned = httpx.AsyncClient(timeout=self.timeout_s)
            self._owned_loop = weakref.ref(loop)
        return self._owned

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"structured_output={self.structured_output!r})"
        )

    async def aclose(self) -> None:
        """Close the pool this client owns (never one the caller lent it)."""
        owned, self._owned, self._owned_loop = self._owned, None, None
        if owned is not None:
            await owned.aclose()
