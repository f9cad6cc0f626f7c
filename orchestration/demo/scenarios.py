"""The offline demo: scenario queries run through the full engine against the demo tools.

The LLM here is SCRIPTED: each scenario says which plan "the model" writes (including
the mistakes real models make), and the scripted answers to layer 3/4 and synthesis
requests are computed from what those requests contain. The tools, the HTTP traffic,
the scheduler and every defense layer are real.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestration.demo.tools import DemoTools
from orchestration.llm.base import LLMRequest

Answer = str | dict[str, Any]
Responder = Callable[[LLMRequest], Answer]


@dataclass
class Scenario:
    """One demo query: the plan the scripted planner writes and what it shows."""

    name: str
    query: str
    plan: dict[str, Any]
    shows: str
    expect_status: str = "succeeded"
    setup: Callable[[DemoTools], None] | None = None
    responders: dict[str, Responder] = field(default_factory=dict)


def _results_block(prompt: str) -> list[dict[str, Any]]:
    match = re.search(r"<<<RESULTS\n(.*)\nRESULTS>>>", prompt, re.S)
    return json.loads(match.group(1)) if match else []


def scripted_synthesis(request: LLMRequest) -> str:
    """A deterministic 'answer' listing what each step returned (no model involved)."""
    lines = []
    for entry in _results_block(request.prompt_text):
        if entry["status"] == "succeeded":
            lines.append(f"{entry['step']}: {entry['output']}")
        else:
            lines.append(f"{entry['step']}: {entry['status']} ({entry.get('error') or entry.get('reason')})")
    return "Scripted summary of the tool results:\n" + "\n".join(lines)


def scenarios() -> list[Scenario]:
    """The demo scenarios, in the order they run."""
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


def scripted_llm_for(scenario: Scenario) -> Responder:
    """The scripted LLM of one scenario: its plan, its layer answers, a synthesis."""

    def respond(request: LLMRequest) -> Answer:
        if request.purpose == "plan":
            return scenario.plan
        if request.purpose in scenario.responders:
            return scenario.responders[request.purpose](request)
        if request.purpose == "synthesis":
            return scripted_synthesis(request)
        raise LookupError(f"scenario {scenario.name!r} has no scripted answer for "
                          f"purpose {request.purpose!r}")

    return respond
