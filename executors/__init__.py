"""Executors: run a plan as a DAG, with the defense layers 2-4 and resilience.

Public here: layer 2 (``coerce``, ``Coercer``) for users' own code, and what a custom
recovery handler needs (``RecoveryHandler``, ``StepState``, ``Decision``, ``GiveUp``,
the fault predicates of :mod:`executors.faults`, the standard layers in
:mod:`executors.layers`). Modules with a leading underscore are internal.
"""

# The public API is loaded before any engine module: ``orchestration`` composes this
# package (its facade imports the executor and the planner), so importing, say,
# ``executors.coercion`` first must not start that composition half-way through this
# package. Importing ``orchestration`` here makes every import order work.
import orchestration  # noqa: F401  (isort: the first import, on purpose)
from executors.coercion import REMOVED, Coercer, CoercionChange, CoercionResult, coerce
from executors.recovery import Decision, GiveUp, RecoveryHandler, StepState

__all__ = ["REMOVED", "Coercer", "CoercionChange", "CoercionResult", "Decision", "GiveUp",
           "RecoveryHandler", "StepState", "coerce"]
