"""Runs started in the background, followed, cancelled on purpose or interrupted.

What ``dagwright serve`` is built on, through the public API: ``astart`` answers once the
run is recorded while it goes on; one run id never runs twice; ``acancel`` ends a run
``cancelled`` for good and keeps what its stopped steps did; ``RunHandle.interrupt`` (a
shutdown) leaves it resumable instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orchestration import (
    Approval,
    ApprovalError,
    Catalog,
    ConfigError,
    Orchestrator,
    OrchestratorConfig,
    RunLeased,
    RunNotFound,
    ScriptedLLM,
)


class Gate:
    """Python tools that block until the test lets them go, and count their calls."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.calls: dict[str, int] = {}

    def catalog(self) -> Catalog:
        catalog = Catalog()

        @catalog.tool("data.fetch")
        async def fetch(key: str) -> dict[str, Any]:
            """Read a value (idempotent)."""
            self.calls["fetch"] = self.calls.get("fetch", 0) + 1
            return {"value": len(key)}

        @catalog.tool("data.slow")
        async def slow(key: str) -> dict[str, Any]:
            """Read a value slowly (idempotent); waits for the gate."""
            self.calls["slow"] = self.calls.get("slow", 0) + 1
            self.entered.set()
            await self.release.wait()
            return {"value": key}

        async def pay(amount: float) -> dict[str, Any]:
            """Pay (a side effect); waits for the gate."""
            self.calls["pay"] = self.calls.get("pay", 0) + 1
            self.entered.set()
            await self.release.wait()
            return {"paid": amount}

        catalog.add_function(pay, tool="bank", capability="pay", idempotent=False)

        @catalog.tool("bank.transfer", requires_approval=True)
        async def transfer(amount: float) -> dict[str, Any]:
            """Move money: a person approves first."""
            self.calls["transfer"] = self.calls.get("transfer", 0) + 1
            return {"sent": amount}

        return catalog


def slow_plan(slow_tool: str = "slow", capability: str = "data") -> dict[str, Any]:
    """first → slow → after; slow waits for the gate."""
    held = ({"tool": capability, "capability": slow_tool, "params": {"key": "abc"}}
            if slow_tool == "slow" else {"tool": "bank", "capability": "pay", "params": {"amount": 5}})
    return {"steps": [
        {"id": "first", "tool": "data", "capability": "fetch", "params": {"key": "ab"}},
        {"id": "held", **held, "depends_on": ["first"]},
        {"id": "after", "tool": "data", "capability": "fetch", "params": {"key": "x"},
         "depends_on": ["held"]},
    ]}


def orchestrator(gate: Gate, store: str = "memory://") -> Orchestrator:
    return Orchestrator(catalog=gate.catalog(), llm=ScriptedLLM(["unused"]),
                        config=OrchestratorConfig(store_url=store, synthesis_enabled=False))


async def test_astart_answers_once_the_run_is_recorded_and_the_run_goes_on() -> None:
    gate = Gate()
    orch = orchestrator(gate)
    handle = await orch.astart("go", plan=slow_plan(), run_id="bg-1")
    assert handle.run_id == "bg-1" and not handle.done()
    await asyncio.wait_for(gate.entered.wait(), 5)
    assert orch.active_run("bg-1") is handle
    live = await orch.aget_run("bg-1")  # the live state, not the batched store
    assert live is not None and live.status == "running"
    assert live.steps["first"].status == "succeeded" and "held" not in live.steps

    gate.release.set()
    result = await asyncio.wait_for(handle.result(), 5)
    assert result.status == "succeeded" and orch.active_run("bg-1") is None
    stored = await orch.aget_run("bg-1")
    assert stored is not None and stored.status == "succeeded"
    await orch.aclose()


async def test_one_run_id_never_runs_twice_and_a_finished_id_returns_its_result() -> None:
    gate = Gate()
    orch = orchestrator(gate)
    handle = await orch.astart("go", plan=slow_plan(), run_id="twice")
    await asyncio.wait_for(gate.entered.wait(), 5)
    with pytest.raises(RunLeased):
        await orch.astart("go", plan=slow_plan(), run_id="twice")
    gate.release.set()
    await handle.result()
    again = await orch.astart("go", plan=slow_plan(), run_id="twice")
    assert again.done() and (await again.result()).status == "succeeded"
    assert gate.calls == {"fetch": 2, "slow": 1}  # nothing ran a second time
    await orch.aclose()


async def test_events_of_a_running_execution_are_replayed_to_a_late_reader() -> None:
    gate = Gate()
    orch = orchestrator(gate)
    handle = await orch.astart("go", plan=slow_plan(), run_id="follow")
    await asyncio.wait_for(gate.entered.wait(), 5)

    async def read() -> list[tuple[int, str]]:
        return [(e.seq, e.type) async for e in handle.events()]

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.05)
    gate.release.set()
    seen = await asyncio.wait_for(reader, 5)
    assert [seq for seq, _ in seen] == list(range(1, len(seen) + 1))
    assert seen[0][1] == "plan_ready" and seen[-1][1] == "run_finished"
    await handle.result()  # the store is written when the execution ends
    stored = await orch.aget_events("follow")
    assert [(e.seq, e.type) for e in stored] == seen
    await orch.aclose()


