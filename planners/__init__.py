"""Planners: turn a query and a catalog into a validated plan (layer 1 lives here)."""
