"""Large values travel through Temporal by reference to the run store (claim-check).

Temporal refuses a payload above 2 MB (``PayloadLimitViolation``) and a gRPC message above
4 MB, and a history above 50 MB; a run's state, a tool's reply or a step's parameters can
be larger (a tool reply up to ``ORCH_MAX_RESPONSE_BYTES``, 10 MB by default; a run state is
the sum of its outputs). Every payload of at least ``ORCH_TEMPORAL_PAYLOAD_OFFLOAD_BYTES``
(128 KiB by default) — activity inputs and results, the workflow's result, query and
update answers — is written to the run store under its run id and content hash, and only
a reference (about 200 bytes) goes into the history. Whoever decodes it — a worker
replaying the history, a client reading the result — fetches it back from the store.

This is Temporal's own external-storage mechanism
(:class:`temporalio.converter.ExternalStorage`) with a driver that writes to the
:class:`~orchestration.store.RunStore`: clients and every worker of a task queue must
therefore share one run store (``ORCH_STORE_URL``: PostgreSQL across machines, a SQLite
file on one). A reference whose value is not in the reader's store is a
:class:`PayloadMissing` that names the store and the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from orchestration.errors import StoreError
from orchestration.store import RunStore
from orchestration.temporal._key_order import keeping_key_order

__all__ = ["DRIVER_NAME", "PayloadMissing", "RunStoreDriver", "with_payload_store"]

DRIVER_NAME = "dagwright-run-store"
_NO_RUN = "-"
"""Run id of a value stored outside any workflow (none in practice: every payload of a
run is encoded for its workflow)."""


class PayloadMissing(StoreError):
    """A Temporal history refers to a value the reader's run store does not hold."""


class RunStoreDriver(StorageDriver):
    """Keeps payloads in a :class:`RunStore`, keyed by run id and SHA-256 of their bytes
    (so a value written twice — a workflow task retried, a query repeated — is kept once,
    and is deleted with its run by ``ORCH_STORE_RETENTION_DAYS``)."""

    def __init__(self, store: RunStore) -> None:
        self.run_store = store
        self._opened = False
        self._opening = asyncio.Lock()

    def name(self) -> str:
        return DRIVER_NAME

    def type(self) -> str:
        return DRIVER_NAME

    async def _open(self) -> None:
        if not self._opened:
            async with self._opening:
                if not self._opened:
                    await self.run_store.open()  # opening an open store is a no-op
                    self._opened = True

    async def store(self, context: StorageDriverStoreContext,
                    payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        target = context.target
        run_id = (target.id if isinstance(target, StorageDriverWorkflowInfo) and target.id
                  else _NO_RUN)
        blobs = {}
        claims = []
        for payload in payloads:
            data = payload.SerializeToString(deterministic=True)
            key = hashlib.sha256(data).hexdigest()
            blobs[key] = data
            claims.append(StorageDriverClaim(claim_data={"run": run_id, "key": key,
                                                         "bytes": str(len(data))}))
        await self._open()
        await self.run_store.put_payloads(run_id, blobs)
        return claims

    async def retrieve(self, context: StorageDriverRetrieveContext,
                       claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        await self._open()
        by_run: dict[str, list[str]] = {}
        for claim in claims:
            by_run.setdefault(claim.claim_data["run"], []).append(claim.claim_data["key"])
        found: dict[tuple[str, str], bytes] = {}
        for run_id, keys in by_run.items():
            for key, data in (await self.run_store.get_payloads(run_id, keys)).items():
                found[(run_id, key)] = data
        payloads = []
        for claim in claims:
            run_id, key = claim.claim_data["run"], claim.claim_data["key"]
            kept = found.get((run_id, key))
            if kept is None:
                raise PayloadMissing(
                    f"run {run_id!r}: its Temporal history refers to a value "
                    f"({claim.claim_data.get('bytes', '?')} bytes, sha256 {key[:16]}…) kept in "
                    f"the run store, and the run store {self.run_store.url} does not hold it. "
                    "Clients and every worker of the task queue must use the same "
                    "ORCH_STORE_URL (PostgreSQL across machines); a run deleted by "
                    "ORCH_STORE_RETENTION_DAYS cannot be read back.")
            payload = Payload()
            payload.ParseFromString(kept)
            payloads.append(payload)
        return payloads


def with_payload_store(client: Client, store: RunStore, threshold_bytes: int) -> Client:
    """``client`` again, its data converter keeping every payload of at least
    ``threshold_bytes`` in ``store`` and the key order of every JSON payload
    (:mod:`orchestration.temporal._key_order`); a client already set up that way is
    returned as it is."""
    current = client.data_converter
    converter = keeping_key_order(current)
    if converter.external_storage is None:
        converter = dataclasses.replace(converter, external_storage=ExternalStorage(
            drivers=[RunStoreDriver(store)], payload_size_threshold=threshold_bytes))
    if converter is current:
        return client
    config = client.config()
    config["data_converter"] = converter
    return Client(**config)
