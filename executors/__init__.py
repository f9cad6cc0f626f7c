"""Executors: run a plan as a DAG, with the defense layers 2-4 and resilience.

``coerce`` (layer 2) is public API for users' own code.
"""

# The public API is loaded before any engine module: ``orchestration`` composes this
# package (its facade imports the executor and the planner), so importing, say,
# ``executors.coercion`` first must not start that composition half-way through this
# package. Importing ``orchestration`` here makes every import order work.
import orchestration  # noqa: F401  (isort: the first import, on purpose)
from executors.coercion import Coercer, CoercionChange, CoercionResult, coerce

__all__ = ["Coercer", "CoercionChange", "CoercionResult", "coerce"]
