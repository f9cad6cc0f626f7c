"""What a demo scenario is, and the scripted LLM that plays its model.

The LLM of the demo is SCRIPTED: each scenario says which plan "the model" writes
(including the mistakes real models make), and the answers to layer 3/4 and synthesis
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

__all__ = [
    "Answer",
    "Responder",
    "Scenario",
    "block_json",
    "block_text",
    "scripted_llm_for",
    "scripted_synthesis"
]

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


def block_text(prompt: str, label: str) -> str:
    """The text of a ``<<<LABEL … LABEL>>>`` data block of a prompt ('' if absent)."""
    tag = label.upper().replace(" ", "_")
    match = re.search(rf"<<<{tag}\n(.*?)\n{tag}>>>", prompt, re.S)
    return match.group(1) if match else ""


def block_json(prompt: str, label: str) -> Any:
    """The JSON inside a data block of a prompt (None if the block is absent)."""
    text = block_text(prompt, label)
    return json.loads(text) if text else None


def _results_block(prompt: str) -> list[dict[str, Any]]:
    return block_json(prompt, "results") or []


def scripted_synthesis(request: LLMRequest) -> str:
    """A deterministic 'answer' listing what each step returned (no model involved)."""
    lines = []
    for entry in _results_block(request.prompt_text):
        if entry["status"] == "succeeded":
            output = entry["output"]
            lines.append(f"{entry['step']}: {output[:160]}{'…' if len(output) > 160 else ''}")
        else:
            lines.append(f"{entry['step']}: {entry['status']} ({entry.get('error') or entry.get('reason')})")
    return "Scripted summary of the tool results:\n" + "\n".join(lines)


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
