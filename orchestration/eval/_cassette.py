"""Record and replay: cassettes of a run's tool calls and LLM calls.

Recording, each tool call (capability + the parameters as sent) and each LLM request
(purpose, messages, response schema) is sent for real and what came back is written
down; replaying, the answer is read back instead and nothing reaches a tool or a model.
So a dataset can be re-graded, or a change to the executor measured, without paying the
model or reaching the tools again. A replayed run that asks something not recorded does
not reach anything either: the tool call fails with code ``CASSETTE_MISS``, the LLM call
with an :class:`~orchestration.errors.LLMError`, each naming the case, the request and
its key — and the eval reports the case as an error, never as a pass or a fail.

Layout: one JSON file per configuration (``DIR/<config>.json``) holding one *track* per
run (``<case>#<repeat>``); a track maps each request key, and its occurrence within the
run (the same call twice — a retry after a 503 — has two answers), to what came back.
Keys are the capability (or purpose) and a SHA-256 of the request, so a cassette holds
no prompt; it does hold the tool answers and parameters, with the known secrets of the
catalog and the LLM client masked (see :meth:`CassetteBook.save`) — treat cassettes of
tools that return other secrets as secret.

How a call finds its track: the eval sets the track of the run it starts in a context
variable (:func:`playing`); the tasks the run starts (steps, streamed plans) inherit it.
The tool side is a transport layer (``Orchestrator(transport_layer=...)``) over the
pooled :class:`~orchestration._transport.ToolTransport`; the LLM side wraps the client.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from orchestration._transport import CallResult, CallTrace, ToolTransport
from orchestration.capability import Capability
from orchestration.errors import ConfigError, LLMError, LLMErrorKind
from orchestration.llm.base import (
    LLMClient,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    TokenUsage,
    close_iterator,
    stream_from,
    supports_streaming,
)
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.redaction import MASK

__all__ = ["CASSETTE_MISS", "CassetteBook", "CassetteError", "CassetteLLM", "CassetteMode",
           "CassetteTransport", "Cassettes", "Track", "cassette_llm", "playing"]

CassetteMode = Literal["record", "replay"]
CASSETTE_MISS = "CASSETTE_MISS"
FORMAT = 1
_SCOPES = frozenset({"llm", "tools"})
_TRACK: ContextVar[Track | None] = ContextVar("dagwright_eval_track", default=None)


class CassetteError(ConfigError):
    """A cassette that cannot be replayed (missing, unreadable, of another format), or
    cassettes that cannot be used as asked. Nothing ran."""


@contextlib.contextmanager
def playing(track: Track | None) -> Iterator[None]:
    """Calls made in this context (and tasks started from it) use ``track``."""
    token = _TRACK.set(track)
    try:
        yield
    finally:
        _TRACK.reset(token)


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tool_key(capability: str, params: dict[str, Any]) -> str:
    return f"{capability}:{_digest(params)}"


def llm_key(request: LLMRequest) -> str:
    return f"{request.purpose}:" + _digest({
        "messages": request.messages, "response_schema": request.response_schema,
        "schema_name": request.schema_name, "max_output_tokens": request.max_output_tokens,
        "temperature": request.temperature})


class Track:
    """The recordings of one run: one case, one repeat, under one configuration."""

    def __init__(self, book: CassetteBook, name: str, recorded: dict[str, Any] | None) -> None:
        self.book = book
        self.name = name
        self.present = recorded is not None
        self._entries: dict[str, dict[tuple[str, int], dict[str, Any]]] = {"tools": {}, "llm": {}}
        for kind in ("tools", "llm"):
            for entry in (recorded or {}).get(kind, []):
                self._entries[kind][(entry["key"], int(entry["n"]))] = entry
        self._seen: Counter[tuple[str, str]] = Counter()
        self.misses: list[str] = []

    def covers(self, kind: Literal["tools", "llm"]) -> bool:
        """Whether calls of this kind are recorded or replayed (else they go live)."""
        return kind in self.book.scope

    @property
    def replaying(self) -> bool:
        return self.book.mode == "replay"

    def _next(self, kind: str, key: str) -> int:
        self._seen[(kind, key)] += 1
        return self._seen[(kind, key)]

    def record(self, kind: Literal["tools", "llm"], key: str, entry: dict[str, Any]) -> None:
        n = self._next(kind, key)
        self._entries[kind][(key, n)] = {"key": key, "n": n, **entry}

    def replay(self, kind: Literal["tools", "llm"], key: str, what: str) -> dict[str, Any] | None:
        """The recorded answer to the next occurrence of ``key``, or None (a miss, noted)."""
        n = self._next(kind, key)
        entry = self._entries[kind].get((key, n))
        if entry is None:
            why = ("the cassette has no recording of this run at all" if not self.present else
                   f"occurrence {n} of this request was not recorded" if n > 1 else
                   "this request was not recorded")
            self.misses.append(f"{what} (key {key}, occurrence {n}): {why}")
        return entry

    def to_json(self) -> dict[str, Any]:
        return {kind: [self._entries[kind][k] for k in sorted(self._entries[kind])]
                for kind in ("tools", "llm")}


class CassetteBook:
    """The cassette of one configuration: a file of tracks, one per run."""

    def __init__(self, path: Path, config: str, mode: CassetteMode, scope: frozenset[str],
                 data: dict[str, Any] | None = None) -> None:
        self.path = path
        self.config = config
        self.mode = mode
        self.scope = scope
        self.client: dict[str, Any] = dict((data or {}).get("llm_client") or {})
        self._recorded: dict[str, Any] = dict((data or {}).get("tracks") or {})
        self.tracks: dict[str, Track] = {}

    @classmethod
    def open(cls, path: Path, config: str, mode: CassetteMode, scope: frozenset[str]) -> CassetteBook:
        if mode == "record":
            return cls(path, config, mode, scope)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CassetteError(f"no cassette to replay configuration {config!r}: {path} does not "
                              f"exist; record one first (--record {path.parent})") from None
        except (OSError, ValueError) as exc:
            raise CassetteError(f"cannot read the cassette {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("dagwright_cassette") != FORMAT:
            raise CassetteError(f"{path} is not a dagwright cassette (format {FORMAT}); record it "
                              "again with --record")
        return cls(path, config, mode, scope, data)

    def track(self, case_id: str, repeat: int) -> Track:
        name = f"{case_id}#{repeat}"
        track = self.tracks.get(name)
        if track is None:
            track = self.tracks[name] = Track(self, name, self._recorded.get(name))
        return track

    def save(self, secrets: Iterable[str] = ()) -> None:
        """Write the tracks recorded (atomically), the known ``secrets`` masked."""
        data = {"dagwright_cassette": FORMAT, "config": self.config, "llm_client": self.client,
                "tracks": {name: self.tracks[name].to_json() for name in sorted(self.tracks)}}
        # keys keep their order: a tool's answer replays as it came (a prompt that quotes it
        # must be the same prompt, key for key)
        text = json.dumps(data, indent=1, ensure_ascii=False, default=str)
        for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
            text = text.replace(secret, MASK)
            text = text.replace(json.dumps(secret, ensure_ascii=False)[1:-1], MASK)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=self.path.name, dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text + "\n")
            os.chmod(temporary, 0o644)  # mkstemp makes it 0600; a cassette is shared like code
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


class Cassettes:
    """Where an eval's cassettes live and what they do: ``record`` (every call is made
    and written down) or ``replay`` (every call is read back). ``scope`` limits them to
    ``"llm"`` or ``"tools"`` — e.g. replay the model's answers against live tools."""

    def __init__(self, directory: str | os.PathLike[str], mode: CassetteMode, *,
                 scope: Iterable[str] = ("llm", "tools")) -> None:
        if mode not in ("record", "replay"):
            raise CassetteError(f"cassette mode {mode!r}: use record or replay")
        chosen = frozenset(scope)
        if not chosen or chosen - _SCOPES:
            raise CassetteError(f"cassette scope {sorted(chosen)}: use llm, tools or both")
        self.directory = Path(directory)
        self.mode: CassetteMode = mode
        self.scope = chosen

    def book(self, config: str) -> CassetteBook:
        return CassetteBook.open(self.directory / f"{config}.json", config, self.mode, self.scope)


