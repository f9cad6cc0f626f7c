"""Engine configuration: one pydantic-settings model, every field an ``ORCH_*`` variable.

Field names are the snake_case of the variables (``ORCH_MAX_CONCURRENCY`` ↔
``max_concurrency``). Constructor arguments win over the environment, which wins over
the defaults documented here and in ``config/example.env``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from orchestration.layer_settings import DEFAULT_VALIDATION_ERROR_PATTERNS

__all__ = ["OrchestratorConfig"]


class OrchestratorConfig(BaseSettings):
    """Every knob of the engine. See ``docs/configuration.md`` for each one's purpose."""

    model_config = SettingsConfigDict(
        env_prefix="ORCH_", extra="ignore", validate_default=True, frozen=True
    )

    # --- LLM provider -------------------------------------------------------------
    llm_provider: Literal["openai", "anthropic", "scripted"] = Field(
        "openai",
        description="openai = any OpenAI-compatible Chat Completions endpoint; "
        "anthropic = Anthropic Messages; scripted = answers from ORCH_LLM_SCRIPT.",
    )
    llm_base_url: str | None = Field(None, description="Provider base URL (…/v1 for OpenAI).")
    llm_model: str | None = Field(None, description="Model name sent to the provider.")
    llm_api_key: SecretStr | None = Field(None, description="API key; never logged.")
    llm_timeout_s: float = Field(60.0, gt=0, description="Timeout of one LLM HTTP call.")
    llm_structured_output: Literal["auto", "json_schema", "json_object", "tool", "none"] = Field(
        "auto", description="How plans and layer answers are constrained to JSON."
    )
    llm_script: Path | None = Field(
        None, description="JSON file with a list of scripted answers (provider scripted)."
    )
    llm_max_retries: int = Field(
        2, ge=0, description="Retries of an LLM call after a rate limit, timeout or 5xx."
    )

    # --- catalog & planning -------------------------------------------------------
    catalog: Path | None = Field(None, description="Tool catalog file (YAML or JSON).")
    planner_max_retries: int = Field(
        2, ge=0, description="Extra planner calls after an unparsable or invalid plan."
    )
    max_plan_steps: int = Field(1000, ge=1, description="Largest plan accepted.")
    prompt_type_guidance: bool = Field(True, description="Layer 1: typed signatures in prompts.")
    synthesis_enabled: bool = Field(True, description="Compose a final answer with the LLM.")
    planner_prompt_budget_chars: int = Field(
        24_000, ge=2000,
        description="Largest first planner prompt (system + user, in characters); a larger "
        "catalog is cut to the capabilities most relevant to the query (BM25).",
    )
    planner_max_capabilities: int | None = Field(
        None, ge=1, description="Most capabilities shown to the planner (unset: budget only)."
    )
    replan_max: int = Field(
        0, ge=0, description="Repair plans asked after steps fail for good (0 = no replanning)."
    )

    # --- execution ----------------------------------------------------------------
    max_concurrency: int = Field(8, ge=1, description="Steps in flight at once per run.")
    tool_timeout_s: float = Field(
        10.0, gt=0, description="Default timeout of one tool call (catalog may override)."
    )
    step_timeout_s: float = Field(
        60.0, gt=0, description="Deadline of one step, all attempts and waits included."
    )
    run_timeout_s: float = Field(300.0, gt=0, description="Deadline of a whole run.")
    max_attempts_per_step: int = Field(
        8, ge=1, description="Cap on attempts of one step across every layer."
    )
    max_llm_calls_per_run: int = Field(
        50, ge=1, description="Cap on LLM calls of one run, planning included."
    )
    max_prompt_value_chars: int = Field(
        4000, ge=100, description="Longest parameter/output/error text put in a prompt."
    )

    # --- layer 2 & 3 --------------------------------------------------------------
    type_coercion_enabled: bool = Field(True, description="Layer 2: schema coercion.")
    validation_feedback_enabled: bool = Field(True, description="Layer 3: validation feedback.")
    max_validation_retries: int = Field(2, ge=0, description="Layer 3 LLM corrections per step.")
    validation_error_patterns: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_VALIDATION_ERROR_PATTERNS),
        description="Error texts (case-insensitive substrings) that mark a correctable "
        "input error from a tool that does not use the envelope; comma-separated in env.",
    )

    # --- layer 4 ------------------------------------------------------------------
    semantic_retry_enabled: bool = Field(True, description="Layer 4: semantic retry.")
    semantic_retry_max_attempts: int = Field(2, ge=0, description="Layer 4 attempts per step.")
    semantic_retry_independent_steps: bool = Field(
        True, description="Layer 4 also for steps without dependencies."
    )

    # --- resilience (transport faults) --------------------------------------------
    retry_max_attempts: int = Field(3, ge=1, description="Tries of a call on transport faults.")
    retry_backoff: Literal["constant", "linear", "exponential"] = Field(
        "exponential", description="Backoff strategy between resilience retries."
    )
    retry_base_delay_s: float = Field(0.2, ge=0, description="First backoff delay.")
    retry_max_delay_s: float = Field(5.0, ge=0, description="Cap of one backoff delay.")
    retry_jitter: float = Field(0.0, ge=0, le=1, description="Jitter fraction (seeded).")
    retry_seed: int = Field(0, description="Seed of the jitter, for reproducible delays.")
    retry_after_cap_s: float = Field(30.0, ge=0, description="Longest Retry-After honoured.")

    # --- approvals ----------------------------------------------------------------
    approve_plans: bool = Field(
        False, description="Ask a person to approve every plan before any step runs.")
    approval_timeout_s: float | None = Field(
        None, gt=0, description="A pending approval older than this is rejected as expired "
        "when the run is next resumed or read (unset: approvals wait forever).")

    # --- durable runs -------------------------------------------------------------
    store_url: str = Field(
        "sqlite:///.dagwright/runs.db",
        description="Where runs are recorded: sqlite:///PATH (relative to the working "
        "directory; four slashes for an absolute path), postgresql://USER:PASS@HOST/DB, or "
        "memory:// (nothing persisted).",
    )
    store_retention_days: float | None = Field(
        None, gt=0, description="Finished runs older than this are deleted (unset: kept)."
    )
    store_lease_s: float = Field(
        30.0, gt=0, description="How long a process holds a run it is executing before "
        "another process may resume it (renewed while the run is alive).",
    )

    # --- backend: this process, or Temporal (pip install 'dagwright[temporal]') -----
    backend: Literal["local", "temporal"] = Field(
        "local", description="Where runs execute: local = in this process; temporal = as "
        "Temporal workflows on `dagwright worker` processes (docs/scale-out.md).",
    )
    temporal_address: str = Field(
        "127.0.0.1:7233", description="Temporal frontend (host:port) of clients and workers.")
    temporal_namespace: str = Field("default", description="Temporal namespace of the runs.")
    temporal_task_queue: str = Field(
        "dagwright", min_length=1,
        description="Task queue the workers poll and the runs are started on.")
    temporal_heartbeat_timeout_s: float = Field(
        10.0, gt=0, description="A tool or LLM call whose worker sent no heartbeat for this "
        "long is declared lost (OUTCOME_UNKNOWN for a side effect without a key).",
    )
    temporal_workflow_task_timeout_s: float = Field(
        10.0, gt=0, le=120, description="A workflow task a worker took but did not finish "
        "within this is given to another worker.",
    )
    temporal_sticky_timeout_s: float = Field(
        5.0, gt=0, description="How long a run waits for the worker that has it cached "
        "before any worker may take it (worker setting).",
    )
    temporal_max_concurrent_activities: int = Field(
        100, ge=1, description="Tool and LLM calls one worker runs at once (worker setting).")
    temporal_event_poll_s: float = Field(
        0.2, gt=0, description="How often a client following a Temporal run's events "
        "(on_event, astream) asks the workflow for new ones.",
    )

    # --- observability ------------------------------------------------------------
    otel_exporter: Literal["none", "console", "otlp"] = Field(
        "none", description="Span exporter the CLI installs (a library user brings their own)."
    )
    metrics_port: int | None = Field(None, description="Serve /metrics on this port (CLI).")
    log_format: Literal["text", "json"] = Field("text", description="Log record format.")
    log_level: str = Field("INFO", description="Log level of the CLI.")
    llm_debug_enabled: bool = Field(False, description="Keep full LLM prompts and answers.")
    llm_debug_path: Path = Field(
        Path("dagwright-llm-debug.jsonl"), description="JSONL file of the LLM debug store."
    )
    llm_debug_max_chars: int = Field(
        100_000, ge=1000, description="Longest prompt/answer kept by the debug store."
    )
    redact_patterns: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Extra regexes whose matches are redacted."
    )
    llm_debug_max_file_bytes: int = Field(
        50_000_000, ge=10_000,
        description="The debug store rotates its file at this size (one old file kept).",
    )

    @field_validator("validation_error_patterns", "redact_patterns", mode="before")
    @classmethod
    def _split_comma_list(cls, value: Any) -> Any:
        """Let the environment give lists as comma-separated text (or a JSON list)."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                import json

                return json.loads(text)
            return [p.strip() for p in text.split(",") if p.strip()]
        return value

    def effective_values(self) -> dict[str, Any]:
        """Every setting with its ``ORCH_*`` name, secrets masked, for ``dagwright config``."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = "********" if value.get_secret_value() else ""
            elif isinstance(value, Path):
                value = str(value)
            out[f"ORCH_{name.upper()}"] = value
        return out
