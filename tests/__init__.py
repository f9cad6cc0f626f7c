"""dagwright's tests, laid out like the packages they test (tests/<package>/...)."""

from pathlib import Path

ROOT = Path(__file__).parent.parent  # __file__ is absolute; no resolve(): Temporal's sandbox forbids it
"""The repository root (README, config/, docs/)."""
