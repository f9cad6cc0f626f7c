"""Optional semantic retrieval: rank capabilities by embedding similarity and fuse with
the lexical ranking.

Off unless ``ORCH_EMBEDDINGS_BASE_URL`` and ``ORCH_EMBEDDINGS_MODEL`` are set. Each
capability's text (name, tool, description, parameters) is embedded once: vectors come
from the :class:`~orchestration.llm.embeddings.EmbeddingCache` (a SQLite file with
``ORCH_EMBEDDINGS_CACHE``) and only capabilities never seen are sent to the endpoint.
The matrix of unit vectors is kept per catalog content (with its
:class:`~planners._selection.SelectionIndex`), so a run costs one query embedding and one
matrix product. The two rankings are fused by reciprocal rank fusion, which needs no
score calibration between them and cannot lose a capability that either ranks high.

numpy does the matrix product (the ``embeddings`` extra); without it, or when the
endpoint fails, the planner keeps the lexical ranking and says so on the plan span.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from orchestration.llm.embeddings import EmbeddingCache, EmbeddingsClient, embed_cached
from planners._ranking import reciprocal_rank_fusion
from planners._selection import SelectionIndex, compact_entry

SEMANTIC_DEPTH = 500
"""How many of the semantic ranking's best take part in the fusion."""
RRF_K = 60
"""Reciprocal rank fusion's constant (Cormack et al. 2009)."""


def capability_text(index: SelectionIndex, position: int) -> str:
    """What is embedded for a capability: its compact entry, tool description and
    parameter names."""
    cap = index.capabilities[position]
    params = cap.input_schema.get("properties") if isinstance(cap.input_schema, dict) else None
    names = ", ".join(map(str, params)) if isinstance(params, dict) else ""
    tool = index.tool_descriptions.get(cap.tool, "")
    text = compact_entry(cap)[2:]
    return " ".join(part for part in (text, tool, f"Parameters: {names}." if names else "")
                    if part)


class _Matrix:
    def __init__(self, index: SelectionIndex, vectors: Sequence[Sequence[float]]) -> None:
        import numpy as np

        self.index = index
        matrix = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        self.matrix = matrix / np.where(norms == 0, 1, norms)

    def ranked(self, query: Sequence[float], depth: int) -> list[int]:
        import numpy as np

        vector = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(vector)) or 1.0
        similarity = self.matrix @ (vector / norm)
        depth = min(depth, len(similarity))
        if depth <= 0:
            return []
        top = np.argpartition(-similarity, depth - 1)[:depth]
        order = sorted(top.tolist(), key=lambda p: (-float(similarity[p]), p))
        return order


class SemanticRanker:
    """Embeds a catalog once per content and ranks queries against it."""

    def __init__(self, client: EmbeddingsClient, cache: EmbeddingCache) -> None:
        self.client = client
        self.cache = cache
        self._matrix: _Matrix | None = None

    async def order(self, index: SelectionIndex, query: str) -> list[int]:
        """The fused ranking of ``query``: lexical and semantic, by reciprocal rank."""
        matrix = self._matrix
        if matrix is None or matrix.index is not index:
            texts = [capability_text(index, i) for i in range(len(index.capabilities))]
            vectors = await embed_cached(self.client, self.cache, texts)
            matrix = await asyncio.to_thread(_Matrix, index, vectors)
            self._matrix = matrix
        [vector] = await self.client.embed([query])
        semantic = matrix.ranked(vector, SEMANTIC_DEPTH)
        lexical = index.ranking.ranked(query)
        return reciprocal_rank_fusion([lexical, semantic], k=RRF_K)

    def settings(self) -> tuple[Any, ...]:
        return (self.client.base_url, self.client.model, self.cache.path)
