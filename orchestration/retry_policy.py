"""The retry policy of transport-fault retries: how many, how long to wait, reproducibly.

A :class:`RetryPolicy` is built from the global settings (``ORCH_RETRY_*``), then
overridden by the capability's catalog ``retry`` mapping, then by the step's own
``retry`` mapping: the most specific setting wins. Delays are a pure function of the
policy, the retry number and a key, so a run's waits can be predicted and asserted;
jitter comes from a ``random.Random`` seeded from ``(seed, key, retry)`` and never from
the global generator, so the same seed always gives the same delays.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestration._overrides import apply_overrides

if TYPE_CHECKING:
    from orchestration.config import OrchestratorConfig

__all__ = ["Backoff", "RetryPolicy", "check_overrides"]

Backoff = Literal["constant", "linear", "exponential"]

_MAX_EXPONENT = 62  # 2**62 × any sane base is far past every cap; avoids float overflow


class RetryPolicy(BaseModel):
    """How a call is retried after a transport fault, with the same parameters.

    ``max_attempts`` counts tries of the call (1 = never retry). The delay before retry
    ``n`` (1 = the first retry) is ``base_delay_s`` (constant), ``base_delay_s × n``
    (linear) or ``base_delay_s × 2**(n-1)`` (exponential), capped at ``max_delay_s``;
    ``jitter`` spreads it by up to ± that fraction (still capped). A rate limit's
    ``Retry-After`` wait replaces the backoff, capped at ``retry_after_cap_s``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(3, ge=1)
    backoff: Backoff = "exponential"
    base_delay_s: float = Field(0.2, ge=0)
    max_delay_s: float = Field(5.0, ge=0)
    jitter: float = Field(0.0, ge=0, le=1)
    seed: int = 0
    retry_after_cap_s: float = Field(30.0, ge=0)

    @classmethod
    def from_config(cls, config: OrchestratorConfig) -> RetryPolicy:
        """The global policy from the ``retry_*`` settings."""
        return cls(
            max_attempts=config.retry_max_attempts,
            backoff=config.retry_backoff,
            base_delay_s=config.retry_base_delay_s,
            max_delay_s=config.retry_max_delay_s,
            jitter=config.retry_jitter,
            seed=config.retry_seed,
            retry_after_cap_s=config.retry_after_cap_s,
        )

    @classmethod
    def for_call(
        cls, config: OrchestratorConfig, *overrides: tuple[Mapping[str, Any] | None, str]
    ) -> RetryPolicy:
        """The global policy with each ``(overrides, source)`` laid over it in order, the
        most specific last (capability, then step): the most specific setting wins."""
        policy = cls.from_config(config)
        for values, source in overrides:
            if values:
                policy = policy.with_overrides(values, source=source)
        return policy

    @classmethod
    def for_llm(cls, config: OrchestratorConfig) -> RetryPolicy:
        """The policy of LLM calls: ``llm_max_retries`` retries of a rate limit, timeout,
        dropped connection or 5xx, with exponential backoff from 0.5 s capped at 10 s."""
        return cls(max_attempts=config.llm_max_retries + 1, backoff="exponential",
                   base_delay_s=0.5, max_delay_s=10.0, seed=config.retry_seed,
                   retry_after_cap_s=config.retry_after_cap_s)

    def with_overrides(self, overrides: Mapping[str, Any], *, source: str) -> RetryPolicy:
        """This policy with ``overrides`` applied; a bad key or value raises
        :class:`~orchestration.errors.ConfigError` naming ``source`` (e.g. the
        capability), so a typo in a catalog is reported where it was made instead of
        being silently ignored."""
        if not overrides:
            return self
        return apply_overrides(self, overrides, source=source, what="retry")

    @property
    def max_retries(self) -> int:
        """Retries allowed after the first try."""
        return self.max_attempts - 1

    def backoff_delay(self, retry: int) -> float:
        """The capped delay before retry ``retry`` (1-based), without jitter."""
        if retry < 1:
            raise ValueError(f"retry numbers start at 1, got {retry}")
        if self.backoff == "constant":
            raw = self.base_delay_s
        elif self.backoff == "linear":
            raw = self.base_delay_s * retry
        else:
            raw = math.ldexp(self.base_delay_s, min(retry - 1, _MAX_EXPONENT))
        return min(self.max_delay_s, raw)

    def delay(self, retry: int, key: str = "") -> float:
        """The delay before retry ``retry`` of the call identified by ``key``.

        With jitter, the spread is drawn from a generator seeded by ``(seed, key, retry)``:
        the same inputs always give the same delay, different keys (steps) differ.
        """
        base = self.backoff_delay(retry)
        if self.jitter == 0 or base == 0:
            return base
        rng = random.Random(f"{self.seed}\x00{key}\x00{retry}")
        factor = 1.0 + self.jitter * (2.0 * rng.random() - 1.0)
        return min(self.max_delay_s, base * factor)

    def rate_limit_delay(self, retry_after_s: float | None, retry: int, key: str = "") -> float:
        """The wait after a rate limit: the server's ``Retry-After`` (capped), else backoff."""
        if retry_after_s is None:
            return self.delay(retry, key)
        return min(self.retry_after_cap_s, max(0.0, retry_after_s))


def check_overrides(overrides: Mapping[str, Any], *, source: str) -> None:
    """Raise :class:`ConfigError` naming ``source`` if ``overrides`` is not a valid
    partial retry policy; the catalog and plan validation call this at load time."""
    RetryPolicy().with_overrides(overrides, source=source)
