"""Streaming plan execution through the public API, against real loopback SSE servers.

Each test runs ``Orchestrator.arun`` with an OpenAI-compatible or Anthropic client whose
server streams the plan a few characters at a time (tests/llm_servers.py), and in-process
tools that record when they are called. What is asserted is what a user sees: when
tools are called relative to the end of the plan stream (``plan_ready``), which calls
are never made, the events, the result and what the run store holds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from executors._early import may_start_early
from orchestration import Catalog, Orchestrator, OrchestratorConfig, RunEvent, ScriptedLLM, ToolFailed
from orchestration.capability import Capability
from orchestration.llm.anthropic import AnthropicClient
from orchestration.llm.base import LLMClient, LLMRequest, LLMResponse
from orchestration.llm.openai_compat import OpenAICompatibleClient
from tests.llm_servers import FakeAnthropicServer, FakeOpenAIServer, ReceivedRequest

CHUNK = 6  # characters a streamed piece: a token or two
PACE_S = 0.01  # between pieces


@dataclass
class World:
    """In-process tools that record when they are called, and the run's events."""

    calls: list[tuple[str, dict[str, Any], float]] = field(default_factory=list)
    ended: dict[str, float] = field(default_factory=dict)
    events: list[tuple[RunEvent, float]] = field(default_factory=list)
    first_call: asyncio.Event = field(default_factory=asyncio.Event)

    def catalog(self) -> Catalog:
        catalog = Catalog()
        world = self

        def called(name: str, **params: Any) -> None:
            world.calls.append((name, params, time.monotonic()))
            world.first_call.set()

        @catalog.tool("geo.locate")
        async def locate(city: str) -> dict[str, Any]:
            """Coordinates of a city."""
            called("geo.locate", city=city)
            await asyncio.sleep(0.05)
            world.ended[f"geo.locate:{city}"] = time.monotonic()
            return {"lat": 35.68, "lon": 139.69}

        @catalog.tool("weather.now")
        async def now(lat: float, lon: float) -> dict[str, Any]:
            """Current weather at a place."""
            called("weather.now", lat=lat, lon=lon)
            return {"temp_c": 21.5}

        @catalog.tool("wait.sleep")
        async def sleep(seconds: float, tag: str) -> dict[str, Any]:
            """Waits, then answers with the tag."""
            called("wait.sleep", seconds=seconds, tag=tag)
            await asyncio.sleep(seconds)
            world.ended[f"wait.sleep:{tag}"] = time.monotonic()
            return {"tag": tag, "value": 41}

        @catalog.tool("math.add")
        def add(a: int, b: int) -> dict[str, Any]:
            """a + b."""
            called("math.add", a=a, b=b)
            return {"sum": a + b}

        @catalog.tool("flaky.fail")
        def fail(why: str) -> dict[str, Any]:
            """Always fails."""
            called("flaky.fail", why=why)
            raise ToolFailed(code="BROKEN", message=f"broken: {why}", retryable=False)

        @catalog.tool("vault.open", requires_approval=True)
        def vault(door: str) -> dict[str, Any]:
            """Opens a door (a person approves each call)."""
            called("vault.open", door=door)
            return {"open": True}

        @catalog.tool("ledger.write", idempotent=False)
        def write(note: str) -> dict[str, Any]:
            """Writes a note (a side effect)."""
            called("ledger.write", note=note)
            return {"ok": True}

        return catalog

    def record(self, event: RunEvent) -> None:
        self.events.append((event, time.monotonic()))

    def called(self, name: str, **match: Any) -> list[tuple[dict[str, Any], float]]:
        return [(p, at) for n, p, at in self.calls
                if n == name and all(p.get(k) == v for k, v in match.items())]

    def types(self) -> list[str]:
        return [e.type for e, _ in self.events]

    def at(self, kind: str, step_id: str | None = None) -> float:
        return next(t for e, t in self.events
                    if e.type == kind and (step_id is None or e.data.get("step_id") == step_id))


@dataclass
class Provider:
    """A loopback LLM server and the client that talks to it."""

    name: str
    server: FakeOpenAIServer | FakeAnthropicServer
    client: LLMClient

    def stream_plan(self, plan: dict[str, Any] | str, *, cut_after: int | None = None) -> None:
        text = plan if isinstance(plan, str) else json.dumps(plan)
        pieces = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)]
        if isinstance(self.server, FakeOpenAIServer):
            self.server.stream_answer(pieces, delay_s=PACE_S, cut_after=cut_after)
        else:
            assert cut_after is None
            self.server.stream_tool_use(pieces, delay_s=PACE_S)

    def answer_plan(self, plan: dict[str, Any]) -> None:
        if isinstance(self.server, FakeOpenAIServer):
            self.server.answer(json.dumps(plan))
        else:
            self.server.answer_tool_use(plan)

    @property
    def requests(self) -> list[ReceivedRequest]:
        return self.server.requests


