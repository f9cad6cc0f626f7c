"""The checks of what a caller hands the facade before anything is recorded: the query,
a caller-chosen run id, the run's context, credentials, session and limits, and a
synthesis strategy. Each refusal is an :class:`InvalidInput` naming what is wrong."""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from orchestration._text import describe_validation_error, not_unicode
from orchestration.catalog import Catalog
from orchestration.context import ContextValue, RunContext, check_context
from orchestration.credentials import Credentials, check_credentials
from orchestration.errors import InvalidInput
from orchestration.result import RunLimits, SynthesisStrategy
from orchestration.sessions import check_session_id

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
"""What a caller-chosen ``run_id`` may look like (it names files, URLs and log lines)."""
_RUN_ID = re.compile(RUN_ID_PATTERN)


def check_run_id(run_id: str) -> None:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise InvalidInput(f"run_id {run_id!r} is not usable: use 1-200 letters, digits, '_', "
                           "'.', ':' or '-', starting with a letter or digit")


def check_query(query: str) -> None:
    """A query is recorded and sent as UTF-8: text that cannot be (a lone surrogate, which
    a JSON escape such as \\ud800 decodes to) is refused here, naming where it is."""
    if not isinstance(query, str):
        raise InvalidInput(f"the query must be text, not {type(query).__name__}")
    problem = not_unicode("the query", query)
    if problem is not None:
        raise InvalidInput(problem)


def check_cancel_reason(reason: str) -> None:
    """A cancel reason is recorded: text that cannot be is refused before anything changes."""
    problem = not_unicode("the cancel reason", reason) if isinstance(reason, str) else (
        f"the cancel reason must be text, not {type(reason).__name__}")
    if problem is not None:
        raise InvalidInput(problem)


@dataclass(frozen=True)
class RunInputs:
    """What a caller gives a run besides its query, checked: who it is for (``context``),
    its per-run ``credentials`` (held by the run's services only), its ``session_id``
    and its ``limits``."""

    context: dict[str, ContextValue] | None = None
    credentials: dict[str, dict[str, str]] | None = None
    session_id: str | None = None
    limits: RunLimits | None = None

    def __repr__(self) -> str:  # never the credentials' values
        return (f"RunInputs(context={self.context!r}, credentials={sorted(self.credentials or {})}"
                f", session_id={self.session_id!r}, limits={self.limits!r})")


def check_inputs(
    catalog: Catalog,
    *,
    context: RunContext | Mapping[str, Any] | None = None,
    credentials: Credentials | None = None,
    session_id: str | None = None,
    limits: RunLimits | Mapping[str, Any] | None = None,
) -> RunInputs:
    """Every input of a run checked before anything is recorded or sent; the first that
    cannot be used is an :class:`InvalidInput` naming it (a credential by its name, never
    its value)."""
    if session_id is not None:
        check_session_id(session_id)
    if limits is not None and not isinstance(limits, RunLimits):
        try:
            limits = RunLimits.model_validate(limits)
        except ValidationError as exc:
            raise InvalidInput(f"limits: {describe_validation_error(exc, root='limits')}"
                               ) from None
    return RunInputs(context=check_context(context),
                     credentials=check_credentials(credentials, catalog),
                     session_id=session_id, limits=limits)


_STRATEGIES: tuple[str, ...] = typing.get_args(SynthesisStrategy)


def check_synthesis(strategy: str | None) -> SynthesisStrategy | None:
    """A caller's choice of synthesis strategy, or :class:`InvalidInput` naming the ones
    there are."""
    if strategy is None or strategy in _STRATEGIES:
        return strategy  # type: ignore[return-value]
    raise InvalidInput(f"synthesis {strategy!r} is not a synthesis strategy; use one of "
                       f"{', '.join(_STRATEGIES)}")