# --- the tool side ------------------------------------------------------------------------
def _miss_error(track: Track, what: str) -> StepError:
    return StepError(
        category=ErrorCategory.INTERNAL_ERROR, code=CASSETTE_MISS,
        message=f"replay: {track.misses[-1]} — in {track.book.path}, run {track.name}; "
                f"record the dataset again (--record) or let {what} go live (--live-tools)",
        source=ErrorSource.ENGINE, retryable=False, request_sent=False)


def _result_entry(result: CallResult) -> dict[str, Any]:
    if result.error is not None:
        return {"error": result.error.model_dump(mode="json", exclude_none=True),
                "http_status": result.http_status}
    return {"data": result.data, "http_status": result.http_status}


def _result_from(entry: dict[str, Any]) -> CallResult:
    if "error" in entry:
        return CallResult(error=StepError.model_validate(entry["error"]),
                          http_status=entry.get("http_status"))
    return CallResult(data=entry.get("data"), http_status=entry.get("http_status"))


class CassetteTransport(ToolTransport):
    """A transport layer over the pooled one: records or replays the calls of runs that
    play a track (:func:`playing`); other calls pass through untouched."""

    gates_calls = True

    def __init__(self, inner: ToolTransport) -> None:
        super().__init__(max_response_bytes=inner.max_response_bytes,
                         max_json_depth=inner.max_json_depth)
        self.inner = inner
        self.thread_calls = inner.thread_calls

    async def call(self, capability: Capability, params: dict[str, Any], *, timeout_s: float,
                   headers: dict[str, str] | None = None,
                   trace: CallTrace | None = None,
                   credentials: dict[str, str] | None = None) -> CallResult:
        """``credentials`` (a run's own: docs/context.md) reach the live tool and
        are never part of the key nor of the recording."""
        track = _TRACK.get()
        if track is None or not track.covers("tools"):
            return await self.inner.call(capability, params, timeout_s=timeout_s,
                                         headers=headers, trace=trace, credentials=credentials)
        key = tool_key(capability.key, params)
        if not track.replaying:
            result = await self.inner.call(capability, params, timeout_s=timeout_s,
                                           headers=headers, trace=trace,
                                           credentials=credentials)
            track.record("tools", key, {"capability": capability.key, "params": params,
                                        **_result_entry(result)})
            return result
        params_text = json.dumps(params, sort_keys=True, ensure_ascii=False, default=str)
        entry = track.replay("tools", key, f"{capability.key} {params_text[:300]}")
        if entry is None:
            return CallResult(error=_miss_error(track, "the tools"))
        refused = await trace.pass_gate() if trace is not None else None  # as if it went out
        if refused is not None:
            return CallResult(error=refused)
        return _result_from(entry)

    async def aclose(self) -> None:
        await self.inner.aclose()