async def test_acancel_ends_the_run_cancelled_and_keeps_what_the_steps_did() -> None:
    gate = Gate()
    orch = orchestrator(gate)
    handle = await orch.astart("go", plan=slow_plan(), run_id="stop-me")
    await asyncio.wait_for(gate.entered.wait(), 5)

    result = await asyncio.wait_for(orch.acancel("stop-me", reason="by the test"), 5)

    assert result.status == "cancelled" and result.error == "cancelled: by the test"
    assert result.steps["first"].status == "succeeded"
    held = result.steps["held"]
    assert held.status == "cancelled" and held.error is not None and held.error.code == "RUN_CANCELLED"
    assert result.steps["after"].status == "skipped"
    assert "cancelled" in (result.steps["after"].skipped_reason or "")
    assert (await handle.result()).status == "cancelled"
    events = await orch.aget_events("stop-me")
    assert events[-1].type == "run_finished" and events[-1].data["status"] == "cancelled"
    # final: a resume changes nothing and sends nothing
    resumed = await orch.aresume("stop-me")
    assert resumed.status == "cancelled" and gate.calls == {"fetch": 1, "slow": 1}
    await orch.aclose()


async def test_a_side_effect_in_flight_when_cancelled_is_unknown_not_cancelled() -> None:
    gate = Gate()
    orch = orchestrator(gate)
    await orch.astart("pay", plan=slow_plan("pay"), run_id="pay-stop")
    await asyncio.wait_for(gate.entered.wait(), 5)
    result = await orch.acancel("pay-stop")
    held = result.steps["held"]
    assert held.status == "unknown" and held.error is not None
    assert held.error.code == "OUTCOME_UNKNOWN" and held.error.details["request"] == {"amount": 5}
    await orch.aclose()


async def test_a_run_waiting_for_approval_is_cancelled_in_the_store() -> None:
    gate = Gate()
    orch = orchestrator(gate)
    plan = {"steps": [{"id": "send", "tool": "bank", "capability": "transfer",
                       "params": {"amount": 3}}]}
    paused = await orch.arun("send", plan=plan, run_id="waits")
    assert paused.status == "awaiting_approval"
    result = await orch.acancel("waits")
    assert result.status == "cancelled" and result.pending_approvals == []
    assert result.steps["send"].status == "cancelled"
    with pytest.raises(ApprovalError, match="not waiting for approval"):
        await orch.aresume("waits", approvals={"send": Approval(approved=True)})
    assert "transfer" not in gate.calls
    with pytest.raises(RunNotFound):
        await orch.acancel("no-such-run")
    await orch.aclose()


async def test_interrupt_leaves_the_run_resumable_and_resume_finishes_it(tmp_path: Path) -> None:
    gate = Gate()
    store = f"sqlite:///{tmp_path}/runs.db"
    orch = orchestrator(gate, store)
    handle = await orch.astart("go", plan=slow_plan(), run_id="shutdown")
    await asyncio.wait_for(gate.entered.wait(), 5)
    await handle.interrupt()
    assert orch.active_run("shutdown") is None
    stored = await orch.aget_run("shutdown")
    assert stored is not None and stored.status == "running" and "held" not in stored.steps
    assert [r.run_id for r in await orch.alist_runs(status="running")] == ["shutdown"]

    gate.release.set()
    resumed = await orch.astart_resume("shutdown")
    result = await resumed.result()
    assert result.status == "succeeded" and gate.calls == {"fetch": 2, "slow": 2}
    await orch.aclose()


async def test_astart_resume_applies_a_decision_and_raises_before_executing() -> None:
    gate = Gate()
    orch = orchestrator(gate)
    plan = {"steps": [{"id": "send", "tool": "bank", "capability": "transfer",
                       "params": {"amount": 3}}]}
    await orch.arun("send", plan=plan, run_id="decide")
    with pytest.raises(ApprovalError, match="is not waiting for approval; pending"):
        await orch.astart_resume("decide", approvals={"other": Approval(approved=True)})
    handle = await orch.astart_resume("decide", approvals={"send": Approval(approved=True)})
    result = await handle.result()
    assert result.status == "succeeded" and gate.calls == {"transfer": 1}
    await orch.aclose()


async def test_a_rejected_step_is_recorded_in_the_store_not_only_returned(tmp_path: Path) -> None:
    gate = Gate()
    store = f"sqlite:///{tmp_path}/runs.db"
    plan = {"steps": [
        {"id": "send", "tool": "bank", "capability": "transfer", "params": {"amount": 3}},
        {"id": "after", "tool": "data", "capability": "fetch", "params": {"key": "{{send.sent}}"}},
    ]}
    await orchestrator(gate, store).arun("send", plan=plan, run_id="rejected")
    events: list[str] = []
    returned = await orchestrator(gate, store).aresume(
        "rejected", approvals={"send": Approval(approved=False, note="no")},
        on_event=lambda e: events.append(f"{e.type}:{e.data.get('step_id')}:{e.data.get('status')}"))
    stored = await orchestrator(gate, store).aget_run("rejected")  # another process's view
    assert stored is not None and stored.to_dict() == returned.to_dict()
    assert stored.steps["send"].status == "failed" and stored.steps["send"].error is not None
    assert stored.steps["send"].error.code == "REJECTED"
    assert events[0] == "step_finished:send:failed"  # a reader of the events sees it too


@pytest.mark.parametrize("call", ["astart", "astart_resume", "acancel"])
async def test_background_runs_on_the_temporal_backend_say_they_are_local_only(
    call: str,
) -> None:
    """The workflow owns a Temporal run: starting it in the background or cancelling it
    from this process would act on a copy, so the call refuses and says what to use."""
    orch = Orchestrator(catalog=Catalog(), llm=ScriptedLLM([]),
                        config=OrchestratorConfig(backend="temporal"))
    with pytest.raises(ConfigError, match="ORCH_BACKEND=temporal") as caught:
        await getattr(orch, call)("run-1")
    assert call in str(caught.value) and "arun/aresume" in str(caught.value)