def last_user_text(request: ReceivedRequest) -> str:
    content = request.body["messages"][-1]["content"]
    return content if isinstance(content, str) else json.dumps(content)


@pytest.fixture(params=["openai", "anthropic"])
async def provider(request: pytest.FixtureRequest) -> AsyncIterator[Provider]:
    if request.param == "openai":
        with FakeOpenAIServer() as server:
            client: LLMClient = OpenAICompatibleClient(base_url=server.base_url,
                                                       model="gpt-test", timeout_s=10)
            yield Provider("openai", server, client)
            await client.aclose()
    else:
        with FakeAnthropicServer() as server:
            client = AnthropicClient(model="claude-test", base_url=server.base_url,
                                     timeout_s=10)
            yield Provider("anthropic", server, client)
            await client.aclose()


@pytest.fixture
async def openai_provider() -> AsyncIterator[Provider]:
    with FakeOpenAIServer() as server:
        client = OpenAICompatibleClient(base_url=server.base_url, model="gpt-test",
                                        timeout_s=10)
        yield Provider("openai", server, client)
        await client.aclose()


@pytest.fixture
def world() -> Iterator[World]:
    yield World()


def orchestrator(world: World, llm: LLMClient, **config: Any) -> Orchestrator:
    settings: dict[str, Any] = {"synthesis_enabled": False, "store_url": "memory://",
                                "llm_max_retries": 0, **config}
    return Orchestrator(world.catalog(), llm=llm, config=OrchestratorConfig(**settings),
                        registry=CollectorRegistry())


def step(sid: str, capability: str, **params: Any) -> dict[str, Any]:
    tool, name = capability.split(".")
    return {"id": sid, "tool": tool, "capability": name, "params": params}


def padding(count: int) -> list[dict[str, Any]]:
    """Independent quick steps that make the plan (and its stream) longer."""
    return [step(f"pad{i}", "math.add", a=i, b=100 + i) for i in range(count)]


