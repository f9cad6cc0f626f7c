"""dagwright's tests, laid out like the packages they test (tests/<package>/...)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (README, config/, docs/)."""
