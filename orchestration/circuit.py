"""Circuit breakers: a tool that keeps failing is left alone until it has had time to recover.

Without a breaker, every run that needs a tool which is down pays for finding out: each
attempt waits for its timeout (or a 5xx), resilience retries it with backoff, and a
service handling many requests piles them all up on the same dead tool. A breaker per
tool remembers what the last calls found and answers for the tool while it is down:

======== ==================================================================================
closed   calls go through; ``failure_threshold`` consecutive failures within ``window_s``
         (transport faults — refused, dropped, timed out — and 5xx answers) open it
open     calls are refused at once, nothing is sent: the attempt fails with
         ``CIRCUIT_OPEN`` (retryable, ``retry_after_s`` = what is left of the cool-down)
half_open once ``cool_down_s`` has passed, up to ``half_open_max_calls`` calls at a time
         go through as probes; a probe that succeeds closes the breaker, one that fails
         opens it again for another cool-down; other calls meanwhile are refused
======== ==================================================================================

What counts: a failure is a call that got no answer (``CONNECTION_ERROR``, ``TIMEOUT``
from the transport), a plain 5xx answer, or a tool's own structured ``SERVICE_ERROR``
marked retryable (it says it is struggling); an answer of any other kind — a 4xx, a
tool's input error, a structured error marked ``retryable: false`` (its considered
answer, even with a 503), data — proves the tool is up and counts as a success. A rate
limit (429) counts as neither (the tool is up but busy), and so does a call the engine
itself stopped (a budget, the re-send guard, a fenced attempt) or one that waited in
vain for a free connection of this process's pool (``POOL_TIMEOUT``: nothing reached
the tool, so it says nothing of it).

Scope: one :class:`CircuitBreakers` per orchestrator (every run of it, every event loop)
and one per ``dagwright worker`` process on the Temporal backend; a breaker is per tool
(every capability of the tool shares it). Settings are the ``ORCH_CIRCUIT_*`` defaults,
overridden by the catalog's ``circuit:`` mapping on a tool or a capability
(``circuit: false`` turns the breaker off for it). Time is the injected
:class:`~orchestration.clock.Clock`'s ``now()``, so tests drive it with a
:class:`~orchestration.clock.ManualClock`.

A step that meets an open breaker fails fast unless the breaker's cool-down ends within
``max_wait_s`` (default 0: never waits) and within the step's deadline: then resilience
waits for it and tries again, as a probe (``executors/layers/resilience.py``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestration._overrides import apply_overrides
from orchestration.clock import Clock
from orchestration.protocol import ErrorCategory, ErrorSource, StepError

if TYPE_CHECKING:
    from orchestration.capability import Capability
    from orchestration.config import OrchestratorConfig

__all__ = [
    "CIRCUIT_STATE_VALUES",
    "CircuitBreaker",
    "CircuitBreakers",
    "CircuitSettings",
    "CircuitState",
    "CircuitTransition",
    "Permit",
    "check_circuit_overrides",
    "failure_kind",
]

CircuitState = Literal["closed", "open", "half_open"]
CIRCUIT_STATE_VALUES: dict[str, int] = {"closed": 0, "open": 1, "half_open": 2}
"""The value of each state in the ``orchestration_circuit_state`` gauge."""


class CircuitSettings(BaseModel):
    """How one tool's breaker behaves (``ORCH_CIRCUIT_*``, then the catalog's ``circuit:``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    failure_threshold: int = Field(5, ge=1)
    window_s: float = Field(60.0, gt=0)
    cool_down_s: float = Field(30.0, gt=0)
    half_open_max_calls: int = Field(1, ge=1)
    max_wait_s: float = Field(0.0, ge=0)

    @classmethod
    def from_config(cls, config: OrchestratorConfig) -> CircuitSettings:
        return cls(enabled=config.circuit_enabled,
                   failure_threshold=config.circuit_failure_threshold,
                   window_s=config.circuit_window_s, cool_down_s=config.circuit_cool_down_s,
                   half_open_max_calls=config.circuit_half_open_max_calls,
                   max_wait_s=config.circuit_max_wait_s)

    def with_overrides(self, overrides: Mapping[str, Any], *, source: str) -> CircuitSettings:
        """These settings with a catalog's ``circuit:`` mapping laid over them; a bad key
        or value raises :class:`~orchestration.errors.ConfigError` naming ``source``."""
        if not overrides:
            return self
        return apply_overrides(self, overrides, source=source, what="circuit")

    @classmethod
    def for_capability(cls, config: OrchestratorConfig, capability: Capability) -> CircuitSettings:
        return cls.from_config(config).with_overrides(
            capability.circuit, source=f"capability {capability.key!r} circuit")


def check_circuit_overrides(overrides: Mapping[str, Any], *, source: str) -> None:
    """Raise :class:`~orchestration.errors.ConfigError` naming ``source`` if ``overrides``
    is not a valid partial :class:`CircuitSettings` (the catalog calls this at load)."""
    CircuitSettings().with_overrides(overrides, source=source)


