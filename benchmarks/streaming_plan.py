"""Streaming plan execution: time to the first tool call and end to end, streamed or not.

A model writes a plan at a few dozen tokens a second, so a plan of a few hundred tokens
takes seconds to arrive; without streaming nothing starts before its last token. With
``ORCH_STREAM_PLAN`` (the default for clients that stream) each step starts as soon as it
and the steps it uses are complete in the stream and valid, if its call has no side
effect. This measures what that buys, through ``Orchestrator.arun`` against real
loopback servers speaking each provider's protocol (``tests/llm_servers.py``):

* **streamed** — the server streams the plan (OpenAI-compatible ``delta.content`` chunks;
  Anthropic ``input_json_delta`` events of the forced tool call) one token per event at
  ``--tokens-per-s`` after a first-token latency;
* **whole** — ``stream_plan=False``: the same server answers the same plan in one piece
  after the time the stream takes (the first-token latency plus every event's pace), as
  a provider without streaming does.

The plan is a trip planner's: eight steps on in-process tools with the latencies of
remote APIs (150–800 ms), two levels of dependencies, and one call with a side effect
(a booking hold) that must wait for the whole plan either way. Answer synthesis is off
in both (it would add the same time to both). Figures are medians over ``--repeats``
runs of each configuration, interleaved.

Run: ``python -m benchmarks.streaming_plan`` (``--quick`` for a few seconds). The
loopback servers live with the tests: install with ``pip install -e '.[dev]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from benchmarks import common
from orchestration import Catalog, Orchestrator, OrchestratorConfig
from orchestration.llm.anthropic import AnthropicClient
from orchestration.llm.base import LLMClient
from orchestration.llm.openai_compat import OpenAICompatibleClient

CHARS_PER_TOKEN = 4
"""One streamed event per token of about this many characters (JSON tokenises densely)."""

TOOL_MS = {"locate": 200, "forecast": 300, "rates": 150, "flights": 800, "hotels": 600,
           "events": 400, "quote": 100, "hold": 300}
"""Latency of each tool, in milliseconds at full scale (remote APIs)."""


def _step(sid: str, capability: str, **params: Any) -> dict[str, Any]:
    return {"id": sid, "tool": "trip", "capability": capability, "params": params}


PLAN: dict[str, Any] = {"steps": [
    _step("geo", "locate", city="Lisbon", country="Portugal"),
    _step("weather", "forecast", lat="{{geo.lat}}", lon="{{geo.lon}}", days=5),
    _step("fx", "rates", base="USD", symbols=["EUR", "GBP"]),
    _step("flights", "flights", origin="JFK", destination="LIS", depart="2026-06-12",
          back="2026-06-19", adults=2, cabin="economy"),
    _step("hotels", "hotels", city="Lisbon", checkin="2026-06-12", checkout="2026-06-19",
          guests=2, max_price_eur=220),
    _step("events", "events", city="Lisbon", start="2026-06-12", end="2026-06-19",
          interests=["music", "food"]),
    _step("quote", "quote", flight="{{flights.best.price_usd}}",
          hotel="{{hotels.best.total_eur}}", eur_per_usd="{{fx.EUR}}"),
    _step("hold", "hold", offer="{{flights.best.offer_id}}", total_usd="{{quote.total_usd}}"),
]}
"""Eight steps: four independent searches, a forecast on the geocode, a quote joining
three of them, and a hold (a side effect) on the quote."""


@dataclass
class World:
    """The trip tools; each run notes when the first tool call started."""

    scale: float
    first_call: float | None = None
    calls: list[str] = field(default_factory=list)

    def catalog(self) -> Catalog:
        catalog = Catalog()

        async def visit(name: str, result: dict[str, Any]) -> dict[str, Any]:
            if self.first_call is None:
                self.first_call = time.perf_counter()
            self.calls.append(name)
            await asyncio.sleep(TOOL_MS[name] / 1000 * self.scale)
            return result

        async def locate(city: str, country: str) -> dict[str, Any]:
            return await visit("locate", {"lat": 38.72, "lon": -9.14})

        async def forecast(lat: float, lon: float, days: int) -> dict[str, Any]:
            return await visit("forecast", {"daily": [{"max_c": 27}] * days})

        async def rates(base: str, symbols: list[str]) -> dict[str, Any]:
            return await visit("rates", {"EUR": 0.92, "GBP": 0.79})

        async def flights(origin: str, destination: str, depart: str, back: str,
                          adults: int, cabin: str) -> dict[str, Any]:
            return await visit("flights", {"best": {"offer_id": "OF-1", "price_usd": 1240.0}})

        async def hotels(city: str, checkin: str, checkout: str, guests: int,
                         max_price_eur: float) -> dict[str, Any]:
            return await visit("hotels", {"best": {"name": "Alfama", "total_eur": 1330.0}})

        async def events(city: str, start: str, end: str, interests: list[str]) -> dict[str, Any]:
            return await visit("events", {"count": 12})

        async def quote(flight: float, hotel: float, eur_per_usd: float) -> dict[str, Any]:
            return await visit("quote", {"total_usd": round(flight + hotel / eur_per_usd, 2)})

        async def hold(offer: str, total_usd: float) -> dict[str, Any]:
            return await visit("hold", {"hold_id": "H-1"})

        for fn in (locate, forecast, rates, flights, hotels, events, quote):
            catalog.tool(f"trip.{fn.__name__}")(fn)
        catalog.tool("trip.hold", idempotent=False)(hold)
        return catalog


@dataclass
class Measured:
    first_call_s: list[float] = field(default_factory=list)
    end_to_end_s: list[float] = field(default_factory=list)


def plan_tokens() -> list[str]:
    text = json.dumps(PLAN)
    return [text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


def generation_s(provider: str, tokens: int, pace_s: float, first_s: float) -> float:
    """How long the streamed answer takes to arrive: the first-token latency, then every
    event after the first (OpenAI: a role chunk, the tokens, finish, usage, [DONE];
    Anthropic: message_start, block start, the tokens, block stop, message_delta, stop)."""
    events = tokens + (4 if provider == "openai" else 5)
    return first_s + (events - 1) * pace_s


async def one_run(provider: str, streamed: bool, tokens_per_s: float, first_s: float,
                  scale: float) -> tuple[float, float]:
    """One run: (seconds to the first tool call, seconds end to end)."""
    from tests.llm_servers import FakeAnthropicServer, FakeOpenAIServer

    pace = 1 / tokens_per_s
    tokens = plan_tokens()
    world = World(scale)
    server: FakeOpenAIServer | FakeAnthropicServer
    client: LLMClient
    if provider == "openai":
        server = FakeOpenAIServer().start()
        client = OpenAICompatibleClient(base_url=server.base_url, model="bench", timeout_s=120)
        if streamed:
            server.stream_answer(tokens, delay_s=pace, first_delay_s=first_s)
        else:
            server.answer(json.dumps(PLAN),
                          delay_s=generation_s(provider, len(tokens), pace, first_s))
    else:
        server = FakeAnthropicServer().start()
        client = AnthropicClient(model="bench", base_url=server.base_url, timeout_s=120)
        if streamed:
            server.stream_tool_use(tokens, delay_s=pace, first_delay_s=first_s)
        else:
            server.answer_tool_use(PLAN,
                                   delay_s=generation_s(provider, len(tokens), pace, first_s))
    config = OrchestratorConfig(stream_plan=streamed, synthesis_enabled=False,
                                store_url="memory://", llm_max_retries=0)
    orch = Orchestrator(world.catalog(), llm=client, config=config, registry=CollectorRegistry())
    try:
        started = time.perf_counter()
        result = await orch.arun("Plan a week in Lisbon for two in June, and hold the flight")
        ended = time.perf_counter()
    finally:
        await orch.aclose()
        await client.aclose()
        server.stop()
    if result.status != "succeeded" or sorted(world.calls) != sorted(TOOL_MS):
        raise RuntimeError(f"the benchmark run did not succeed: {result.status} {result.error}")
    assert world.first_call is not None
    return world.first_call - started, ended - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens-per-s", type=float, default=50.0,
                        help="how fast the model writes (default 50 tokens/s)")
    parser.add_argument("--first-token-s", type=float, default=0.4,
                        help="latency before the first token (default 0.4 s)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per configuration")
    parser.add_argument("--providers", default="openai,anthropic")
    common.add_report_arguments(parser)
    args = common.parse_args(parser, argv)
    scale = 1.0
    if args.quick:
        args.tokens_per_s, args.first_token_s, args.repeats, scale = 1000.0, 0.05, 1, 0.1
    providers = [p for p in args.providers.split(",") if p]
    measured: dict[tuple[str, bool], Measured] = {}
    for _ in range(args.repeats):  # interleaved: drift on the machine hits both alike
        for provider in providers:
            for streamed in (False, True):
                first, total = asyncio.run(one_run(provider, streamed, args.tokens_per_s,
                                                   args.first_token_s, scale))
                entry = measured.setdefault((provider, streamed), Measured())
                entry.first_call_s.append(first)
                entry.end_to_end_s.append(total)

    tokens = len(plan_tokens())
    rows = []
    for provider in providers:
        whole, streamed_run = measured[(provider, False)], measured[(provider, True)]
        w_first, w_total = common.median(whole.first_call_s), common.median(whole.end_to_end_s)
        s_first = common.median(streamed_run.first_call_s)
        s_total = common.median(streamed_run.end_to_end_s)
        print(f"{provider:9} whole:    first tool call {w_first:6.2f} s, end to end "
              f"{w_total:6.2f} s")
        print(f"{provider:9} streamed: first tool call {s_first:6.2f} s, end to end "
              f"{s_total:6.2f} s (first call {w_first / s_first:.1f}× sooner, "
              f"{w_total - s_total:.2f} s less end to end)")
        rows.append([provider, "whole", f"{w_first:.2f}", f"{w_total:.2f}", "—"])
        rows.append([provider, "streamed", f"{s_first:.2f}", f"{s_total:.2f}",
                     f"first call {w_first / s_first:.1f}× sooner, "
                     f"{w_total - s_total:.2f} s ({(w_total - s_total) / w_total:.0%}) "
                     "less end to end"])
    if args.no_report:
        return 0
    facts = common.machine_facts()
    argv_shown = list(argv if argv is not None else sys.argv[1:])
    critical_ms = TOOL_MS["flights"] + TOOL_MS["quote"] + TOOL_MS["hold"]
    floors = ", ".join(
        f"{p} {generation_s(p, tokens, 1 / args.tokens_per_s, args.first_token_s) + TOOL_MS['hold'] / 1000 * scale:.2f} s"
        for p in providers)
    body = common.section_preamble(
        "Streaming plan execution: time to the first tool call", "streaming_plan",
        argv_shown, facts)
    body += (
        f"\nThe plan ({len(PLAN['steps'])} steps, {tokens} tokens of ~{CHARS_PER_TOKEN} "
        f"characters) is written at {args.tokens_per_s:g} tokens/s after a "
        f"{args.first_token_s:g} s first-token latency by a loopback server speaking each "
        "provider's protocol; *whole* asks for it with `stream_plan=False` (the server "
        "answers in one piece after the time the stream takes), *streamed* with the "
        "default. Tools are in-process with remote-API latencies "
        f"({min(TOOL_MS.values()) * scale:g}–{max(TOOL_MS.values()) * scale:g} ms; "
        f"critical path of the tools {critical_ms * scale:g} ms); one of them (the "
        "booking hold) has a side effect and waits for the whole plan in both. Synthesis "
        f"off in both. Medians of {args.repeats} run(s) each.\n\n")
    body += common.md_table(
        ["provider", "plan", "first tool call (s)", "end to end (s)", "streamed vs whole"],
        rows)
    body += (
        "\n\nWhat it means: the first call starts once the first step has streamed "
        "(its object closed) instead of after the last token, and the searches run while "
        "the model is still writing the rest, so end to end shrinks by about the part of "
        "the tool work that fits under the stream. What cannot move: the call with a side "
        "effect, after the plan is validated, and whatever depends on it — so the floor of "
        f"the streamed runs is the end of the stream plus the hold ({floors}).\n")
    common.write_section(args.report, "streaming_plan", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
