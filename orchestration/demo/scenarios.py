"""The offline demo's scenarios: the engine, layers 2-3, then layer 4 (in that order).

See :mod:`orchestration.demo.scenario` for how the scripted model answers.
"""

from __future__ import annotations

import re
from typing import Any

from orchestration.demo.scenario import Scenario, block_json, scripted_llm_for, scripted_synthesis
from orchestration.demo.scenarios_layer4 import layer4_scenarios
from orchestration.llm.base import LLMRequest

__all__ = ["Scenario", "scenarios", "scripted_llm_for", "scripted_synthesis",
           "scripted_validation_fix"]


def scripted_validation_fix(request: LLMRequest) -> dict[str, Any]:
    """Layer 3 as a careful model would answer, computed from the prompt alone.

    It reads the failed parameters and the validation errors, and fixes what the schema
    itself explains: a value above a ``maximum`` is set to that maximum, a currency
    written as a word is mapped to its ISO code. Anything else: cannot fix.
    """
    params = dict(block_json(request.prompt_text, "failed parameters") or {})
    errors = block_json(request.prompt_text, "validation errors") or []
    words = {"euro": "EUR", "euros": "EUR", "dollar": "USD", "dollars": "USD",
             "pound": "GBP", "pounds": "GBP", "yen": "JPY", "franc": "CHF"}
    notes = []
    for err in errors if isinstance(errors, list) else []:
        field_name = str(err.get("path", "")).removeprefix("$.")
        message = str(err.get("message", ""))
        maximum = re.search(r"greater than the maximum of (\d+)", message)
        if maximum and field_name in params:
            params[field_name] = int(maximum.group(1))
            notes.append(f"{field_name} capped at its maximum {maximum.group(1)}")
        elif "is not one of" in message and str(params.get(field_name, "")).lower() in words:
            params[field_name] = words[str(params[field_name]).lower()]
            notes.append(f"{field_name} mapped to ISO code {params[field_name]}")
    if not notes:
        return {"can_fix": False, "analysis": "the error does not say what the value should be",
                "corrected_parameters": {}}
    return {"can_fix": True, "analysis": "; ".join(notes), "corrected_parameters": params}


def scenarios() -> list[Scenario]:
    """The demo scenarios, in the order they run: the engine, layers 2-3, layer 4."""
    return [*_base_scenarios(), *layer4_scenarios()]


def _base_scenarios() -> list[Scenario]:
    return [
        Scenario(
            name="weather",
            query="What is the weather in Tokyo for the next 3 days?",
            shows="references between steps: forecast waits for geocode and takes its lat/lon",
            plan={"steps": [
                {"id": "geo", "tool": "weather", "capability": "geocode",
                 "params": {"location": "Tokyo"}},
                {"id": "forecast", "tool": "weather", "capability": "forecast",
                 "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 3,
                            "units": "celsius"}},
            ]},
        ),
        Scenario(
            name="parallel",
            query="What are Apple and Microsoft shares worth in GBP, and what is 250 USD in EUR?",
            shows="independent branches run in parallel; each conversion starts when its quote is in",
            plan={"steps": [
                {"id": "apple", "tool": "stocks", "capability": "quote",
                 "params": {"symbol": "AAPL"}},
                {"id": "msft", "tool": "stocks", "capability": "quote",
                 "params": {"symbol": "MSFT"}},
                {"id": "apple_gbp", "tool": "currency", "capability": "convert",
                 "params": {"amount": "{{apple.price}}", "from": "USD", "to": "GBP"}},
                {"id": "msft_gbp", "tool": "currency", "capability": "convert",
                 "params": {"amount": "{{msft.price}}", "from": "USD", "to": "GBP"}},
                {"id": "usd_eur", "tool": "currency", "capability": "convert",
                 "params": {"amount": 250, "from": "USD", "to": "EUR"}},
            ]},
        ),
        Scenario(
            name="layer2",
            query="Weather in Tokyo for 3 days, in Celsius",
            shows="layer 2: the planner wrote numbers as strings and an enum in the wrong case; "
            "coercion fixes them for free before the call (no LLM call)",
            plan={"steps": [
                {"id": "forecast", "tool": "weather", "capability": "forecast",
                 "params": {"lat": "35.6897", "lon": " 139.6917 ", "days": "3",
                            "units": "CELSIUS"}},
            ]},
        ),
        Scenario(
            name="layer3",
            query="Give me the 10-day forecast for Sydney and convert 50 dollars to euros",
            shows="layer 3: values the schema rejects (days above its maximum, a currency "
            "written as a word) are never sent; the LLM corrects them from the exact errors",
            responders={"validation_feedback": scripted_validation_fix},
            plan={"steps": [
                {"id": "geo", "tool": "weather", "capability": "geocode",
                 "params": {"location": "Sydney"}},
                {"id": "forecast", "tool": "weather", "capability": "forecast",
                 "params": {"lat": "{{geo.lat}}", "lon": "{{geo.lon}}", "days": 10}},
                {"id": "convert", "tool": "currency", "capability": "convert",
                 "params": {"amount": 50, "from": "dollars", "to": "euro"}},
            ]},
        ),
        Scenario(
            name="partial",
            query="Quote the ticker ZZZZ and convert 10 USD to JPY",
            shows="a failed branch is reported with its cause while the other branch completes",
            expect_status="partial",
            responders={"semantic_retry": lambda r: {
                "should_retry": False, "is_transient_error": False, "corrected_parameters": {},
                "analysis": "The user asked for ZZZZ; no other symbol is meant."},
                "validation_feedback": lambda r: {
                "can_fix": False, "analysis": "ZZZZ is what the user asked for.",
                "corrected_parameters": {}}},
            plan={"steps": [
                {"id": "zzzz", "tool": "stocks", "capability": "quote",
                 "params": {"symbol": "ZZZZ"}},
                {"id": "zzzz_eur", "tool": "currency", "capability": "convert",
                 "params": {"amount": "{{zzzz.price}}", "from": "USD", "to": "EUR"}},
                {"id": "usd_jpy", "tool": "currency", "capability": "convert",
                 "params": {"amount": 10, "from": "USD", "to": "JPY"}},
            ]},
        ),
    ]
