"""Regenerate docs/configuration.md and config/example.env from OrchestratorConfig.

Run: python docs/gen_config_docs.py   (a test fails when either is out of date)
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestration.config import OrchestratorConfig

ROOT = Path(__file__).resolve().parent.parent


def _default(field: object) -> str:
    value = field.get_default(call_default_factory=True)  # type: ignore[attr-defined]
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def render_markdown() -> str:
    lines = [
        "# Configuration",
        "",
        "Every setting is a field of `OrchestratorConfig` (pydantic-settings) and an `ORCH_*`",
        "environment variable: the field name is the variable without `ORCH_`, in lower case",
        "(`ORCH_MAX_CONCURRENCY` ↔ `max_concurrency`). Constructor arguments win over the",
        "environment, which wins over the defaults. Lists are comma-separated (or a JSON list).",
        "`dagwright config` prints the effective values with secrets masked.",
        "",
        "Per-capability overrides live in the catalog: `layers:` (e.g.",
        "`{validation_feedback_enabled: false, max_validation_retries: 1}`), `retry:`,",
        "`circuit:` (the `ORCH_CIRCUIT_*` settings of the tool's breaker; `false` turns it",
        "off), `answer_template` and `max_calls_per_run` (a budget of calls of that",
        "capability per run); see [workflows.md](workflows.md).",
        "",
        "A bad value raises `ConfigError` naming the variable, the value and what is allowed;",
        "an `ORCH_*` variable that no setting reads is warned about once, with the closest name.",
        "Budgets (`ORCH_MAX_LLM_CALLS_PER_RUN`, `ORCH_MAX_TOKENS_PER_RUN`, `ORCH_MAX_COST_PER_RUN`)",
        "stop a run at the first call they refuse; see [troubleshooting.md](troubleshooting.md#budgets).",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
    ]
    for name, field in OrchestratorConfig.model_fields.items():
        default = _default(field).replace("|", "\\|")
        lines.append(f"| `ORCH_{name.upper()}` | `{default}` | {field.description or ''} |")
    return "\n".join(lines) + "\n"


def render_env() -> str:
    lines = [
        "# Every dagwright setting with its default. Copy to .env or export in your service.",
        "# Lists are comma-separated. Secrets (ORCH_LLM_API_KEY) are never printed or logged.",
        "",
    ]
    for name, field in OrchestratorConfig.model_fields.items():
        lines.append(f"# {field.description}")
        if field.get_default(call_default_factory=True) is None:
            # unset by default: an empty value would be read as "" and rejected
            lines.append(f"# ORCH_{name.upper()}=")
        else:
            lines.append(f"ORCH_{name.upper()}={_default(field)}")
    return "\n".join(lines) + "\n"


def main() -> None:
    (ROOT / "docs" / "configuration.md").write_text(render_markdown(), encoding="utf-8")
    (ROOT / "config" / "example.env").write_text(render_env(), encoding="utf-8")
    print(json.dumps({"settings": len(OrchestratorConfig.model_fields)}))


if __name__ == "__main__":
    main()
