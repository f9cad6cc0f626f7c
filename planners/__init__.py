"""Planners: turn a query and a catalog into a validated plan (layer 1 lives here)."""

from planners.parsing import extract_json, parse_plan
from planners.planner import Planner

__all__ = ["Planner", "extract_json", "parse_plan"]
