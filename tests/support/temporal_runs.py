"""A catalog, an LLM and a set of plans that exercise every part of the engine, for the
tests that run the same plans on the local and the Temporal backends.

The tools are in-process Python functions (a worker in the test process runs them), each
deterministic given what it was asked so far (``reset()`` starts them afresh), and the
LLM answers by purpose, so both backends see exactly the same world:

===================  ========================================================
plan                 what it exercises
===================  ========================================================
weather              two dependent steps, references, synthesis
coerced              layer 2: strings coerced to the schema's numbers
planned              layer 1: the plan comes from the (scripted) LLM
corrected            layer 3: a tool's input error, corrected by the LLM
resolved             layer 4: "not found", re-resolved by the LLM
flaky                resilience: a 503 retried after backoff (a workflow timer)
side_effect          a non-idempotent failure is not re-sent; its dependant is skipped
fan                  independent branches, a join, a failure beside successes
===================  ========================================================

``bulk_plan`` builds plans of large outputs (the Temporal payload tests).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from orchestration import Catalog, ErrorCategory, OrchestratorConfig, ToolFailed
from orchestration.llm.base import LLMRequest

CALLS: Counter[str] = Counter()
"""Executions per tool (and key) in this process; ``reset()`` clears it."""


def reset() -> None:
    CALLS.clear()


def build_catalog() -> Catalog:
    catalog = Catalog()

    @catalog.tool("geo.locate")
    def locate(city: str) -> dict[str, Any]:
        """Coordinates of a city."""
        CALLS["geo.locate"] += 1
        if city == "Atlantis":
            raise ToolFailed("NO_SUCH_CITY", f"no city called {city}", ErrorCategory.NOT_FOUND)
        return {"city": city, "lat": 35.68, "lon": 139.69}

    @catalog.tool("weather.now")
    def weather(lat: float, lon: float) -> dict[str, Any]:
        """Current weather at a place."""
        CALLS["weather.now"] += 1
        return {"temp_c": 21.5, "at": [lat, lon]}

    @catalog.tool("inventory.lookup")
    def lookup(sku: str) -> dict[str, Any]:
        """Stock of an article; SKUs look like ABC-12."""
        CALLS["inventory.lookup"] += 1
        if not re.fullmatch(r"[A-Z]+-\d+", sku):
            raise ToolFailed("BAD_SKU", "sku must look like ABC-12 (letters, dash, digits)",
                             ErrorCategory.INPUT_ERROR, retryable=True)
        return {"sku": sku, "stock": 7}

    @catalog.tool("flaky.fetch")
    def fetch(key: str) -> dict[str, Any]:
        """A service that is busy on the first request for each key."""
        CALLS[f"flaky.fetch:{key}"] += 1
        if CALLS[f"flaky.fetch:{key}"] == 1:
            raise ToolFailed("BUSY", "try again shortly", ErrorCategory.SERVICE_ERROR,
                             retryable=True)
        return {"key": key, "value": 42}

    @catalog.tool("bank.pay", idempotent=False)
    def pay(amount: float) -> dict[str, Any]:
        """Move money (a side effect); the bank is down."""
        CALLS["bank.pay"] += 1
        raise ToolFailed("BANK_DOWN", "the bank is unavailable", ErrorCategory.SERVICE_ERROR,
                         retryable=True)

    @catalog.tool("bank.receipt")
    def receipt(paid: float) -> dict[str, Any]:
        """File a receipt."""
        CALLS["bank.receipt"] += 1
        return {"filed": paid}

    @catalog.tool("bank.transfer", requires_approval=True, idempotent=False)
    def transfer(amount: float, to: str) -> dict[str, Any]:
        """Move money to someone (a person approves)."""
        CALLS["bank.transfer"] += 1
        return {"sent": amount, "to": to}

    @catalog.tool("bulk.chunk")
    def chunk(n: int, kb: int) -> dict[str, Any]:
        """A large document (``kb`` KiB of text, different for each ``n``)."""
        CALLS["bulk.chunk"] += 1
        line = f"chunk {n}: " + "lorem ipsum dolor sit amet " * 4 + "\n"
        return {"n": n, "text": (line * (kb * 1024 // len(line) + 1))[:kb * 1024]}

    return catalog


def bulk_plan(steps: int, kb: int) -> dict[str, Any]:
    """``steps`` independent steps of ``kb`` KiB each (the run's outputs add up)."""
    return {"steps": [{"id": f"part{n}", "tool": "bulk", "capability": "chunk",
                       "params": {"n": n, "kb": kb}} for n in range(steps)]}


PLANNED = {"steps": [
    {"id": "where", "tool": "geo", "capability": "locate", "params": {"city": "Kyoto"}},
    {"id": "wx", "tool": "weather", "capability": "now",
     "params": {"lat": "{{where.lat}}", "lon": "{{where.lon}}"}},
]}


def answer(request: LLMRequest) -> str:
    """The scripted LLM of both backends: a fixed answer per purpose."""
    if request.purpose == "plan":
        return json.dumps(PLANNED)
    if request.purpose == "validation_feedback":
        return json.dumps({"can_fix": True, "analysis": "the SKU needs upper case and a dash",
                           "corrected_parameters": {"sku": "ABC-12"}})
    if request.purpose == "semantic_retry":
        return json.dumps({"should_retry": True, "corrected_parameters": {"city": "Paris"},
                           "provenance": {"city": {"kind": "query", "quote": "Paris"}},
                           "analysis": "Atlantis is not a city; the user meant Paris",
                           "is_transient_error": False})
    if request.purpose == "synthesis":
        return "Here is what I found."
    raise AssertionError(f"unexpected LLM purpose {request.purpose!r}")


PLANS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "weather": ("weather in Tokyo?", {"steps": [
        {"id": "where", "tool": "geo", "capability": "locate", "params": {"city": "Tokyo"}},
        {"id": "wx", "tool": "weather", "capability": "now",
         "params": {"lat": "{{where.lat}}", "lon": "{{where.lon}}"}}]}),
    "coerced": ("weather at a spot", {"steps": [
        {"id": "wx", "tool": "weather", "capability": "now",
         "params": {"lat": "35.5", "lon": "139"}}]}),
    "planned": ("weather in Kyoto, plan it", None),
    "corrected": ("stock of abc 12", {"steps": [
        {"id": "stock", "tool": "inventory", "capability": "lookup",
         "params": {"sku": "abc 12"}}]}),
    "resolved": ("weather in the lost city of Paris", {"steps": [
        {"id": "where", "tool": "geo", "capability": "locate", "params": {"city": "Atlantis"}},
        {"id": "wx", "tool": "weather", "capability": "now",
         "params": {"lat": "{{where.lat}}", "lon": "{{where.lon}}"}}]}),
    "flaky": ("fetch the value", {"steps": [
        {"id": "get", "tool": "flaky", "capability": "fetch", "params": {"key": "k1"}}]}),
    "side_effect": ("pay and file", {"steps": [
        {"id": "pay", "tool": "bank", "capability": "pay", "params": {"amount": 10}},
        {"id": "file", "tool": "bank", "capability": "receipt",
         "params": {"paid": "{{pay.paid}}"}}]}),
    "fan": ("many things at once", {"steps": [
        {"id": "a", "tool": "geo", "capability": "locate", "params": {"city": "Oslo"}},
        {"id": "b", "tool": "flaky", "capability": "fetch", "params": {"key": "fan"}},
        {"id": "c", "tool": "bank", "capability": "pay", "params": {"amount": 1}},
        {"id": "d", "tool": "weather", "capability": "now",
         "params": {"lat": "{{a.lat}}", "lon": "{{a.lon}}"}, "depends_on": ["b"]},
        {"id": "e", "tool": "bank", "capability": "receipt", "params": {"paid": "{{c.paid}}"}}]}),
}


