"""Run stores: where runs are recorded so they survive their process.

``ORCH_STORE_URL`` (``OrchestratorConfig.store_url``) picks one:

* ``sqlite:///PATH`` — the embedded default (``.dagwright/runs.db`` under the working
  directory); WAL mode, safe for several processes on one machine;
* ``postgresql://USER:PASSWORD@HOST:PORT/DB`` — for services (the ``postgres`` extra:
  ``pip install '.[postgres]'`` from a clone); tables are created or migrated on first use;
* ``memory://`` — nothing persisted (tests, benchmarks).

See ``docs/durability.md`` for what is recorded and what a resumed run re-sends.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from orchestration.errors import ConfigError
from orchestration.store._base import RunStore, RunSummary, StoredRun
from orchestration.store._memory import MemoryStore
from orchestration.store._sql import PostgresStore, SqliteStore, masked_url

__all__ = ["MemoryStore", "PostgresStore", "RunStore", "RunSummary", "SqliteStore",
           "StoredRun", "open_store"]


def open_store(url: str) -> MemoryStore | SqliteStore | PostgresStore:
    """The store ``url`` names (not connected yet: the first run connects it).

    Raises :class:`~orchestration.errors.ConfigError` naming ``ORCH_STORE_URL`` when the
    URL is not one of the three forms.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        path = url[len("sqlite:///"):] if url.lower().startswith("sqlite:///") else ""
        if not path:
            raise ConfigError(f"ORCH_STORE_URL={url!r}: a SQLite store needs a path, e.g. "
                              "sqlite:///.dagwright/runs.db (relative) or "
                              "sqlite:////var/lib/dagwright/runs.db (absolute)")
        return SqliteStore(url, Path(path))
    if scheme in ("postgresql", "postgres"):
        return PostgresStore(url)
    raise ConfigError(f"ORCH_STORE_URL={masked_url(url)!r}: unknown store; use sqlite:///PATH, "
                      "postgresql://USER:PASSWORD@HOST/DB or memory://")
