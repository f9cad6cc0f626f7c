"""What ``dagwright serve`` does with Python's garbage collector (``ORCH_SERVE_GC``).

A server runs many runs at once in one event loop, and every object a run keeps alive
while it waits on a model or a tool is walked by the collector's passes over and over:
measured with a thousand concurrent runs (``benchmarks/throughput.py``), the collector
took as much CPU as the runs' own work. Two changes, both standard for long-lived
services, win most of it back:

* ``frozen`` — :func:`gc.freeze` once the server has started: everything built at start
  (modules, the catalog, compiled schemas, the app) moves to a permanent generation that
  the collector no longer walks;
* ``throughput`` (the default for ``dagwright serve``) — frozen, and the collector's
  thresholds raised (:data:`THROUGHPUT_THRESHOLDS`) so young objects are examined far
  less often: most of a run's objects die (by reference counting — a run leaves no
  reference cycles behind) before a collection would have looked at them.

The library never does this on its own: the collector is the process's, and a service
that embeds dagwright decides. Such a service calls :func:`tune_collector` once it has
started, the way ``dagwright serve`` does; ``untouched`` leaves the collector alone.
"""

from __future__ import annotations

import gc
from typing import Literal

__all__ = ["THROUGHPUT_THRESHOLDS", "GcMode", "tune_collector"]

GcMode = Literal["untouched", "frozen", "throughput"]

THROUGHPUT_THRESHOLDS = (50_000, 20, 10)
"""Collector thresholds of ``throughput`` (CPython's defaults: 700, 10, 10): a young
collection after 50,000 net new container objects instead of 700."""


MODES: tuple[GcMode, ...] = ("untouched", "frozen", "throughput")


def tune_collector(mode: GcMode = "throughput") -> None:
    """Tune this process's garbage collector for a server (see the module); call it once
    the service has started (its catalog loaded, its app built). Another ``mode`` (a
    typo, a value read from a variable) raises ``ValueError`` and changes nothing."""
    if mode not in MODES:
        raise ValueError(f"tune_collector({mode!r}): the mode is one of "
                         f"{', '.join(MODES)} (ORCH_SERVE_GC's values)")
    if mode == "untouched":
        return
    gc.collect()  # what start left as garbage is freed, not frozen
    gc.freeze()
    if mode == "throughput":
        gc.set_threshold(*THROUGHPUT_THRESHOLDS)
