"""A scripted LLM client: answers from a list or a function, never from a model.

It is what the offline demo and the tests use, since no real LLM is reachable from our
machines. It records every request so tests can assert what the engine asked.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestration.errors import LLMError, LLMErrorKind
from orchestration.llm.base import LLMRequest, LLMResponse, LLMStreamEvent, TokenUsage

__all__ = ["ScriptFunction", "ScriptRule", "ScriptedAnswer", "ScriptedLLM", "answer_by_rules",
           "estimate_tokens", "rules_from_json"]

ScriptedAnswer = str | dict[str, Any] | list[Any] | LLMResponse | BaseException
ScriptFunction = Callable[[LLMRequest], "ScriptedAnswer | Awaitable[ScriptedAnswer]"]


@dataclass(frozen=True)
class ScriptRule:
    """One scripted answer and the requests it answers: those of ``purpose`` (any purpose
    when None) whose prompt contains every text of ``prompt_contains``.

    Rules answer by what is asked rather than in which order, so runs that go on at the
    same time (``dagwright eval`` runs cases concurrently) each get their own answers.
    """

    answer: ScriptedAnswer
    purpose: str | None = None
    prompt_contains: tuple[str, ...] = ()

    def matches(self, request: LLMRequest) -> bool:
        if self.purpose is not None and request.purpose != self.purpose:
            return False
        prompt = request.prompt_text
        return all(text in prompt for text in self.prompt_contains)


def answer_by_rules(rules: Sequence[ScriptRule]) -> ScriptFunction:
    """A script that answers each request with the first of ``rules`` that matches it; a
    request no rule matches fails (an :class:`LLMError` naming its purpose and the start
    of its last message), as a model that cannot answer would."""
    frozen = tuple(rules)

    def answer(request: LLMRequest) -> ScriptedAnswer:
        for rule in frozen:
            if rule.matches(request):
                return rule.answer
        last = request.messages[-1].get("content", "") if request.messages else ""
        raise LLMError(
            LLMErrorKind.OTHER,
            f"scripted LLM: none of its {len(frozen)} rules matches this "
            f"{request.purpose!r} request (its last message starts {last[:160]!r})",
            provider=ScriptedLLM.provider)

    return answer


def rules_from_json(data: Any, *, source: str) -> list[ScriptRule]:
    """The rules of a script written as JSON, ``{"rules": [{"purpose": ..., "prompt_contains":
    "text" or [texts], "answer": ...}, ...]}``; raises ``ValueError`` naming ``source``, the
    rule and the key that is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise ValueError(f"{source}: expected {{\"rules\": [...]}} (or a JSON list of answers)")
    unknown = sorted(set(data) - {"rules"})
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {', '.join(unknown)}; only \"rules\"")
    rules = []
    for index, entry in enumerate(data["rules"]):
        where = f"{source}: rules[{index}]"
        if not isinstance(entry, dict) or "answer" not in entry:
            raise ValueError(f"{where}: each rule is an object with an \"answer\"")
        extra = sorted(set(entry) - {"purpose", "prompt_contains", "answer", "note"})
        if extra:
            raise ValueError(f"{where}: unknown key(s) {', '.join(extra)}; a rule has "
                             "purpose, prompt_contains, answer (and an optional note)")
        purpose = entry.get("purpose")
        if purpose is not None and not isinstance(purpose, str):
            raise ValueError(f"{where}.purpose: expected text such as \"plan\"")
        texts = entry.get("prompt_contains", [])
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) and t for t in texts):
            raise ValueError(f"{where}.prompt_contains: expected a text or a list of texts")
        rules.append(ScriptRule(entry["answer"], purpose, tuple(texts)))
    return rules


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token) for clients that report none."""
    return max(1, len(text) // 4) if text else 0


class ScriptedLLM:
    """Answers requests from a script.

    ``script`` is either a sequence of answers returned in order (whatever the purpose),
    or a callable ``(request) -> answer`` (sync or async) that can answer per
    ``request.purpose`` (:func:`answer_by_rules` makes one from :class:`ScriptRule` s).
    An answer may be a string, a dict/list (sent as JSON), an :class:`LLMResponse`, or an
    exception instance to raise. ``latency_s`` simulates model latency. Usage is
    estimated at 4 characters a token.

    It streams too (:meth:`stream`), so tests and the offline demo exercise streaming
    without a network: the answer arrives in pieces of ``chunk_chars`` characters,
    ``chunk_delay_s`` apart. An :class:`LLMError` answer whose ``partial`` is set
    plays a stream cut midway: that text is streamed, then the error is raised.
    """

    provider = "scripted"

    def __init__(
        self,
        script: Sequence[ScriptedAnswer] | ScriptFunction,
        *,
        latency_s: float = 0.0,
        model: str = "scripted",
        chunk_chars: int = 16,
        chunk_delay_s: float = 0.0,
    ) -> None:
        if chunk_chars < 1:
            raise ValueError(f"chunk_chars must be at least 1, got {chunk_chars}")
        if callable(script):
            self._fn: ScriptFunction | None = script
            self._answers: list[ScriptedAnswer] = []
        else:
            self._fn = None
            self._answers = list(script)
        self._next = 0
        self.latency_s = latency_s
        self.model = model
        self.chunk_chars = chunk_chars
        self.chunk_delay_s = chunk_delay_s
        self.requests: list[LLMRequest] = []

    def requests_for(self, purpose: str) -> list[LLMRequest]:
        """The recorded requests with this purpose, in order."""
        return [r for r in self.requests if r.purpose == purpose]

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return self._to_response(request, await self._answer_for(request))

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """The scripted answer in pieces of ``chunk_chars``, ``chunk_delay_s`` apart."""
        answer = await self._answer_for(request)
        if isinstance(answer, LLMError) and answer.partial is not None:
            async for piece in self._pieces(answer.partial):
                yield LLMStreamEvent(delta=piece)
            raise answer
        response = self._to_response(request, answer)
        text, size = response.content, self.chunk_chars
        if self.chunk_delay_s:
            async for piece in self._pieces(text):
                yield LLMStreamEvent(delta=piece)
        else:  # all at once, as a model that answers at once: no wait between pieces
            for start in range(0, len(text), size):
                yield LLMStreamEvent(delta=text[start:start + size])
        yield LLMStreamEvent(response=response)

    async def _pieces(self, text: str) -> AsyncIterator[str]:
        for start in range(0, len(text), self.chunk_chars):
            if start and self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            yield text[start:start + self.chunk_chars]

    async def _answer_for(self, request: LLMRequest) -> ScriptedAnswer:
        """The next scripted answer for ``request`` (recorded), after the latency."""
        self.requests.append(request)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self._fn is not None:
            answer = self._fn(request)
            if inspect.isawaitable(answer):
                answer = await answer
        else:
            if self._next >= len(self._answers):
                raise LLMError(
                    LLMErrorKind.OTHER,
                    f"scripted LLM has no answer left for request {self._next + 1} "
                    f"(purpose={request.purpose!r}); the script holds {len(self._answers)}",
                    provider=self.provider,
                )
            answer = self._answers[self._next]
            self._next += 1
        return answer

    def _to_response(self, request: LLMRequest, answer: Any) -> LLMResponse:
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, LLMResponse):
            return answer
        text = answer if isinstance(answer, str) else json.dumps(answer)
        return LLMResponse(
            content=text,
            finish_reason="stop",
            usage=TokenUsage(estimate_tokens(request.prompt_text), estimate_tokens(text)),
            model=self.model,
        )

    async def aclose(self) -> None:
        return None
