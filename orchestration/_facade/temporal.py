"""The facade's delegation to Temporal (``ORCH_BACKEND=temporal``, the temporal extra):
runs execute on ``dagwright worker`` processes; the facade starts, follows and decides
them through :class:`~orchestration.temporal._client.TemporalRuns`, made on first use so
that the local backend never imports the SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestration._extras import needs_extra
from orchestration._facade.parts import FacadeParts
from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError
from orchestration.llm._factory import client_from_config
from orchestration.llm.base import LLMClient, LLMRequest, LLMResponse

if TYPE_CHECKING:
    from orchestration.temporal._client import TemporalRuns


def llm_for(config: OrchestratorConfig) -> LLMClient:
    """The client the config describes; on Temporal, where the workers make a run's LLM
    calls, a client without LLM settings of its own gets :class:`LLMOnTheWorkers`
    instead of a :class:`ConfigError` (``dagwright resume`` on a Temporal client)."""
    try:
        return client_from_config(config)
    except ConfigError as exc:
        if config.backend != "temporal":
            raise
        return LLMOnTheWorkers(str(exc))


class LLMOnTheWorkers:
    """The LLM of a Temporal client without LLM settings: its runs never call it (the
    workers do); a call made here (``plan``) raises what the settings lack."""

    provider = "temporal"
    model: str | None = None

    def __init__(self, missing: str) -> None:
        self.missing = missing

    async def complete(self, request: LLMRequest) -> LLMResponse:
        raise ConfigError(f"this process has no LLM of its own ({self.missing}); with "
                          "ORCH_BACKEND=temporal the workers make the runs' LLM calls")

    async def aclose(self) -> None:
        return None


class TemporalBackend:
    def __init__(self, parts: FacadeParts) -> None:
        self._parts = parts
        self._runs: TemporalRuns | None = None

    @property
    def enabled(self) -> bool:
        return self._parts.config.backend == "temporal"

    def runs(self) -> TemporalRuns:
        """The client side of runs on Temporal workers: the same engine runs them there."""
        if self._runs is None:
            try:
                from orchestration.temporal._client import TemporalRuns
            except ImportError as exc:
                raise ConfigError(needs_extra("ORCH_BACKEND=temporal", "temporal",
                                              exc.name)) from exc
            self._runs = TemporalRuns(self._parts.config, store=self._parts.store)
        return self._runs

    def forget_loop(self) -> None:
        """The current event loop ends: drop the client connection made on it."""
        if self._runs is not None:
            self._runs.forget_loop()

    def refuse_credentials(self, credentials: object) -> None:
        """Per-run credentials never cross into a Temporal workflow: its inputs, updates
        and activity arguments are the workflow's history, which Temporal records and
        keeps for the namespace's retention period (docs/context.md says why and what to
        do instead)."""
        if self.enabled and credentials:
            raise ConfigError(
                "per-run credentials are refused on the Temporal backend "
                "(ORCH_BACKEND=temporal): the only way from a client to the worker that "
                "sends a call is the workflow's history, which Temporal records and keeps, "
                "and these credentials are never recorded. Give the workers the tools' "
                "credentials (the catalog's credentials:/headers:, ORCH_OPENAPI_CREDENTIALS), "
                "or run runs that carry a user's own credentials on the local backend "
                "(docs/context.md#credentials-on-temporal)")

    def refuse(self, what: str) -> None:
        """Background runs and cancellation (what ``dagwright serve`` uses) are run by
        this process; on Temporal the workflow owns the run."""
        if self.enabled:
            raise ConfigError(
                f"{what} runs on the local backend only, and ORCH_BACKEND=temporal is set: "
                "use arun/aresume (the run executes on the workers), or unset ORCH_BACKEND "
                "for this process")
