"""Server-sent events over httpx, for the providers' streamed answers.

Both providers stream with ``text/event-stream`` (OpenAI: ``data:`` lines ending with
``data: [DONE]``; Anthropic: ``event:`` + ``data:`` pairs). The decoder follows the
WHATWG event-stream rules that matter for a one-shot response — ``data`` lines joined by
newlines, ``event`` names, ``:`` comment lines (keep-alives), one optional space after
the colon, a leading byte-order mark, dispatch on a blank line — over httpx's own line
splitting (``\\n``, ``\\r\\n``, ``\\r``). ``id`` and ``retry`` are ignored on purpose: they
serve reconnection, and a reconnected LLM answer would repeat text. It is this small
decoder rather than a dependency (``httpx-sse``) because the whole parse is these rules,
and the core dependencies stay lean; what needed care is around it: the deadline.

:class:`EventStream` owns one streamed HTTP response. ``timeout_s`` bounds the whole
call, from sending the request to the last byte, exactly as
:func:`~orchestration.llm._http.post_json` does: a server trickling a byte now and then
never trips httpx's per-read timeout, so every wait is also bounded by one deadline (wall
clock: time a consumer spends between deltas counts too). The
deadline is applied per wait, never as a scope around a ``yield`` (a timeout scope left
open across a yield would cancel whatever the consumer happens to be doing). Every
failure becomes an :class:`~orchestration.errors.LLMError`; once the answer has begun,
its ``partial`` carries the text received so far.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from orchestration.errors import LLMError, LLMErrorKind
from orchestration.llm._http import provider_error_message, redact, transport_error
from orchestration.llm.base import close_iterator


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched server-sent event: its type (``message`` by default) and data."""

    event: str
    data: str


async def decode_events(lines: AsyncIterator[str]) -> AsyncGenerator[SSEEvent, None]:
    """The events of an event stream given as lines without their line endings.

    An event still pending at the end of the stream (no blank line after it) is
    dispatched too: some servers close right after ``data: [DONE]``, and whether the
    answer was complete is the provider parser's call, not the framing's.
    """
    event_type = ""
    data: list[str] = []
    first = True
    async for line in lines:
        if first:
            line, first = line.removeprefix("\ufeff"), False
        if not line:
            if data:
                yield SSEEvent(event_type or "message", "\n".join(data))
            event_type, data = "", []
            continue
        if line.startswith(":"):
            continue  # a comment: servers send them as keep-alives
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event_type = value
    if data:
        yield SSEEvent(event_type or "message", "\n".join(data))


class EventStream:
    """One streamed response: its status and headers, its body as events, its errors.

    ``received`` is a function giving the answer text parsed so far; it becomes the
    ``partial`` of every error raised once the body has begun, so the provider parser
    needs no error handling of its own for a cut.
    """

    def __init__(
        self,
        response: httpx.Response,
        *,
        url: str,
        deadline: float,
        timeout_s: float,
        provider: str,
        secret: str | None,
    ) -> None:
        self.response = response
        self.url = url
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.provider = provider
        self.secret = secret
        self.received: Callable[[], str] = lambda: ""

    @property
    def is_event_stream(self) -> bool:
        return self.response.headers.get("content-type", "").startswith("text/event-stream")

    async def read_body(self) -> httpx.Response:
        """Read the whole body (an error answer, or a server that did not stream)."""
        try:
            async with asyncio.timeout_at(self.deadline):
                await self.response.aread()
        except (httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(exc, self.url, timeout_s=self.timeout_s,
                                  provider=self.provider, secret=self.secret) from exc
        return self.response

    async def events(self) -> AsyncGenerator[SSEEvent, None]:
        """The body's events, each wait bounded by the call's deadline."""
        async with aclosing(self._lines()) as lines, aclosing(decode_events(lines)) as events:
            async for event in events:
                yield event

    async def _lines(self) -> AsyncGenerator[str, None]:
        lines = self.response.aiter_lines()
        try:
            while True:
                try:
                    async with asyncio.timeout_at(self.deadline):
                        line = await anext(lines)
                except StopAsyncIteration:
                    return
                except (httpx.HTTPError, TimeoutError) as exc:
                    raise self._cut(exc) from exc
                yield line
        finally:
            await close_iterator(lines)

    def _cut(self, exc: BaseException) -> LLMError:
        """The error for a body that stopped arriving: cut, or over the deadline."""
        partial = self.received()
        got = f"after {len(partial)} characters of the answer"
        if isinstance(exc, TimeoutError | httpx.TimeoutException):
            return LLMError(
                LLMErrorKind.TIMEOUT,
                f"the stream from {self.url} did not finish within {self.timeout_s:g}s; "
                f"stopped {got} ({type(exc).__name__})",
                provider=self.provider,
                partial=partial,
            )
        detail = redact(str(exc) or type(exc).__name__, self.secret)
        return LLMError(
            LLMErrorKind.CONNECTION,
            f"the stream from {self.url} was cut {got}: {detail}",
            provider=self.provider,
            partial=partial,
        )

    def ended_early(self, what: str) -> LLMError:
        """The error for a stream that ended cleanly but before the answer was complete."""
        partial = self.received()
        return LLMError(
            LLMErrorKind.CONNECTION,
            f"the stream from {self.url} was cut after {len(partial)} characters of the "
            f"answer: it ended before {what}",
            provider=self.provider,
            partial=partial,
        )

    def reported_error(
        self, body: Mapping[str, Any], raw: str, kinds: Mapping[str, LLMErrorKind]
    ) -> LLMError:
        """The error for an ``error`` event/chunk the API sent after the stream began
        (e.g. overloaded): its ``error.type`` mapped with ``kinds`` (a server error when
        unknown), its message, and the part of the answer received before it."""
        error = body.get("error")
        kind_name = error.get("type") if isinstance(error, dict) else None
        message = provider_error_message(raw) or "no error message"
        partial = self.received()
        return LLMError(
            kinds.get(str(kind_name), LLMErrorKind.SERVER),
            redact(f"the stream from {self.url} reported {kind_name or 'an error'} after "
                   f"{len(partial)} characters of the answer: {message}", self.secret),
            provider=self.provider,
            raw=redact(raw[:2000], self.secret),
            partial=partial,
        )

    def malformed(self, reason: str, data: str) -> LLMError:
        """The error for an event that cannot be read."""
        return LLMError(
            LLMErrorKind.MALFORMED,
            f"unreadable event in the stream from {self.url}: {reason}",
            status=self.response.status_code,
            provider=self.provider,
            raw=redact(data[:2000], self.secret),
            partial=self.received(),
        )


@asynccontextmanager
async def open_event_stream(
    client: httpx.AsyncClient,
    url: str,
    *,
    payload: dict[str, Any],
    headers: Mapping[str, str],
    timeout_s: float,
    provider: str,
    secret: str | None,
) -> AsyncIterator[EventStream]:
    """POST ``payload`` and hold the response open as an :class:`EventStream`.

    Whatever the status: the caller checks it (and reads an error body with
    :meth:`EventStream.read_body`). The response is closed when the block ends, also
    when the consumer stops early.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    request = client.build_request("POST", url, json=payload, headers=dict(headers),
                                   timeout=timeout_s)
    try:
        async with asyncio.timeout_at(deadline):
            response = await client.send(request, stream=True)
    except (httpx.HTTPError, TimeoutError) as exc:
        raise transport_error(exc, url, timeout_s=timeout_s, provider=provider,
                              secret=secret) from exc
    try:
        yield EventStream(response, url=url, deadline=deadline, timeout_s=timeout_s,
                          provider=provider, secret=secret)
    finally:
        await response.aclose()
