"""Shared fixtures: the demo tools, a hostile tool and the side-effect tools as real HTTP
servers, fresh metric registries."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog
from orchestration.demo.tools import DemoTools, start_demo_tools
from tests.llm_servers import anthropic_server, closed_port_url, openai_server  # noqa: F401
from tests.support.hostile_tools import HostileTool
from tests.support.side_effects import SideEffectTools, side_effect_tools

# real PostgreSQL, Temporal and Chromium fixtures (postgres_dsn, temporal_server, browser_page...)
pytest_plugins = ["tests.support.fixtures"]

# Runs are recorded in memory unless a test chooses a store: the default (a SQLite file
# under .dagwright/ in the working directory) is what the durable-run tests exercise on
# purpose, with files of their own.
os.environ.setdefault("ORCH_STORE_URL", "memory://")


@pytest.fixture(scope="session")
def demo_tools_session() -> Iterator[DemoTools]:
    with start_demo_tools() as tools:
        yield tools


@pytest.fixture
def demo_tools(demo_tools_session: DemoTools) -> Iterator[DemoTools]:
    """The running demo tools, with recorded requests and queued faults cleared."""
    demo_tools_session.reset()
    yield demo_tools_session
    demo_tools_session.reset()


@pytest.fixture
def demo_catalog(demo_tools: DemoTools) -> Catalog:
    return Catalog.from_dict(demo_tools.catalog_dict(), source="demo tools")


@pytest.fixture(scope="session")
def hostile_tool_session() -> Iterator[HostileTool]:
    with HostileTool() as tool:
        yield tool


@pytest.fixture
def hostile_tool(hostile_tool_session: HostileTool) -> Iterator[HostileTool]:
    """A loopback tool that answers with queued hostile behaviours (see tests/support/hostile_tools.py)."""
    hostile_tool_session.reset()
    yield hostile_tool_session
    hostile_tool_session.reset()


@pytest.fixture
def tools() -> Iterator[SideEffectTools]:
    """The loopback tools that count the side effects they executed (durable runs,
    approvals, events, the server); a module may define its own ``tools`` instead."""
    with side_effect_tools() as running:
        yield running


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()
