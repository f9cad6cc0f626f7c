"""Build the LLM client the configuration describes."""

from __future__ import annotations

import json
import pkgutil
import re

from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError
from orchestration.llm.base import LLMClient
from orchestration.llm.scripted import ScriptedLLM, answer_by_rules, rules_from_json

# said when the provider is openai by default, not by choice: a first run without any LLM
# settings should learn that a model is expected, and what to try without one
_UNSET_PROVIDER = (" (openai is the default, as ORCH_LLM_PROVIDER is unset: point "
                   "ORCH_LLM_BASE_URL and ORCH_LLM_MODEL at an OpenAI-compatible server, or "
                   "set ORCH_LLM_PROVIDER=anthropic; `dagwright demo` needs no model)")

_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
"""``module:function``: a scripted answer made by a function (one answer per request)."""


def client_from_config(config: OrchestratorConfig) -> LLMClient:
    """The client for ``ORCH_LLM_PROVIDER``; raises :class:`ConfigError` naming what is missing."""
    key = config.llm_api_key.get_secret_value() if config.llm_api_key else None
    if config.llm_provider == "scripted":
        if config.llm_script is None:
            raise ConfigError("ORCH_LLM_PROVIDER=scripted needs ORCH_LLM_SCRIPT (a JSON file: "
                              "a list of answers, or {\"rules\": [...]})")
        reference = str(config.llm_script)
        if _FUNCTION.fullmatch(reference) and not config.llm_script.exists():
            try:
                answer = pkgutil.resolve_name(reference)
            except (ImportError, AttributeError, ValueError) as exc:
                raise ConfigError(f"ORCH_LLM_SCRIPT={reference}: cannot be imported: {exc}") from exc
            if not callable(answer):
                raise ConfigError(f"ORCH_LLM_SCRIPT={reference}: not a function")
            return ScriptedLLM(answer)
        source = f"ORCH_LLM_SCRIPT={config.llm_script}"
        try:
            answers = json.loads(config.llm_script.read_text(encoding="utf-8"))
            if isinstance(answers, list):
                return ScriptedLLM(answers)
            return ScriptedLLM(answer_by_rules(rules_from_json(answers, source=source)))
        except ValueError as exc:
            raise ConfigError(str(exc) if str(exc).startswith(source)
                              else f"{source}: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"{source}: {exc}") from exc
    if not config.llm_model:
        raise ConfigError(f"ORCH_LLM_PROVIDER={config.llm_provider} needs ORCH_LLM_MODEL"
                          + _UNSET_PROVIDER * ("llm_provider" not in config.model_fields_set))
    structured = config.llm_structured_output
    if config.llm_provider == "anthropic":
        from orchestration.llm.anthropic import AnthropicClient

        if structured in ("json_schema", "json_object"):
            # silently mapping these to tool use would hide a setting that does nothing
            raise ConfigError(
                f"ORCH_LLM_STRUCTURED_OUTPUT={structured} is a mode of OpenAI-compatible "
                "servers; with ORCH_LLM_PROVIDER=anthropic use auto (structured output "
                "through tool use) or none")
        return AnthropicClient(
            model=config.llm_model,
            api_key=key,
            base_url=config.llm_base_url or "https://api.anthropic.com",
            timeout_s=config.llm_timeout_s,
            structured_output="none" if structured == "none" else "auto",
        )
    from orchestration.llm.openai_compat import OpenAICompatibleClient

    if not config.llm_base_url:
        raise ConfigError("ORCH_LLM_PROVIDER=openai needs ORCH_LLM_BASE_URL (e.g. "
                          "https://api.openai.com/v1)"
                          + _UNSET_PROVIDER * ("llm_provider" not in config.model_fields_set))
    return OpenAICompatibleClient(
        base_url=config.llm_base_url,
        model=config.llm_model,
        api_key=key,
        timeout_s=config.llm_timeout_s,
        structured_output=structured,
    )