def planned(plan: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The steps of a result's plan as (id, params): what was planned, in plan order."""
    assert plan is not None
    return [(s["id"], s["params"]) for s in plan["steps"]]


# --- the first tool call starts before the plan stream ends -----------------------------


async def test_first_tool_call_starts_while_the_plan_still_streams(
    provider: Provider, world: World
) -> None:
    plan = {"steps": [
        step("where", "geo.locate", city="Tokyo"),
        step("note", "ledger.write", note="asked about Tokyo"),
        step("wx", "weather.now", lat="{{where.lat}}", lon="{{where.lon}}"),
        *padding(6),
    ]}
    provider.stream_plan(plan)
    result = await orchestrator(world, provider.client).arun("weather in Tokyo?",
                                                             on_event=world.record)

    assert result.status == "succeeded", result.error
    assert result.warnings == []
    assert provider.requests[0].body["stream"] is True
    plan_ready = world.at("plan_ready")
    assert world.types().count("plan_ready") == 1
    ((_, located),) = world.called("geo.locate", city="Tokyo")
    # the first step was called well before the plan stream (≈0.5 s) ended
    assert located < plan_ready - 0.15, (located, plan_ready)
    assert world.types().index("step_started") < world.types().index("plan_ready")
    # its dependent waited for it, got its output, and also ran before the end
    ((params, weather),) = world.called("weather.now")
    assert params == {"lat": 35.68, "lon": 139.69}
    assert world.ended["geo.locate:Tokyo"] <= weather < plan_ready
    # the call with a side effect waited for the whole, validated plan
    ((_, wrote),) = world.called("ledger.write")
    assert wrote > plan_ready
    assert result.steps["note"].status == "succeeded"
    assert set(result.steps) == {s["id"] for s in plan["steps"]}
    assert planned(result.plan) == planned(plan)


async def test_a_step_that_uses_a_later_step_waits_for_it(
    openai_provider: Provider, world: World
) -> None:
    plan = {"steps": [
        step("total", "math.add", a="{{later.value}}", b=1),
        *padding(3),
        step("later", "wait.sleep", seconds=0.2, tag="later"),
        *padding(4)[3:],
    ]}
    openai_provider.stream_plan(plan)
    result = await orchestrator(world, openai_provider.client).arun("41 + 1",
                                                                    on_event=world.record)

    assert result.status == "succeeded", result.error
    assert result.steps["total"].output == {"sum": 42}
    ((params, added),) = world.called("math.add", b=1)
    assert params["a"] == 41 and added >= world.ended["wait.sleep:later"]
    ((_, slept),) = world.called("wait.sleep")
    assert slept < world.at("plan_ready")  # started as soon as it streamed


# --- a plan that turns out invalid ----------------------------------------------------------


async def test_invalid_plan_at_the_end_cancels_early_steps_and_retries_with_feedback(
    provider: Provider, world: World
) -> None:
    rejected = {"steps": [
        step("slow", "wait.sleep", seconds=5, tag="first attempt"),
        step("note", "ledger.write", note="side effect"),
        *padding(3),
        step("tail", "math.add", a="{{ghost.value}}", b=1),  # ghost never comes
    ]}
    accepted = {"steps": [
        step("slow", "wait.sleep", seconds=0.01, tag="second attempt"),
        step("note", "ledger.write", note="side effect"),
    ]}
    provider.stream_plan(rejected)
    provider.stream_plan(accepted)
    started = time.monotonic()
    result = await orchestrator(world, provider.client).arun("do it", on_event=world.record)

    assert result.status == "succeeded", result.error
    assert time.monotonic() - started < 4  # the 5 s call was cancelled, not awaited
    # the first attempt's idempotent step started early, then was stopped: it never ended
    ((_, first_slow),) = world.called("wait.sleep", tag="first attempt")
    assert "wait.sleep:first attempt" not in world.ended
    # the side-effect step was never sent for the rejected plan: once, after plan_ready
    ((_, wrote),) = world.called("ledger.write")
    assert first_slow < world.at("plan_discarded") < world.at("plan_ready") < wrote
    # the planner asked again with the validation feedback
    assert len(provider.requests) == 2
    feedback = last_user_text(provider.requests[1])
    assert "ghost" in feedback and "unknown step" in feedback
    discarded = next(e for e, _ in world.events if e.type == "plan_discarded")
    assert discarded.data["steps"][0] == "slow"
    assert "plan attempt 1 was rejected (validation)" in discarded.data["reason"]
    # what stands is the accepted plan and its results only
    assert planned(result.plan) == planned(accepted) and set(result.steps) == {"slow", "note"}
    assert result.steps["slow"].output == {"tag": "second attempt", "value": 41}
    assert len(result.steps["slow"].attempts) == 1
    (warning,) = result.warnings
    assert "plan attempt 1 was rejected" in warning and "slow" in warning
    assert result.usage.by_purpose["plan"]["calls"] == 2


async def test_a_step_that_dooms_the_plan_stops_early_work_before_the_stream_ends(
    openai_provider: Provider, world: World
) -> None:
    rejected = {"steps": [
        step("slow", "wait.sleep", seconds=5, tag="doomed"),
        {"id": "bad", "tool": "nope", "capability": "nothing", "params": {}},
        step("after", "wait.sleep", seconds=0.01, tag="after the bad step"),
        *padding(8),
    ]}
    openai_provider.stream_plan(rejected)
    openai_provider.stream_plan({"steps": [step("ok", "math.add", a=1, b=2)]})
    result = await orchestrator(world, openai_provider.client).arun("x",
                                                                    on_event=world.record)

    assert result.status == "succeeded", result.error
    discarded = next(e for e, _ in world.events if e.type == "plan_discarded")
    assert discarded.data["steps"] == ["slow"]
    assert "cannot be accepted" in discarded.data["reason"]
    assert "nope" in discarded.data["reason"]
    # nothing of the doomed answer started after the bad step: not even the valid one
    assert world.called("wait.sleep", tag="after the bad step") == []
    assert "wait.sleep:doomed" not in world.ended
    assert set(result.steps) == {"ok"}


async def test_a_stream_cut_midway_fails_planning_and_drops_early_steps(
    openai_provider: Provider, world: World
) -> None:
    plan = {"steps": [step("slow", "wait.sleep", seconds=5, tag="cut"), *padding(10)]}
    openai_provider.stream_plan(plan, cut_after=40)
    result = await orchestrator(world, openai_provider.client).arun("x",
                                                                    on_event=world.record)

    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("planning failed")
    assert result.plan is None and result.steps == {}
    assert world.called("wait.sleep")  # it had started
    assert "wait.sleep:cut" not in world.ended
    discarded = next(e for e, _ in world.events if e.type == "plan_discarded")
    assert discarded.data["steps"][0] == "slow"
    assert world.types()[-1] == "run_finished"


async def test_an_early_step_that_fails_skips_its_dependents(
    openai_provider: Provider, world: World
) -> None:
    plan = {"steps": [
        step("broken", "flaky.fail", why="no"),
        step("after", "math.add", a="{{broken.sum}}", b=1),
        *padding(4),
    ]}
    openai_provider.stream_plan(plan)
    result = await orchestrator(world, openai_provider.client).arun("x",
                                                                    on_event=world.record)

    assert result.status == "partial"
    assert result.steps["broken"].status == "failed"
    assert result.steps["after"].status == "skipped"
    assert "upstream step 'broken' failed" in (result.steps["after"].skipped_reason or "")
    assert world.called("math.add", b=1) == []
    ((_, failed_at),) = world.called("flaky.fail")
    assert failed_at < world.at("plan_ready")


async def test_a_step_needing_approval_waits_for_the_plan_then_for_a_person(
    openai_provider: Provider, world: World
) -> None:
    plan = {"steps": [step("door", "vault.open", door="front"),
                      step("where", "geo.locate", city="Oslo"), *padding(6)]}
    openai_provider.stream_plan(plan)
    result = await orchestrator(world, openai_provider.client).arun("x",
                                                                    on_event=world.record)

    assert result.status == "awaiting_approval"
    assert [p.step_id for p in result.pending_approvals] == ["door"]
    assert world.called("vault.open") == []
    assert world.at("step_started", "where") < world.at("plan_ready")
    assert world.at("plan_ready") < world.at("approval_required", "door")


@pytest.mark.parametrize(("fields", "early"), [
    ({"url": "http://127.0.0.1:9/x", "method": "GET"}, True),
    ({"url": "http://127.0.0.1:9/x", "method": "POST"}, False),
    ({"url": "http://127.0.0.1:9/x", "method": "POST", "idempotent": True}, True),
    ({"url": "http://127.0.0.1:9/x", "method": "PUT"}, False),  # idempotent, changes state
    ({"url": "http://127.0.0.1:9/x", "method": "DELETE"}, False),
    ({"url": "http://127.0.0.1:9/x", "method": "GET", "requires_approval": True}, False),
    ({"function": lambda: 1}, True),
    ({"function": lambda: 1, "idempotent": False}, False),
])
def test_which_capabilities_start_before_the_plan_is_whole(
    fields: dict[str, Any], early: bool
) -> None:
    assert may_start_early(Capability(tool="t", name="c", **fields)) is early


# --- when plans are not streamed ------------------------------------------------------------


class WholeAnswers:
    """A client that cannot stream (as the Temporal backend's activity LLM)."""

    def __init__(self, inner: LLMClient) -> None:
        self.inner = inner

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("how", ["client cannot stream", "ORCH_STREAM_PLAN off",
                                 "plans are approved"])
async def test_the_plan_is_asked_whole_when_it_is_not_streamed(
    openai_provider: Provider, world: World, how: str
) -> None:
    plan = {"steps": [step("where", "geo.locate", city="Paris"), *padding(2)]}
    openai_provider.answer_plan(plan)
    llm: LLMClient = openai_provider.client
    config: dict[str, Any] = {}
    if how == "client cannot stream":
        llm = WholeAnswers(llm)
    elif how == "ORCH_STREAM_PLAN off":
        config["stream_plan"] = False
    else:
        config["approve_plans"] = True
    orch = orchestrator(world, llm, **config)
    result = await orch.arun("x", on_event=world.record)
    if how == "plans are approved":
        assert result.status == "awaiting_approval" and world.calls == []
    else:
        assert result.status == "succeeded", result.error
        assert world.types()[0] == "plan_ready"
    assert "stream" not in openai_provider.requests[0].body


# --- durability and cancellation --------------------------------------------------------------


async def test_a_run_stopped_mid_stream_is_resumable_and_its_early_work_is_not_stored(
    openai_provider: Provider, world: World, tmp_path: Path
) -> None:
    plan = {"steps": [step("slow", "wait.sleep", seconds=5, tag="interrupted"),
                      *padding(12)]}
    openai_provider.stream_plan(plan)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    orch = orchestrator(world, openai_provider.client, store_url=store)
    handle = await orch.astart("x", run_id="stream-1")
    await asyncio.wait_for(world.first_call.wait(), 5)
    await handle.interrupt()  # as a process shutdown would

    again = orchestrator(world, openai_provider.client, store_url=store)
    stored = await again.aget_run("stream-1")
    assert stored is not None
    assert stored.status == "running" and stored.plan is None and stored.steps == {}

    quick = {"steps": [step("slow", "wait.sleep", seconds=0.01, tag="resumed"),
                       *padding(2)]}
    openai_provider.stream_plan(quick)
    result = await again.aresume("stream-1")
    assert result.status == "succeeded", result.error
    assert planned(result.plan) == planned(quick)
    assert result.steps["slow"].output["tag"] == "resumed"
    reread = await orchestrator(world, openai_provider.client,
                                store_url=store).aget_run("stream-1")
    assert reread is not None and set(reread.steps) == {"slow", "pad0", "pad1"}
    await orch.aclose()
    await again.aclose()


async def test_cancelling_a_run_mid_stream_ends_it_cancelled_without_steps(
    openai_provider: Provider, world: World
) -> None:
    plan = {"steps": [step("slow", "wait.sleep", seconds=5, tag="cancelled"),
                      *padding(12)]}
    openai_provider.stream_plan(plan)
    orch = orchestrator(world, openai_provider.client)
    handle = await orch.astart("x", run_id="stream-cancel", on_event=world.record)
    await asyncio.wait_for(world.first_call.wait(), 5)
    result = await orch.acancel("stream-cancel", reason="changed my mind")

    assert result.status == "cancelled"
    assert result.plan is None and result.steps == {}
    assert "wait.sleep:cancelled" not in world.ended
    assert any("changed my mind" in w or "stopped" in w for w in result.warnings)
    assert (await handle.result()).status == "cancelled"


def test_the_cli_progress_says_a_plan_was_discarded_and_drops_its_steps() -> None:
    import io

    from orchestration.cli import Progress

    out = io.StringIO()
    progress = Progress(out)
    for seq, (kind, data) in enumerate([
        ("step_started", {"step_id": "slow", "tool": "wait", "capability": "sleep"}),
        ("plan_discarded", {"reason": "plan attempt 1 was rejected", "steps": ["slow"]}),
        ("plan_ready", {"steps": 1, "plan": {}}),
    ], start=1):
        progress(RunEvent(run_id="r", seq=seq, type=kind, at=0.0, data=data))
    assert progress.rows == {}
    assert "plan discarded: plan attempt 1 was rejected" in out.getvalue()


# --- a plan that arrives whole, or changes after it streamed ------------------------------


async def test_a_plan_that_arrives_in_one_burst_is_validated_whole_before_any_step(
    world: World,
) -> None:
    # every piece is there before the planner looks (a model that answers at once): the
    # answer is handed over as one piece marked last, and nothing is read step by step
    plan = {"steps": [step("where", "geo.locate", city="Oslo"),
                      step("wx", "weather.now", lat="{{where.lat}}", lon="{{where.lon}}"),
                      *padding(4)]}
    llm = ScriptedLLM([plan], chunk_chars=CHUNK)
    result = await orchestrator(world, llm).arun("weather in Oslo?", on_event=world.record)

    assert result.status == "succeeded", result.error
    types = world.types()
    assert types[0] == "plan_ready" and types.count("step_started") == 6
    assert result.warnings == []


async def test_a_step_that_changed_after_it_streamed_is_checked_again(world: World) -> None:
    # two "steps" keys: the stream reads the first array, the final parse keeps the
    # last, whose step of the same id refers to a step that does not exist. The checks
    # the streamed step passed must not stand for the changed one.
    first = json.dumps([step("a", "wait.sleep", seconds=0.01, tag="streamed")])
    changed = json.dumps([step("a", "math.add", a="{{ghost.value}}", b=1)])
    answer = '{"steps": ' + first + ', "steps": ' + changed + "}"
    llm = ScriptedLLM([answer, {"steps": [step("ok", "math.add", a=1, b=2)]}],
                      chunk_chars=CHUNK, chunk_delay_s=0.002)
    result = await orchestrator(world, llm).arun("x", on_event=world.record)

    assert result.status == "succeeded", result.error
    feedback = llm.requests[1].messages[-1]["content"]
    assert "ghost" in feedback and "unknown step" in feedback
    assert "plan_discarded" in world.types()
    assert set(result.steps) == {"ok"}
