"""Engine configuration: one pydantic-settings model, every field an ``ORCH_*`` variable.

Field names are the snake_case of the variables (``ORCH_MAX_CONCURRENCY`` ↔
``max_concurrency``). Constructor arguments win over the environment, which wins over
the defaults documented here and in ``config/example.env``.

A configuration mistake is the first thing a new user meets, so it must read as one: a
bad value raises :class:`~orchestration.errors.ConfigError` naming the ``ORCH_*``
variable (or the constructor argument), the value given and what is allowed — never a
pydantic traceback that names a field the user never typed. A misspelt ``ORCH_*``
variable would otherwise be ignored in silence; it is warned about once per process
(:class:`~orchestration.errors.ConfigWarning`) with the closest known name.
"""

from __future__ import annotations

import os
import types
import typing
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from orchestration._json import DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING
from orchestration._text import closest
from orchestration.errors import ConfigError, ConfigWarning
from orchestration.layer_settings import DEFAULT_VALIDATION_ERROR_PATTERNS

__all__ = ["ENV_PREFIX", "ModelPrice", "OrchestratorConfig", "env_name"]

ENV_PREFIX = "ORCH_"


def env_name(field: str) -> str:
    """The environment variable of a setting: ``max_concurrency`` → ``ORCH_MAX_CONCURRENCY``."""
    return f"{ENV_PREFIX}{field.upper()}"


