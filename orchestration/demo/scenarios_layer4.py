"""Demo scenarios for layer 4 (semantic retry), the transient override and resilience.

As in :mod:`orchestration.demo.scenario`, the LLM is scripted, but its layer answers are
computed from what each request actually contains (the query, the upstream outputs, the
error the tool sent), so the demo shows the engine handing the model the right material.
Faults are injected into the real demo tools through each scenario's ``setup``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestration.demo.scenario import Scenario, block_text
from orchestration.demo.tools import DemoTools, NotFoundAs503, RateLimited, ServiceUnavailable, Status
from orchestration.llm.base import LLMRequest

__all__ = ["layer4_scenarios"]


def _no_fix(analysis: str) -> dict[str, Any]:
    return {"should_retry": False, "is_transient_error": False, "corrected_parameters": {},
            "analysis": analysis}


def _layer3_cannot_know(request: LLMRequest) -> dict[str, Any]:
    return {"can_fix": False, "corrected_parameters": {},
            "analysis": "the amount must come from the sale; the error alone cannot tell it"}


def _proceeds(request: LLMRequest) -> dict[str, Any]:
    """Shares from the query × the price step 1 returned, as a model would compute it."""
    prompt = request.prompt_text
    shares = re.search(r"(\d+(?:\.\d+)?)\s+\w*\s*shares", block_text(prompt, "USER_QUERY"))
    price = re.search(r'"price":\s*([0-9.]+)', block_text(prompt, "UPSTREAM_OUTPUTS"))
    if not shares or not price:
        return _no_fix("the query or the quote does not give the number of shares and the price")
    amount = round(float(shares.group(1)) * float(price.group(1)), 6)
    return {"should_retry": True, "is_transient_error": False,
            "corrected_parameters": {"amount": amount},
            "provenance": {"amount": {"kind": "derived",
                                      "expression": f"{shares.group(1)} * {{{{quote.price}}}}"}},
            "analysis": f"proceeds = {shares.group(1)} shares × {price.group(1)} USD = {amount}"}


def _suggested_name(request: LLMRequest) -> dict[str, Any]:
    """Take the name the tool's error suggests ("did you mean 'Tokyo'?")."""
    try:
        error = json.loads(block_text(request.prompt_text, "ERROR"))
    except ValueError:
        return _no_fix("the error could not be read")
    hint = str(error.get("details", {}).get("hint", ""))
    match = re.search(r"did you mean '([^']+)'", hint)
    if not match:
        return _no_fix("the tool suggests no other name")
    return {"should_retry": True, "is_transient_error": False,
            "corrected_parameters": {"location": match.group(1)},
            "provenance": {"location": {"kind": "tool_hint", "quote": match.group(0)}},
            "analysis": f"the 503 carries a not-found error; the tool suggests {match.group(1)!r}"}


def _transient_if_timeout(request: LLMRequest) -> dict[str, Any]:
    """Timeouts and overloads pass: declare them transient whatever the tool's flag says."""
    try:
        error = json.loads(block_text(request.prompt_text, "ERROR"))
    except ValueError:
        return _no_fix("the error could not be read")
    text = f"{error.get('code', '')} {error.get('message', '')}".lower()
    if "timed out" in text or "timeout" in text:
        return {"should_retry": False, "is_transient_error": True, "corrected_parameters": {},
                "analysis": "the service timed out; the parameters are right, so retry them "
                "although the tool said retryable=false"}
    return _no_fix("not a transient failure")


def _inject(tool: str, path: str, *faults: Any) -> Any:
    def setup(tools: DemoTools) -> None:
        tools[tool].inject(path, *faults)

    return setup


def layer4_scenarios() -> list[Scenario]:
    """Layer 4, the transient override, a honoured rate limit and an auth stop."""
    return [
        Scenario(
            name="tesla",
            query="Sell 100 Tesla shares and convert the proceeds to EUR",
            shows="layer 4: the planner wrote amount 0, the tool refuses it, layer 3 sees a "
            "placeholder and does not guess; layer 4 computes 100 × 468.285 = 46828.5 and "
            "cites it as 100 * {{quote.price}}, which the engine checks before sending",
            responders={"validation_feedback": _layer3_cannot_know, "semantic_retry": _proceeds},
            plan={"steps": [
                {"id": "quote", "tool": "stocks", "capability": "quote",
                 "params": {"symbol": "TSLA"}},
                {"id": "proceeds_eur", "tool": "currency", "capability": "convert",
                 "depends_on": ["quote"], "params": {"amount": 0, "from": "USD", "to": "EUR"}},
            ]},
        ),
        Scenario(
            name="tokio",
            query="What is the weather in Tokio tomorrow?",
            shows="layer 4 on a 503 that carries a structured not-found: 'Tokio' becomes 'Tokyo' "
            "from the tool's hint, and the forecast runs on the corrected coordinates",
            setup=_inject("weather", "/geocode", NotFoundAs503()),
            responders={"semantic_retry": _suggested_name},
            plan={"steps": [
                {"id": "geo", "tool": "weather", "capability": "geocode",
                 "params": {"location": "Tokio"}},
                {"id": "forecast", "tool": "weather", "capability": "forecast",
                 "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 1}},
            ]},
        ),
        Scenario(
            name="transient",
            query="What is Nvidia trading at?",
            shows="transient override: the quote service times out and says retryable=false; "
            "layer 4 declares the error transient and the same call is retried after backoff",
            setup=_inject("stocks", "/quote", ServiceUnavailable(retryable=False)),
            responders={"semantic_retry": _transient_if_timeout},
            plan={"steps": [{"id": "nvda", "tool": "stocks", "capability": "quote",
                             "params": {"symbol": "NVDA"}}]},
        ),
        Scenario(
            name="rate-limit",
            query="What is 50 GBP in JPY?",
            shows="resilience: a 429 with Retry-After 0.3 s is waited out and the same call "
            "retried, without asking the LLM",
            setup=_inject("currency", "/convert", RateLimited(0.3)),
            plan={"steps": [{"id": "gbp_jpy", "tool": "currency", "capability": "convert",
                             "params": {"amount": 50, "from": "GBP", "to": "JPY"}}]},
        ),
        Scenario(
            name="auth",
            query="Quote Apple",
            shows="resilience: a 401 stops the step at once — no retry and no LLM call can fix "
            "credentials (the run's only LLM call is the plan)",
            expect_status="failed",
            setup=_inject("stocks", "/quote", Status(401, "invalid API key")),
            plan={"steps": [{"id": "aapl", "tool": "stocks", "capability": "quote",
                             "params": {"symbol": "AAPL"}}]},
        ),
    ]
