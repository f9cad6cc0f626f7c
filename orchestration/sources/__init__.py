"""Where capabilities come from besides a catalog file: MCP servers, OpenAPI specs,
decorated Python functions and ``GET /capabilities`` discovery.

Each source turns its own description of a tool (an MCP ``tools/list``, an OpenAPI
operation, a type-hinted signature) into :class:`~orchestration.catalog.Capability`
objects with a JSON Schema, an idempotency flag and an ``invoker`` that maps every
failure to the engine's :class:`~orchestration.protocol.StepError`. The engine never
sees the difference.

The heavy libraries (``mcp``, ``openapi-spec-validator``) are imported only by the
modules that need them (:mod:`.mcp`, :mod:`.openapi`), so ``import orchestration``
works without the extras. This package's ``__init__`` holds only the small contract
the catalog uses to own and refresh sources, and what an invoker returns
(:class:`CallResult`: a source of one's own implements
:class:`~orchestration.capability.Invoker`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from orchestration._transport import CallResult

if TYPE_CHECKING:
    from orchestration.capability import Capability

__all__ = ["CallResult", "Source", "SourceListing", "SourceNote"]


@dataclass(frozen=True)
class SourceNote:
    """Something a source could not take as it was: a left-out operation (``skipped``)
    or a repair it made (a duplicate ``required`` entry dropped, a schema cut to size).

    ``source`` is the source's label, ``item`` the operation or tool (``createPet``,
    ``GET /pets``), ``pointer`` the JSON pointer in the document (``#/paths/~1pets/post``).
    """

    source: str
    item: str
    pointer: str
    message: str
    skipped: bool = False

    def __str__(self) -> str:
        verdict = "skipped" if self.skipped else "note"
        return f"{self.source}: {self.item} ({verdict}) at {self.pointer}: {self.message}"


@dataclass
class SourceListing:
    """What one source offers right now: its capabilities and its tools' descriptions,
    plus what it left out or repaired (``notes``)."""

    capabilities: list[Capability]
    tool_descriptions: dict[str, str] = field(default_factory=dict)
    notes: list[SourceNote] = field(default_factory=list)
    schemas_checked: bool = False
    """The source checked every schema against the meta-schema itself (see
    ``Catalog.add``)."""


class Source(Protocol):
    """A source the catalog owns: it can list its capabilities again and must be closed.

    ``label`` names the source in logs, errors and ``dagwright tools`` (``mcp:weather``).
    ``refresh_s`` (None: never) is how often the catalog lists it again in the background.
    ``load`` and ``aclose`` run on the catalog's source runtime loop.
    """

    label: str
    refresh_s: float | None

    async def load(self) -> SourceListing: ...

    async def aclose(self) -> None: ...