class ModelPrice(BaseModel):
    """What one model costs, per 1000 tokens, in whatever currency the table uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_1k: float = Field(ge=0, description="Price of 1000 input (prompt) tokens.")
    output_per_1k: float = Field(ge=0, description="Price of 1000 output (completion) tokens.")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return input_tokens / 1000 * self.input_per_1k + output_tokens / 1000 * self.output_per_1k


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
    llm_structured_output: Literal["auto", "json_schema", "json_object", "none"] = Field(
        "auto",
        description="How plans and layer answers are constrained to JSON: auto (the strongest "
        "the provider supports: json_schema stepping down for OpenAI-compatible servers, tool "
        "use for Anthropic), json_schema or json_object (OpenAI-compatible only), none.",
    )
    llm_script: Path | None = Field(
        None, description="JSON file of scripted answers (provider scripted): a list used "
        "in order, one per LLM call, from the first again in each new process — a plan "
        "object (`{\"steps\": [...]}`) for a planning call, a string for an answer — or "
        "`{\"rules\": [{\"purpose\": ..., \"prompt_contains\": ..., \"answer\": ...}]}`: "
        "each call gets the answer of the first rule whose purpose and texts it matches "
        "(runs at the same time, as `dagwright eval` makes them). Or `module:function`, "
        "called with each request (sync or async) for its answer."
    )
    llm_max_retries: int = Field(
        2, ge=0, description="Retries of an LLM call after a rate limit, timeout or 5xx."
    )

    # --- catalog & planning -------------------------------------------------------
    catalog: Path | None = Field(None, description="Tool catalog file (YAML or JSON).")
    planner_template_dir: Path | None = Field(
        None, description="Directory of planner prompt templates replacing the built-in ones "
        "file by file (`<name>.txt`: system, user, type_rules, example, replan_system, "
        "replan_user, request_note, request_answer; planners/templates/ has the built-in "
        "ones), e.g. to compare two prompts with `dagwright eval` (unset: built-in).",
    )
    planner_max_retries: int = Field(
        2, ge=0, description="Extra planner calls after an unparsable or invalid plan."
    )
    max_plan_steps: int = Field(1000, ge=1, description="Largest plan accepted.")
    prompt_type_guidance: bool = Field(True, description="Layer 1: typed signatures in prompts.")
    synthesis_enabled: bool = Field(True, description="Compose a final answer (off: no answer).")
    synthesis_strategy: Literal["llm", "template", "raw"] = Field(
        "llm", description="How the answer is composed when a run or workflow does not say: "
        "llm (one LLM call over the step results), template (the workflow's answer "
        "template, else each capability's answer_template; no LLM call), raw (the named "
        "outputs, or the step outputs, as JSON; no LLM call).")
    plan_cache: bool = Field(
        False, description="Reuse the plan of an earlier run whose query normalises to the "
        "same text, under the same catalog, planner model and prompt version (kept in the "
        "run store; local backend). Only plans of runs that succeeded are kept.")
    plan_cache_ttl_s: float = Field(
        86400.0, gt=0, description="How long a cached plan is reused after it was made.")
    workflows_dir: Path | None = Field(
        None, description="Directory of saved workflows (YAML/JSON) found by name (unset: "
        "workflows/ beside ORCH_CATALOG, else ./workflows).")
    planner_prompt_budget_chars: int = Field(
        64_000, ge=2000,
        description="Largest first planner prompt (system + user, in characters, about "
        "4 per token); a larger catalog is cut to the capabilities most relevant to the "
        "query (fielded BM25) in full, and the others listed by name: all of them when "
        "their names fit (about 1,500 capabilities at 64000), else the next best.",
    )
    planner_max_capabilities: int | None = Field(
        None, ge=1, description="Most capabilities shown to the planner with their full "
        "signature (unset: budget only)."
    )
    planner_catalog_requests: int = Field(
        2, ge=0, le=5,
        description="When the catalog is cut to fit the prompt, how many times the planner "
        "may answer with a request for more capabilities (by name or search text) instead "
        "of a plan; each is one more LLM call, counted in the run's LLM budget (0 = never).",
    )
    embeddings_base_url: str | None = Field(
        None, description="OpenAI-compatible embeddings endpoint base (…/v1): with "
        "ORCH_EMBEDDINGS_MODEL, a large catalog is also ranked by meaning and the two "
        "rankings fused (unset: lexical ranking only).",
    )
    embeddings_model: str | None = Field(None, description="Embedding model name.")
    embeddings_api_key: SecretStr | None = Field(
        None, description="API key of the embeddings endpoint; never logged.")
    embeddings_timeout_s: float = Field(
        30.0, gt=0, description="Timeout of one embeddings HTTP call.")
    embeddings_batch_size: int = Field(
        128, ge=1, le=2048, description="Texts sent in one embeddings request.")
    embeddings_cache: Path | None = Field(
        None, description="SQLite file keeping capability vectors across restarts "
        "(unset: kept in memory for the process's life).",
    )
    replan_max: int = Field(
        0, ge=0, description="Repair plans asked after steps fail for good (0 = no replanning)."
    )
    stream_plan: bool = Field(
        True,
        description="With an LLM client that streams (OpenAI-compatible, Anthropic), start "
        "each step while the plan is still being written: once it and the steps it uses are "
        "complete and valid, if its capability is idempotent, needs no approval and is not an "
        "HTTP PUT/DELETE (the rest waits for the whole plan). A plan that is then rejected "
        "has them cancelled and dropped. Not with ORCH_APPROVE_PLANS nor on Temporal.",
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
    max_tokens_per_run: int | None = Field(
        None, ge=1,
        description="Budget of LLM tokens (input + output) of one run; once spent, no further "
        "LLM call is made and the run stops (unset: no token budget).",
    )
    max_cost_per_run: float | None = Field(
        None, gt=0,
        description="Budget of LLM cost of one run, priced with ORCH_LLM_PRICES; once spent, "
        "the run stops (unset: no cost budget).",
    )
    llm_prices: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="Price table as JSON: {\"model\": {\"input_per_1k\": 0.15, "
        "\"output_per_1k\": 0.6}}; the key \"*\" prices any other model. Gives "
        "RunUsage.cost and the orchestration_llm_cost metric.",
    )
    max_prompt_value_chars: int = Field(
        4000, ge=100, description="Longest parameter/output/error text put in a prompt."
    )

    # --- limits on untrusted input (tool replies, LLM answers, parameters) ------------
    max_response_bytes: int = Field(
        10_000_000, ge=1024,
        description="Largest tool reply read: an HTTP body (refused while it streams) or a "
        "Python tool's result as JSON; a larger one fails the attempt with "
        "INVALID_RESPONSE/RESPONSE_TOO_LARGE.",
    )
    max_json_depth: int = Field(
        DEFAULT_MAX_DEPTH, ge=2, le=MAX_DEPTH_CEILING,
        description="Deepest nesting accepted in JSON read from LLM answers and tool replies "
        "and in parameters and outputs ([] is one level); deeper values are refused where "
        "they enter (at most 200: results must stay serialisable).",
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
    grounded_corrections: bool = Field(
        True, description="Layer 4 must say where each changed value comes from (a quote of "
        "the request or the tool's error, an upstream path, arithmetic over them); an "
        "unverifiable value is not sent. Off: verdicts are recorded, values sent anyway.",
    )
    ungrounded_needs_approval: bool = Field(
        False, description="An unverifiable corrected value pauses the step for a person "
        "(dagwright approve/reject) instead of failing it.",
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

    # --- circuit breakers (per tool; the catalog's circuit: overrides per tool/capability) --
    circuit_enabled: bool = Field(
        True, description="Circuit breakers per tool: after repeated transport faults or 5xx "
        "answers a tool's calls fail fast (CIRCUIT_OPEN, nothing sent) until a cool-down "
        "has passed and a probe call succeeds (a catalog's circuit: false turns it off "
        "for a tool or capability).")
    circuit_failure_threshold: int = Field(
        5, ge=1, description="Consecutive failures of a tool (within ORCH_CIRCUIT_WINDOW_S) "
        "that open its breaker.")
    circuit_window_s: float = Field(
        60.0, gt=0, description="Failures older than this no longer count toward opening.")
    circuit_cool_down_s: float = Field(
        30.0, gt=0, description="How long an open breaker refuses calls before it lets a "
        "probe call through (half-open).")
    circuit_half_open_max_calls: int = Field(
        1, ge=1, description="Probe calls let through at once while a breaker is half-open.")
    circuit_max_wait_s: float = Field(
        0.0, ge=0, description="A step that meets an open breaker waits for the end of its "
        "cool-down (then tries again) only if that is at most this far away; 0: it fails "
        "at once with CIRCUIT_OPEN.")

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

    # --- tool sources ----------------------------------------------------------------
    openapi_credentials: dict[str, dict[str, SecretStr]] = Field(
        default_factory=dict,
        description="Credentials of OpenAPI documents' security schemes as JSON "
        "{\"<tool>\": {\"<scheme>\": \"<secret>\"}} (bearer: the token; basic: "
        "\"user:password\"; apiKey: the key), read when a document is added to a catalog; "
        "credentials= of Catalog.add_openapi win. Never logged or stored (docs/tools.md).")

    # --- dagwright serve -----------------------------------------------------------
    serve_host: str = Field(
        "127.0.0.1", description="Address `dagwright serve` listens on; a non-loopback "
        "address needs ORCH_SERVE_TOKEN (or --insecure).")
    serve_port: int = Field(8080, ge=0, le=65535, description="Port of `dagwright serve` "
                            "(0: any free port).")
    serve_max_runs: int = Field(
        8, ge=1, description="Runs `dagwright serve` executes at once, per process; past it "
        "a new run gets 429 with Retry-After (a decision is queued for the first process "
        "with a free slot).")
    serve_workers: int = Field(
        1, ge=1, le=256, description="Processes `dagwright serve` (--workers) runs on one "
        "socket, sharing the run store: any of them answers for any run; a run executes in "
        "one (docs/serve.md).")
    serve_gc: Literal["untouched", "frozen", "throughput"] = Field(
        "throughput", description="What `dagwright serve` does with Python's garbage "
        "collector once started: untouched; frozen (gc.freeze(): what start built is never "
        "walked again); throughput (frozen, and a young collection after 50,000 new "
        "objects rather than 700). The library never changes it (docs/serve.md).")
    serve_token: SecretStr | None = Field(
        None, description="Bearer token every /v1 and /ui request of `dagwright serve` "
        "must carry (at least 16 characters); never logged.")
    serve_max_body_bytes: int = Field(
        1_048_576, ge=1024, description="Largest request body `dagwright serve` reads "
        "(413 past it).")
    serve_tokens: SecretStr | None = Field(
        None, description="Tenants of `dagwright serve`: a file, or a JSON object, mapping "
        "the SHA-256 (hex) of each bearer token to its tenant — \"acme\" or {\"tenant\": "
        "\"acme\", \"max_runs\": 4, \"max_llm_calls_per_run\": 20, \"max_tokens_per_run\": "
        "..., \"max_cost_per_run\": ...}. A tenant sees and acts on its own runs only "
        "(docs/context.md). Replaces ORCH_SERVE_TOKEN.")
    serve_session_key: SecretStr | None = Field(
        None, description="Secret (any long random text, the same on every replica) the "
        "viewer's sign-in cookies are signed with on a server with ORCH_SERVE_TOKENS; "
        "unset, the key is derived from a fixed label, and whoever holds the tokens file "
        "could make a cookie. Every worker and replica with the same setting accepts the "
        "same cookies; changing it signs viewers out (docs/serve.md). Never logged.")

    # --- sessions --------------------------------------------------------------------
    session_history_runs: int = Field(
        10, ge=1, le=1000, description="Earlier runs of a session a later run's planner is "
        "shown and may reference ({{run:N.step.path}}): the newest this many.")
    session_history_chars: int = Field(
        6000, ge=500, description="Budget of the session history in a planner prompt "
        "(characters): earlier queries and answers, newest first, then the step outputs "
        "most relevant to the new query; the rest is listed by name or counted "
        "(docs/context.md).")
    # --- backend: this process, or Temporal (the temporal extra) -----
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
    temporal_payload_offload_bytes: int = Field(
        128 * 1024, ge=1024, le=1_500_000,
        description="A value crossing Temporal (a tool reply, a step's parameters, the run "
        "state) of at least this size is kept in the run store and referred to from the "
        "history; clients and workers must share ORCH_STORE_URL (docs/scale-out.md).",
    )
    temporal_event_poll_s: float = Field(
        0.2, gt=0, description="How often a client following a Temporal run's events "
        "(on_event, astream) asks the workflow for new ones.",
    )

    # --- observability ------------------------------------------------------------
    otel_exporter: Literal["none", "console", "otlp"] = Field(
        "none", description="Span exporter the CLI installs (a library user brings their own)."
    )
    metrics_port: int | None = Field(None, description="Serve /metrics on this port (CLI).")
    metrics_host: str = Field(
        "127.0.0.1", description="Address /metrics listens on (CLI and worker): loopback "
        "unless set, e.g. 0.0.0.0 in a container Prometheus scrapes from outside.")
    log_format: Literal["text", "json"] = Field("text", description="Log record format.")
    log_level: str = Field("INFO", description="Log level of `dagwright serve` and `worker` "
                           "(INFO unless set), and of the other commands when set (else "
                           "WARNING: their live progress says the rest); -q and -v win.")
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

    def __init__(self, **values: Any) -> None:
        """Read the settings; raise :class:`ConfigError` for bad values, warn about unknown
        ``ORCH_*`` variables."""
        warn_unknown_env()  # first: a misspelt name often explains a bad value
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(_describe(exc, given=values)) from None
        except SettingsError as exc:  # a JSON-valued variable that is not JSON
            raise ConfigError(_describe_settings_error(exc)) from None

    @model_validator(mode="after")
    def _check_budgets(self) -> OrchestratorConfig:
        if self.max_cost_per_run is not None and not self.llm_prices:
            raise ValueError(
                "ORCH_MAX_COST_PER_RUN needs a price table: set ORCH_LLM_PRICES to JSON such as "
                '{"gpt-4o-mini": {"input_per_1k": 0.00015, "output_per_1k": 0.0006}}')
        return self

    def price_of(self, model: str | None) -> ModelPrice | None:
        """The price of ``model`` from ``llm_prices`` (the ``*`` entry for any other)."""
        if model is not None and model in self.llm_prices:
            return self.llm_prices[model]
        return self.llm_prices.get("*")

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
            elif isinstance(value, dict) and name == "openapi_credentials":
                value = {tool: dict.fromkeys(schemes, "********") for tool, schemes in value.items()}
            elif isinstance(value, Path):
                value = str(value)
            out[f"ORCH_{name.upper()}"] = value
        return out


# --- turning pydantic's complaints into messages about ORCH_* variables ---------------------

_WARNED: set[str] = set()


def warn_unknown_env(environ: typing.Mapping[str, str] | None = None) -> list[str]:
    """Warn (once per process and name) about ``ORCH_*`` variables no setting reads.

    Returns the names warned about now. A misspelt variable is otherwise ignored in
    silence and the default it was meant to change stays in force.
    """
    env = os.environ if environ is None else environ
    known = {env_name(name) for name in OrchestratorConfig.model_fields}
    warned = []
    for name in sorted(env):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known or upper in _WARNED:
            continue
        _WARNED.add(upper)
        near = closest(upper, known)
        hint = f"; did you mean {near}?" if near else "; `dagwright config` lists every setting"
        warnings.warn(ConfigWarning(f"{name} is not a dagwright setting and is ignored{hint}"),
                      stacklevel=3)
        warned.append(name)
    return warned


def allowed_values(field: FieldInfo) -> str:
    """What a setting accepts, in words (for error messages and the docs)."""
    annotation = field.annotation
    args = typing.get_args(annotation)
    optional = type(None) in args
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in args if a is not type(None))
    origin = typing.get_origin(annotation)
    if origin is Literal:
        text = "one of " + ", ".join(str(a) for a in typing.get_args(annotation))
    elif annotation is bool:
        text = "true or false"
    elif annotation in (int, float):
        text = "an integer" if annotation is int else "a number"
        bounds = []
        for meta in field.metadata:
            for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
                if isinstance(meta, getattr(annotated_types, attr.capitalize())):
                    bounds.append(f"{sign} {getattr(meta, attr):g}")
        if bounds:
            text += " " + " and ".join(bounds)
    elif annotation is Path:
        text = "a file path"
    elif origin is list:
        text = "comma-separated text or a JSON list"
    elif origin is dict:
        text = "a JSON object"
    elif annotation is SecretStr:
        text = "a secret string"
    else:
        text = "text"
    return text + (" (or unset)" if optional else "")


def _shown(field: str, value: Any) -> str:
    info = OrchestratorConfig.model_fields.get(field)
    if info is not None and info.annotation is not None and "SecretStr" in str(info.annotation):
        return "'********'"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "...'"


def _describe(exc: ValidationError, *, given: typing.Mapping[str, Any]) -> str:
    """One line per problem: where the value came from, the value, why, what is allowed."""
    fields = OrchestratorConfig.model_fields
    lines = []
    for error in exc.errors():
        loc = error.get("loc") or ()
        field = str(loc[0]) if loc else ""
        if field not in fields:  # a check across settings (model validator)
            lines.append(str(error["msg"]).removeprefix("Value error, "))
            continue
        value = error.get("input")
        inner = ".".join(str(p) for p in loc[1:])
        if inner:  # inside a structured value (the price table): name the path in it
            lines.append(f"{env_name(field)}: {inner}: {error['msg']}")
            continue
        where = (f"{field}={_shown(field, value)} (argument of OrchestratorConfig)"
                 if field in given else f"{env_name(field)}={_shown(field, value)}")
        info = fields[field]
        literal = typing.get_origin(info.annotation) is Literal
        line = f"{where} is not valid" + ("" if literal else f": {error['msg']}")
        line += f"; allowed: {allowed_values(info)}"
        if literal and isinstance(value, str):
            near = closest(value, [str(a) for a in typing.get_args(info.annotation)])
            if near:
                line += f" — did you mean {near!r}?"
        lines.append(line)
    head = "invalid configuration" if len(lines) > 1 else ""
    if head:
        return head + ":\n  " + "\n  ".join(lines)
    return lines[0]


def _describe_settings_error(exc: SettingsError) -> str:
    text = str(exc)
    field = text.split('"')[1] if text.count('"') >= 2 else ""
    if field in OrchestratorConfig.model_fields:
        info = OrchestratorConfig.model_fields[field]
        return (f"{env_name(field)} is not valid: it must be {allowed_values(info)} "
                f"({exc.__cause__ or text})")
    return text
