"""What became of a side-effect call, kept in the run store where the run can read it
even when Temporal could not hear it: the claim that lets a worker send, the run's fence
that stops it, and the answer the tool gave.

A call with a side effect and no idempotency key whose activity Temporal gave up on (its
worker was paused, cut off, or the server was down past the heartbeat timeout) would be
``OUTCOME_UNKNOWN``: Temporal drops an answer that arrives for an activity it no longer
holds ("Activity not found on completion"). So the worker also writes down, in the run
store the run's workers share, each such call as it goes:

* ``claim`` — written right before the first byte leaves, after the worker proved to
  Temporal it is the live attempt: ``sent by <worker>``. Whoever writes an attempt's
  claim first wins (the store keeps the first value of a key);
* ``answer`` — the classified answer (:func:`~orchestration.temporal._payloads.call_result_to_payload`),
  written as soon as the tool answered, before the activity reports to Temporal.

When the run learns that the activity ended without an answer, it reconciles
(:meth:`CallLedger.settle`, in the ``dagwright.reconcile_call`` activity): it writes the
claim ``fenced by the run`` — so a worker that has not claimed the call yet never will,
and does not send — and reads what is there. An answer recorded is the call's outcome,
as if Temporal had delivered it: a payment known to have succeeded is not ``unknown``.

The attempt is named by its Temporal workflow run id and activity id, which both the
worker (``activity.info()``) and the workflow (``ActivityError.activity_id``) know. The
entries live in the store's keyed values of the run (:meth:`RunStore.put_payloads`: the
first value of a key is kept, committed durably, deleted with the run), beside the large
payloads of the run, under keys that cannot be a payload's SHA-256.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestration.capability import Capability
from orchestration.store import RunStore

__all__ = ["CallLedger", "CallSlot", "Settled", "is_unknown_if_lost"]

_FENCED = b"fenced by the run"
_SENT_BY = "sent by "


def is_unknown_if_lost(capability: Capability) -> bool:
    """Whether a call of ``capability`` whose activity ends without an answer may not be
    sent again: it has a side effect and no idempotency key (``OUTCOME_UNKNOWN``)."""
    return not capability.is_idempotent and not capability.idempotency_key_header


@dataclass(frozen=True, slots=True)
class CallSlot:
    """One attempt of one side-effect call: its run, and its activity in Temporal."""

    run_id: str
    """The dagwright run id (the workflow id): the entries are deleted with the run."""
    workflow_run_id: str
    activity_id: str

    def key(self, entry: str) -> str:
        return f"call:{self.workflow_run_id}:{self.activity_id}:{entry}"

    def to_payload(self) -> dict[str, str]:
        return {"run_id": self.run_id, "workflow_run_id": self.workflow_run_id,
                "activity_id": self.activity_id}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> CallSlot:
        return cls(str(payload["run_id"]), str(payload["workflow_run_id"]),
                   str(payload["activity_id"]))


@dataclass(frozen=True, slots=True)
class Settled:
    """What the run store knew of a call once the run fenced it."""

    answer: dict[str, Any] | None
    """The classified answer the tool gave (None: none recorded)."""
    claimed_by: str | None
    """The worker that sent it (None: no worker had claimed it; the run's fence now
    stops any worker that shares this run store from sending it)."""

    def to_payload(self) -> dict[str, Any]:
        return {"answer": self.answer, "claimed_by": self.claimed_by}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Settled:
        return cls(payload.get("answer"), payload.get("claimed_by"))


class CallLedger:
    """The claims, fences and answers of side-effect calls, in one run store."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    async def claim(self, slot: CallSlot, worker: str) -> str | None:
        """Claim the attempt for ``worker`` before it sends; None when the claim is
        ``worker``'s, else what holds it (the run's fence) — the call must not leave."""
        mine = f"{_SENT_BY}{worker}".encode()
        key = slot.key("claim")
        await self.store.put_payloads(slot.run_id, {key: mine})
        held = (await self.store.get_payloads(slot.run_id, [key])).get(key)
        if held == mine:
            return None
        return (held or b"nothing (the claim was not kept)").decode(errors="replace")

    async def record(self, slot: CallSlot, answer: dict[str, Any]) -> None:
        """Keep the tool's classified answer (written once: a repeat is a no-op)."""
        data = json.dumps(answer, separators=(",", ":")).encode()
        await self.store.put_payloads(slot.run_id, {slot.key("answer"): data})

    async def settle(self, slot: CallSlot) -> Settled:
        """Fence the attempt (no worker may claim it from now on), then what the store
        knows of it: the worker that claimed it, and the answer if one was recorded."""
        claim_key, answer_key = slot.key("claim"), slot.key("answer")
        await self.store.put_payloads(slot.run_id, {claim_key: _FENCED})
        kept = await self.store.get_payloads(slot.run_id, [claim_key, answer_key])
        claim = kept.get(claim_key, b"")
        claimed_by = (claim.decode(errors="replace").removeprefix(_SENT_BY)
                      if claim and claim != _FENCED else None)
        answer = kept.get(answer_key)
        return Settled(json.loads(answer) if answer is not None else None, claimed_by)
