"""The checks of what a caller hands the facade before anything is recorded: the query,
a caller-chosen run id, a synthesis strategy. Each refusal is an :class:`InvalidInput`
naming what is wrong."""

from __future__ import annotations

import re
import typing

from orchestration.errors import InvalidInput
from orchestration.result import SynthesisStrategy

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
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"the query is not valid Unicode: character {exc.start} is a lone surrogate "
            f"({query[exc.start]!r}, often a JSON escape such as \\ud800 without its pair); "
            "send the text with that character removed or completed") from None


_STRATEGIES: tuple[str, ...] = typing.get_args(SynthesisStrategy)


def check_synthesis(strategy: str | None) -> SynthesisStrategy | None:
    """A caller's choice of synthesis strategy, or :class:`InvalidInput` naming the ones
    there are."""
    if strategy is None or strategy in _STRATEGIES:
        return strategy  # type: ignore[return-value]
    raise InvalidInput(f"synthesis {strategy!r} is not a synthesis strategy; use one of "
                       f"{', '.join(_STRATEGIES)}")
