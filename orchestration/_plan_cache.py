"""The plan cache (``ORCH_PLAN_CACHE``): a query asked again reuses the plan of an earlier
run instead of paying a planning LLM call.

A plan is reused only where it was made for the same thing. Its key is a digest of:

* the query, normalised — Unicode NFKC and runs of whitespace made one space. Case and
  punctuation are kept: a plan carries the query's values verbatim ("TSLA", "Zürich"),
  so two queries that differ in them are two plans;
* the catalog's :attr:`~orchestration.catalog.Catalog.fingerprint` — a changed catalog
  (a capability added, a schema changed, a refreshed MCP listing) is a new key, so its
  old plans are never served again (they expire);
* the planner's model and :meth:`~planners.planner.Planner.prompt_version` (templates,
  rendering, the settings that shape the prompt, dagwright's version);
* the tenant, when the run has one (its context's ``tenant``): plans are never shared
  across tenants.

A follow-up in a session (a run whose planner sees the session's earlier runs) is not
looked up and not kept: its plan answers the history as well as the query (see
``RunEngine._cached_plan``).

Plans are kept in the run store (table ``dagwright_plan_cache``, every process of the
store shares them) for ``ORCH_PLAN_CACHE_TTL_S`` after they were made. Only the plan of
a run that **succeeded** without a repair round is kept: a plan whose steps failed may
have been the planner's mistake, and would repeat it for as long as it lived. A kept
plan is validated again against the run's catalog when it is read; one that does not
validate is a miss. The run says where its plan came from (``plan_source="cache"``, the
``plan_ready`` event's ``source``, the run span's ``dagwright.plan.source`` and a
``plan_cache`` span event), and ``orchestration_plan_cache_total`` counts lookups by
outcome.

The store failing never fails a run here: a lookup that fails is a miss, a plan that
cannot be kept is not kept; both are logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import unicodedata
from dataclasses import dataclass

from orchestration.catalog import Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import PlanValidationError, StoreError
from orchestration.plan import Plan, ValidatedPlan, validate_plan
from orchestration.store._base import CachedPlan, PlanCacheStore
from orchestration.telemetry._observer import Observer

__all__ = ["CacheKey", "PlanCache", "normalise_query"]

log = logging.getLogger("dagwright.plan_cache")

_KEY_VERSION = "1"
"""Bumped if what goes into a key changes, so keys of another kind never match."""


def normalise_query(query: str) -> str:
    """The form of a query its cached plan is found by (see the module docstring)."""
    return " ".join(unicodedata.normalize("NFKC", query).split())


@dataclass(frozen=True, slots=True)
class CacheKey:
    """What a cached plan is valid for, and its digest (``digest``)."""

    query: str
    catalog: str
    model: str
    prompt_version: str
    tenant: str | None

    @property
    def digest(self) -> str:
        parts = [_KEY_VERSION, self.query, self.catalog, self.model, self.prompt_version,
                 self.tenant or ""]
        text = json.dumps(parts, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class PlanCache:
    """Plans kept in a run store for reuse; one per orchestrator, used by every run."""

    def __init__(self, store: object, observer: Observer) -> None:
        self._store = store if isinstance(store, PlanCacheStore) else None
        self._observer = observer
        self._warned = False

    @staticmethod
    def key(query: str, catalog: Catalog, model: str, prompt_version: str,
            tenant: str | None = None) -> CacheKey:
        """The key of ``query``'s plan under this catalog, model and prompt (and tenant)."""
        return CacheKey(normalise_query(query), catalog.fingerprint, model, prompt_version,
                        tenant)

    async def lookup(self, key: CacheKey, catalog: Catalog, config: OrchestratorConfig, *,
                     run_id: str, now: float) -> ValidatedPlan | None:
        """The plan kept under ``key``, validated against ``catalog``; None on a miss."""
        store = self._usable()
        if store is None:
            return None
        try:
            entry = await store.get_cached_plan(key.digest, now=now)
        except StoreError as exc:
            log.warning("plan cache lookup failed (planning instead): %s", exc)
            self._observer.plan_cache(run_id, "error")
            return None
        if entry is None:
            self._observer.plan_cache(run_id, "miss")
            return None
        try:
            plan = Plan.model_validate_json(entry.plan_json)
            validated = validate_plan(plan, catalog, max_steps=config.max_plan_steps,
                                      max_depth=config.max_json_depth)
        except (ValueError, PlanValidationError) as exc:
            log.warning("a cached plan no longer validates (planning instead): %s", exc)
            self._observer.plan_cache(run_id, "invalid")
            return None
        self._observer.plan_cache(run_id, "hit", age_s=max(0.0, now - entry.created_at))
        return validated

    async def keep(self, key: CacheKey, plan: Plan | dict[str, object], *, run_id: str,
                   now: float, ttl_s: float) -> None:
        """Keep ``plan`` under ``key`` for ``ttl_s`` seconds from ``now``."""
        store = self._usable()
        if store is None:
            return
        model = plan if isinstance(plan, Plan) else Plan.model_validate(plan)
        entry = CachedPlan(
            key=key.digest, plan_json=model.model_dump_json(exclude_none=True),
            query=key.query, catalog=key.catalog, model=key.model,
            prompt_version=key.prompt_version, tenant=key.tenant, created_at=now,
            expires_at=now + ttl_s)
        try:
            await store.put_cached_plan(entry, now=now)
        except StoreError as exc:
            log.warning("plan cache: the plan of run %s was not kept: %s", run_id, exc)
            self._observer.plan_cache(run_id, "error")
            return
        self._observer.plan_cache(run_id, "stored")

    def _usable(self) -> PlanCacheStore | None:
        if self._store is None and not self._warned:
            self._warned = True
            log.warning("ORCH_PLAN_CACHE is on but the run store keeps no plans (it has no "
                        "get_cached_plan/put_cached_plan): every run is planned")
        return self._store
