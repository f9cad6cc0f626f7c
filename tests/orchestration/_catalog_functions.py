"""Module-level tools for the catalog round-trip tests (a catalog file names them)."""

from __future__ import annotations


def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b
