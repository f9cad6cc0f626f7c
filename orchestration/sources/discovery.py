"""Tools that describe themselves: ``GET {base_url}/capabilities``, fetched again on demand.

This is the catalog's original discovery, made a source so that ``refresh_s`` can keep
it current: the listing is the same ``from_dict`` build, labelled ``discover:<base_url>``
per tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from orchestration._json import decode
from orchestration.errors import CatalogError
from orchestration.sources import SourceListing

if TYPE_CHECKING:
    from orchestration.catalog import Catalog

__all__ = ["BuildTools", "DiscoverySource"]

BuildTools = Callable[[dict[str, Any], str], "Catalog"]
"""Builds the capabilities of one tool description (``from_dict``), given its origin."""


class DiscoverySource:
    """The tools at ``base_urls``, each described by its ``GET /capabilities``."""

    def __init__(self, base_urls: Sequence[str], *, build: BuildTools, timeout_s: float = 5.0,
                 refresh_s: float | None = None) -> None:
        if not base_urls:
            raise CatalogError("Catalog.discover() needs at least one base URL")
        if refresh_s is not None and refresh_s <= 0:
            raise CatalogError(f"discovery refresh_s must be > 0, got {refresh_s!r}")
        self.base_urls = [b.rstrip("/") for b in base_urls]
        # the catalog hands in its own builder: this module does not import the catalog,
        # which imports the sources
        self.build = build
        self.timeout_s = timeout_s
        self.refresh_s = refresh_s
        self.label = "discover:" + ",".join(self.base_urls)

    def load_sync(self) -> SourceListing:
        """Fetch every description and build the capabilities (raises CatalogError)."""
        listing = SourceListing(capabilities=[])
        with httpx.Client(timeout=self.timeout_s) as client:
            for base in self.base_urls:
                desc = self._fetch(client, base)
                built = self.build(desc, f"discover:{base}")
                listing.capabilities.extend(built)
                listing.tool_descriptions.update(built.tools)
        return listing

    @staticmethod
    def _fetch(client: httpx.Client, base: str) -> dict[str, Any]:
        url = base + "/capabilities"
        try:
            resp = client.get(url)
            resp.raise_for_status()
            desc = decode(resp.content)  # bounded, like every tool body
        except (httpx.HTTPError, ValueError) as exc:
            raise CatalogError(f"cannot discover tool at {url}: {exc}") from exc
        if isinstance(desc, dict) and isinstance(desc.get("data"), dict):
            desc = desc["data"]  # tolerate an enveloped answer
        if not isinstance(desc, dict):
            raise CatalogError(f"{url}: expected a JSON object describing the tool")
        return {**desc, "name": desc.get("tool", desc.get("name")), "base_url": base}

    async def load(self) -> SourceListing:
        """:meth:`load_sync` off the loop (the refresher calls this)."""
        return await asyncio.to_thread(self.load_sync)

    async def aclose(self) -> None:
        """Nothing stays open between fetches."""
