"""What several ``dagwright`` commands share but is not a command: the catalog a command
uses, reading the run store, run ids given by a prefix, whole lines that reach a pipe at
once, and a quiet end when the reader of stdout goes away."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO, TypeVar

from orchestration.catalog import Catalog
from orchestration.config import OrchestratorConfig
from orchestration.errors import ConfigError, DagwrightError
from orchestration.orchestrator import Orchestrator
from orchestration.result import RunResult
from orchestration.store import RunStore

T = TypeVar("T")

PREFIX_SCAN_LIMIT = 10_000
"""How many recent runs a prefix is looked for among (an exact id is always found)."""
MIN_PREFIX = 4


def catalog_for(args: argparse.Namespace, config: OrchestratorConfig) -> Catalog:
    """``--catalog`` wins over ``ORCH_CATALOG``."""
    path = getattr(args, "catalog", None) or config.catalog
    if path is None:
        raise ConfigError("no catalog: set ORCH_CATALOG or pass --catalog FILE "
                          "(config/catalog.example.yaml is an example)")
    return Catalog.from_file(path)


def read_store(read: Callable[[RunStore], Awaitable[T]]) -> T:
    """Read the run store ORCH_STORE_URL names: history needs neither a catalog nor an LLM."""
    from orchestration.store import open_store

    async def main() -> T:
        store = open_store(OrchestratorConfig().store_url)
        await store.open()
        try:
            return await read(store)
        finally:
            await store.close()

    return asyncio.run(main())


class AmbiguousRunId(DagwrightError):
    """A prefix that names no run, or several; the message lists the candidates."""


async def resolve_run_id(store: RunStore, given: str, *, elsewhere: bool = False) -> str:
    """The run id ``given`` names: itself when a run has that id, else the one run whose
    id starts with it. A prefix matching several runs is refused with the candidates
    (newest first), one matching none with what to do; either way nothing is acted on.
    ``elsewhere``: runs may exist that the store does not hold yet (on Temporal a run is
    recorded when it pauses or ends), so an id no stored run starts with is ``given``."""
    if await store.load(given) is not None:
        return given
    if elsewhere and len(given) < MIN_PREFIX:
        return given
    if len(given) < MIN_PREFIX:
        raise AmbiguousRunId(f"no run {given!r}; a prefix needs at least {MIN_PREFIX} "
                             "characters ('dagwright runs list' shows the run ids)")
    runs = await store.list_runs(status=None, limit=PREFIX_SCAN_LIMIT)
    matches = [r for r in runs if r.run_id.startswith(given)]
    if len(matches) == 1:
        return matches[0].run_id
    if not matches and elsewhere:
        return given
    if not matches:
        raise AmbiguousRunId(f"no run {given!r} and no run id starts with it; "
                             "'dagwright runs list' shows the run ids")
    shown = "; ".join(f"{r.run_id} ({r.status})" for r in matches[:10])
    more = f" and {len(matches) - 10} more" if len(matches) > 10 else ""
    raise AmbiguousRunId(f"{given!r} is the start of {len(matches)} run ids: {shown}{more}; "
                         "give more characters")


def full_run_id(given: str) -> str:
    """The run id a prefix names (see :func:`resolve_run_id`), read from the store."""
    on_temporal = OrchestratorConfig().backend == "temporal"
    return read_store(lambda store: resolve_run_id(store, given, elsewhere=on_temporal))


def continuing(why_tools: str) -> Orchestrator:
    """The orchestrator a command goes on with a run by (``resume``, ``approve``,
    ``reject``). Locally it calls the run's tools, so ORCH_CATALOG must name them
    (``why_tools`` says so); on Temporal the workers call the tools and the LLM, so it
    needs neither."""
    config = OrchestratorConfig()
    if config.backend == "temporal":
        return Orchestrator.from_env(config=config, catalog=config.catalog or Catalog())
    if config.catalog is None:
        raise DagwrightError(f"{why_tools}: set ORCH_CATALOG to the catalog the run was "
                             "started with")
    return Orchestrator.from_env(config=config)


def read_run(run_id: str) -> RunResult | None:
    """The run as its backend has it: on Temporal the live run (asked of its workflow;
    the run store when that cannot answer; one stuck past its deadline is ended), else
    as the run store recorded it."""
    config = OrchestratorConfig()
    if config.backend == "temporal":
        orch = Orchestrator(catalog=Catalog(), config=config)
        try:
            return orch.get_run(run_id)
        finally:
            orch.close()
    stored = read_store(lambda store: store.load(run_id))
    return None if stored is None else stored.state.to_result()


def write_line(stream: TextIO, text: str) -> None:
    """One whole line, flushed: the first line of a command's output reaches a pipe at
    once, not when the run ends."""
    stream.write(text + "\n")
    stream.flush()


def quiet_closed_pipe() -> None:
    """After ``BrokenPipeError`` on stdout (``dagwright runs list | head``): point stdout
    at /dev/null so that the interpreter's last flush does not print a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file (a test's StringIO)
        pass