# --- the LLM side -------------------------------------------------------------------------
def _response_entry(response: LLMResponse) -> dict[str, Any]:
    return {"response": {"content": response.content, "finish_reason": response.finish_reason,
                         "input_tokens": response.usage.input_tokens,
                         "output_tokens": response.usage.output_tokens,
                         "model": response.model, "response_id": response.response_id}}


def _error_entry(exc: LLMError) -> dict[str, Any]:
    # the message as the client gave it: LLMError adds the provider, kind and status again
    prefix = (f"{exc.provider}: " if exc.provider else "") + f"LLM {exc.kind.value} error" + (
        f" (HTTP {exc.status})" if exc.status is not None else "") + ": "
    text = str(exc)
    return {"error": {"kind": exc.kind.value, "message": text.removeprefix(prefix),
                      "status": exc.status, "retry_after_s": exc.retry_after_s,
                      "partial": exc.partial}}


def _replayed(entry: dict[str, Any], provider: str) -> LLMResponse:
    if "error" in entry:
        error = entry["error"]
        raise LLMError(LLMErrorKind(error["kind"]), error["message"], status=error.get("status"),
                       retry_after_s=error.get("retry_after_s"), provider=provider,
                       partial=error.get("partial"))
    answer = entry["response"]
    return LLMResponse(content=answer["content"], finish_reason=answer.get("finish_reason"),
                       usage=TokenUsage(answer.get("input_tokens", 0), answer.get("output_tokens", 0)),
                       model=answer.get("model"), response_id=answer.get("response_id"))


