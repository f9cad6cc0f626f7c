"""LLM clients: one async interface, several providers."""

from orchestration.llm.anthropic import AnthropicClient
from orchestration.llm.base import LLMClient, LLMRequest, LLMResponse, TokenUsage
from orchestration.llm.openai_compat import OpenAICompatibleClient
from orchestration.llm.scripted import ScriptedLLM

__all__ = [
    "AnthropicClient",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "OpenAICompatibleClient",
    "ScriptedLLM",
    "TokenUsage",
]
