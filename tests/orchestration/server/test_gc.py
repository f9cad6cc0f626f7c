"""``tune_collector``, the call docs/serve.md gives a service that mounts the app itself:
a mode it does not know is refused, not taken for another one."""

from __future__ import annotations

import gc

import pytest

from orchestration.server import tune_collector


@pytest.mark.parametrize("mode", ["fast", "Throughput", "", "freeze"])
def test_an_unknown_mode_is_refused_and_the_collector_left_alone(mode: str) -> None:
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    with pytest.raises(ValueError, match="untouched, frozen, throughput"):
        tune_collector(mode)  # type: ignore[arg-type]
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == frozen


def test_untouched_leaves_the_collector_alone() -> None:
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    tune_collector("untouched")
    assert (gc.get_threshold(), gc.get_freeze_count()) == (thresholds, frozen)