def failure_kind(error: StepError | None) -> Literal["failure", "success", "neutral"]:
    """What a call's outcome tells the breaker about its tool (see the module docstring)."""
    if error is None:
        return "success"
    if error.source is ErrorSource.ENGINE or error.details.get("still_running"):
        return "neutral"  # the engine stopped the call, or refused to start it again
    if error.code == "POOL_TIMEOUT":
        return "neutral"  # this process had no free connection: nothing reached the tool
    category = error.category
    if category is ErrorCategory.RATE_LIMIT:
        return "neutral"
    if category in (ErrorCategory.CONNECTION_ERROR, ErrorCategory.TIMEOUT):
        return "failure" if error.source is ErrorSource.TRANSPORT else "success"
    if error.source is ErrorSource.ENVELOPE:
        # the tool's own structured error: a service error it calls transient says it is
        # struggling; one marked retryable=false is its considered answer (some tools
        # wrap "not found" in a 503), which proves it is up
        return ("failure" if category is ErrorCategory.SERVICE_ERROR and error.retryable
                else "success")
    if (error.http_status or 0) >= 500:
        return "failure"
    return "success"


@dataclass(frozen=True, slots=True)
class CircuitTransition:
    """A breaker changed state. ``before`` None: the breaker was just made (closed)."""

    tool: str
    before: CircuitState | None
    after: CircuitState
    failures: int
    cool_down_s: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "before": self.before, "after": self.after,
                "failures": self.failures, "cool_down_s": self.cool_down_s,
                "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CircuitTransition:
        return cls(tool=str(data["tool"]), before=data.get("before"), after=data["after"],
                   failures=int(data.get("failures") or 0),
                   cool_down_s=float(data.get("cool_down_s") or 0.0),
                   reason=str(data.get("reason") or ""))


Listener = Callable[[CircuitTransition], None]


@dataclass(slots=True)
class Permit:
    """Leave to make one call: a probe when the breaker is half-open. ``transitions``
    are the changes admitting it caused (open → half_open)."""

    breaker: CircuitBreaker | None
    settings: CircuitSettings
    probe: bool = False
    transitions: tuple[CircuitTransition, ...] = ()
    settled: bool = False


class CircuitBreaker:
    """The breaker of one tool: its state and the failures that count toward opening it.

    Thread-safe: one breaker serves every run of the orchestrator, sync runs on loops of
    their own in other threads included.
    """

    def __init__(self, tool: str, clock: Clock, notify: Listener) -> None:
        self.tool = tool
        self._clock = clock
        self._notify = notify
        self._lock = threading.Lock()
        self.state: CircuitState = "closed"
        self._failures: deque[float] = deque()
        self._last_failure = ""
        self._opened_at = 0.0
        self._cool_down_s = 0.0
        self._probes = 0

    @property
    def failures(self) -> int:
        """Consecutive failures counted toward opening (closed) or since it opened."""
        return len(self._failures)

    def admit(self, settings: CircuitSettings) -> Permit | StepError:
        """Leave for one call, or the ``CIRCUIT_OPEN`` error that refuses it."""
        changed: list[CircuitTransition] = []
        with self._lock:
            now = self._clock.now()
            if self.state == "open":
                left = self._opened_at + self._cool_down_s - now
                if left > 0:
                    return self._refusal(left)
                changed.append(self._move("half_open", "the cool-down ended: probing"))
            if self.state == "half_open":
                if self._probes >= settings.half_open_max_calls:
                    return self._refusal(None)
                self._probes += 1
                permit = Permit(self, settings, probe=True, transitions=tuple(changed))
            else:
                permit = Permit(self, settings)
        for transition in changed:
            self._notify(transition)
        return permit

    def record(self, permit: Permit, error: StepError | None) -> tuple[CircuitTransition, ...]:
        """The outcome of an admitted call; the state changes it caused."""
        if permit.settled:
            return ()
        permit.settled = True
        kind = failure_kind(error)
        settings = permit.settings
        changed: list[CircuitTransition] = []
        with self._lock:
            now = self._clock.now()
            if permit.probe:
                self._probes = max(0, self._probes - 1)
                if self.state == "half_open" and kind == "success":
                    self._failures.clear()
                    changed.append(self._move("closed", "a probe call succeeded"))
                elif self.state == "half_open" and kind == "failure":
                    assert error is not None
                    self._open(now, settings, error)
                    changed.append(self._move("open", f"a probe call failed ({error.code})"))
            elif self.state == "closed":
                if kind == "success":
                    self._failures.clear()
                elif kind == "failure":
                    assert error is not None
                    self._failures.append(now)
                    while self._failures and self._failures[0] < now - settings.window_s:
                        self._failures.popleft()
                    self._last_failure = error.code
                    if len(self._failures) >= settings.failure_threshold:
                        self._open(now, settings, error)
                        changed.append(self._move(
                            "open", f"{len(self._failures)} consecutive failures within "
                                    f"{settings.window_s:g}s (last: {error.code})"))
            # a call admitted while closed that ends after the breaker opened (another
            # call tripped it) changes nothing: only probes decide when it closes again
        for transition in changed:
            self._notify(transition)
        return (*permit.transitions, *changed)

    def abandon(self, permit: Permit) -> None:
        """An admitted call ended without an outcome (cancelled): free its probe slot."""
        if permit.settled:
            return
        permit.settled = True
        if permit.probe:
            with self._lock:
                self._probes = max(0, self._probes - 1)

    # --- inside the lock ------------------------------------------------------------------
    def _open(self, now: float, settings: CircuitSettings, error: StepError | None) -> None:
        self._opened_at = now
        self._cool_down_s = settings.cool_down_s
        if error is not None:
            self._last_failure = error.code

    def _move(self, state: CircuitState, reason: str) -> CircuitTransition:
        before, self.state = self.state, state
        return CircuitTransition(self.tool, before, state, len(self._failures),
                                 self._cool_down_s, reason)

    def _refusal(self, retry_after_s: float | None) -> StepError:
        if retry_after_s is None:
            when = "a probe call is in flight to see whether it recovered"
        else:
            when = (f"it is tried again in {retry_after_s:.1f}s (cool-down "
                    f"{self._cool_down_s:g}s)")
        return StepError(
            category=ErrorCategory.CIRCUIT_OPEN, code="CIRCUIT_OPEN",
            message=f"not sent: the circuit breaker of tool {self.tool!r} is {self.state} "
                    f"after {max(1, len(self._failures))} consecutive failure(s) (last: "
                    f"{self._last_failure or 'unknown'}); {when}",
            source=ErrorSource.ENGINE, retryable=True, request_sent=False,
            retry_after_s=None if retry_after_s is None else round(retry_after_s, 3),
            details={"tool": self.tool, "circuit_state": self.state,
                     "cool_down_s": self._cool_down_s, "last_failure": self._last_failure})