class CassetteLLM:
    """An LLM client that records or replays the calls of runs that play a track; other
    calls go to ``inner`` (None when replaying needs no model)."""

    def __init__(self, inner: LLMClient | None, *, provider: str, model: str | None) -> None:
        self.inner = inner
        self.provider = provider
        self.model = model
        self.base_url = getattr(inner, "base_url", None)

    def _track(self) -> Track | None:
        track = _TRACK.get()
        return track if track is not None and track.covers("llm") else None

    def _live(self) -> LLMClient:
        if self.inner is None:
            raise LLMError(LLMErrorKind.OTHER, "replay: this LLM call belongs to no recorded run, "
                           "and a replay has no live model", provider=self.provider)
        return self.inner

    def _replay(self, track: Track, request: LLMRequest) -> LLMResponse:
        key = llm_key(request)
        entry = track.replay("llm", key, f"a {request.purpose!r} LLM request")
        if entry is None:
            raise LLMError(LLMErrorKind.OTHER,
                           f"replay: {track.misses[-1]} — in {track.book.path}, run "
                           f"{track.name}; record the dataset again (--record)",
                           provider=self.provider)
        return _replayed(entry, self.provider)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        track = self._track()
        if track is None:
            return await self._live().complete(request)
        if track.replaying:
            return self._replay(track, request)
        key = llm_key(request)
        try:
            response = await self._live().complete(request)
        except LLMError as exc:
            track.record("llm", key, {"purpose": request.purpose, **_error_entry(exc)})
            raise
        track.record("llm", key, {"purpose": request.purpose, **_response_entry(response)})
        return response

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()


class StreamingCassetteLLM(CassetteLLM):
    """:class:`CassetteLLM` for a client that streams: a replayed answer arrives as one
    delta, then the final event (what a client that answered at once would send)."""

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        track = self._track()
        if track is not None and track.replaying:
            try:
                response = self._replay(track, request)
            except LLMError as exc:
                if exc.partial:
                    yield LLMStreamEvent(delta=exc.partial)
                raise
            if response.content:
                yield LLMStreamEvent(delta=response.content)
            yield LLMStreamEvent(response=response)
            return
        events = stream_from(self._live(), request)
        parts: list[str] = []
        try:
            async for event in events:
                if event.delta:
                    parts.append(event.delta)
                if event.response is not None and track is not None:
                    track.record("llm", llm_key(request),
                                 {"purpose": request.purpose, **_response_entry(event.response)})
                yield event
        except LLMError as exc:
            if track is not None:
                if exc.partial is None and parts:
                    exc.partial = "".join(parts)
                track.record("llm", llm_key(request), {"purpose": request.purpose,
                                                       **_error_entry(exc)})
            raise
        finally:
            await close_iterator(events)


def cassette_llm(inner: LLMClient | None, book: CassetteBook) -> CassetteLLM:
    """The cassette client of ``book``'s configuration. Recording (or with the model
    live), it streams when ``inner`` does, and the book notes what the client was;
    replaying, it is what the book noted, so a replayed run plans as the recorded one did."""
    live = book.mode == "record" or "llm" not in book.scope
    if live:
        if inner is None:
            raise CassetteError(f"configuration {book.config!r}: recording (or replaying with a "
                              "live model) needs an LLM client")
        book.client = {"provider": str(getattr(inner, "provider", "unknown")),
                       "model": getattr(inner, "model", None), "streams": supports_streaming(inner)}
    client = book.client
    cls = StreamingCassetteLLM if client.get("streams") else CassetteLLM
    return cls(inner if live else None, provider=str(client.get("provider", "unknown")),
               model=client.get("model"))
