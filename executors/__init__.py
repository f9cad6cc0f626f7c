"""Executors: run a plan as a DAG, with the defense layers 2-4 and resilience.

``coerce`` (layer 2) is public API for users' own code.
"""

from executors.coercion import Coercer, CoercionChange, CoercionResult, coerce

__all__ = ["Coercer", "CoercionChange", "CoercionResult", "coerce"]