class CircuitBreakers:
    """Every tool's breaker, made on a tool's first call; shared by all runs that use it.

    ``listener`` hears every state change (and the making of each breaker, with
    ``before`` None): the observer turns them into the ``orchestration_circuit_state``
    gauge, a counter and log lines.
    """

    def __init__(self, config: OrchestratorConfig, *, clock: Clock | None = None,
                 listener: Listener | None = None) -> None:
        self._defaults = CircuitSettings.from_config(config)
        self._clock = clock or Clock()
        self._listener = listener
        self._lock = threading.Lock()
        self._breakers: dict[str, CircuitBreaker] = {}
        self._settings: dict[str, tuple[Capability, CircuitSettings]] = {}

    def settings_for(self, capability: Capability) -> CircuitSettings:
        """The capability's settings (defaults with its ``circuit:`` overrides), worked
        out once per capability object."""
        found = self._settings.get(capability.key)
        if found is None or found[0] is not capability:
            settings = self._defaults.with_overrides(
                capability.circuit, source=f"capability {capability.key!r} circuit")
            found = self._settings[capability.key] = (capability, settings)
        return found[1]

    def breaker(self, tool: str) -> CircuitBreaker:
        """The breaker of ``tool`` (made closed on first use)."""
        found = self._breakers.get(tool)
        if found is not None:
            return found
        with self._lock:
            found = self._breakers.get(tool)
            if found is None:
                found = self._breakers[tool] = CircuitBreaker(tool, self._clock, self._notify)
                made = True
            else:
                made = False
        if made:
            self._notify(CircuitTransition(tool, None, "closed", 0, 0.0, "first call"))
        return found

    def admit(self, capability: Capability) -> Permit | StepError:
        """Leave for one call of ``capability``, or the ``CIRCUIT_OPEN`` refusal. A
        capability whose breaker is off gets a permit that records nothing."""
        settings = self.settings_for(capability)
        if not settings.enabled:
            return Permit(None, settings)
        return self.breaker(capability.tool).admit(settings)

    @staticmethod
    def record(permit: Permit, error: StepError | None) -> tuple[CircuitTransition, ...]:
        """The outcome of a call made with ``permit``; the state changes it caused."""
        if permit.breaker is None:
            return ()
        return permit.breaker.record(permit, error)

    @staticmethod
    def abandon(permit: Permit) -> None:
        if permit.breaker is not None:
            permit.breaker.abandon(permit)

    def states(self) -> dict[str, CircuitState]:
        """Each tool's breaker state, for tools called so far."""
        return {tool: breaker.state for tool, breaker in sorted(self._breakers.items())}

    def _notify(self, transition: CircuitTransition) -> None:
        if self._listener is not None:
            self._listener(transition)
