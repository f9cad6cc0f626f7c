"""LLM clients: one async interface, several providers."""

from orchestration.llm.anthropic import AnthropicClient
from orchestration.llm.base import (
    LLMClient,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    StreamingLLMClient,
    TokenUsage,
    stream_from,
    supports_streaming,
)
from orchestration.llm.openai_compat import OpenAICompatibleClient
from orchestration.llm.scripted import ScriptedLLM

__all__ = [
    "AnthropicClient",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "LLMStreamEvent",
    "OpenAICompatibleClient",
    "ScriptedLLM",
    "StreamingLLMClient",
    "TokenUsage",
    "stream_from",
    "supports_streaming",
]
