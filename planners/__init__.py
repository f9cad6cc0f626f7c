"""Planners: turn a query and a catalog into a validated plan (layer 1 lives here)."""

# The public API is loaded before any engine module: ``orchestration`` composes this
# package (its facade imports the executor and the planner), so importing, say,
# ``executors.coercion`` first must not start that composition half-way through this
# package. Importing ``orchestration`` here makes every import order work.
import orchestration  # noqa: F401  (isort: the first import, on purpose)
from planners.feedback import DefaultFeedbackFormatter, FeedbackFormatter, PlanFeedback
from planners.parsing import PLAN_RESPONSE_SCHEMA, parse_plan
from planners.planner import Planner
from planners.prompt import PlannerTemplates
from planners.replan import RepairPlan, RepairSituation
from planners.signatures import SignatureRenderer

__all__ = [
    "PLAN_RESPONSE_SCHEMA", "DefaultFeedbackFormatter", "FeedbackFormatter", "PlanFeedback",
    "Planner", "PlannerTemplates", "RepairPlan", "RepairSituation",
    "SignatureRenderer", "parse_plan",
]