def engine_config(**overrides: Any) -> OrchestratorConfig:
    """Settings both backends run with (short waits, so retries cost little)."""
    values: dict[str, Any] = {"store_url": "memory://", "retry_base_delay_s": 0.01,
                              "retry_max_delay_s": 0.05, "llm_provider": "scripted"}
    values.update(overrides)
    return OrchestratorConfig(**values)


def comparable(result: Any) -> dict[str, Any]:
    """What must be equal between backends: everything but timings and trace ids."""
    data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    data.pop("trace_id", None)
    data["usage"].pop("wall_time_s", None)
    for step in data["steps"].values():
        step.pop("started_at_s", None)
        step.pop("duration_s", None)
        for attempt in step["attempts"]:
            attempt.pop("latency_s", None)
    for pending in data.get("pending_approvals", []):
        pending.pop("requested_at", None)
    return data


TIMINGS = {"usage": ("wall_time_s",), "step": ("started_at_s", "duration_s"), "attempt": ("latency_s",)}


def comparable_json(result: Any) -> str:
    """:func:`comparable` as the JSON text ``RunResult.to_dict()`` gives, key order and
    number formatting included (a backend that sorted keys or rounded numbers differs).

    Two orders follow timing, not the run, and are put in a fixed order like the timings
    are left out: ``steps`` (the order steps finished: concurrent ones may finish either
    way) and the counters of ``usage`` (the order of first use)."""
    data = comparable(result)
    plan_ids = [s["id"] for s in (data.get("plan") or {}).get("steps", [])]
    data["steps"] = {sid: data["steps"][sid] for sid in sorted(
        data["steps"], key=lambda sid: (plan_ids.index(sid) if sid in plan_ids else len(plan_ids), sid))}
    for counter in ("tool_calls", "by_purpose"):
        data["usage"][counter] = dict(sorted(data["usage"][counter].items()))
    return json.dumps(data)


def timing_types(result: Any) -> set[str]:
    """The JSON types of every timing :func:`comparable` leaves out (the same on both
    backends: seconds as floats, never rounded to integers or written as strings)."""
    data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    values = [data["usage"][k] for k in TIMINGS["usage"]]
    for step in data["steps"].values():
        values += [step[k] for k in TIMINGS["step"] if step[k] is not None]
        values += [a[k] for a in step["attempts"] for k in TIMINGS["attempt"]]
    return {type(v).__name__ for v in values}
