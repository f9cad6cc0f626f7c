"""LLM clients: one async interface, several providers."""

from orchestration.llm.base import LLMClient, LLMRequest, LLMResponse, TokenUsage
from orchestration.llm.scripted import ScriptedLLM

__all__ = ["LLMClient", "LLMRequest", "LLMResponse", "ScriptedLLM", "TokenUsage"]
