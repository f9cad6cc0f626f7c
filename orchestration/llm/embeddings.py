"""Text embeddings through an OpenAI-compatible ``POST /v1/embeddings`` endpoint, cached.

Used for the planner's optional semantic retrieval over a large catalog
(``ORCH_EMBEDDINGS_*``; see docs/planning.md). :class:`EmbeddingsClient` sends batches
of texts and returns one vector per text, in order; failures are
:class:`~orchestration.errors.LLMError` with the same classification as the chat clients
(a wrong key is ``auth``, a 5xx is ``server``, an answer without the vectors is
``malformed``). :class:`EmbeddingCache` keeps vectors in a SQLite file keyed by model and
text, so a catalog's vectors are computed once and survive restarts: an unchanged
capability is never embedded again, a changed one is.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from orchestration.errors import LLMError, LLMErrorKind
from orchestration.llm._http import (
    HTTPLLMClient,
    error_for_status,
    json_object_body,
    malformed,
    post_json,
    setting_hint,
)

if TYPE_CHECKING:
    from orchestration.config import OrchestratorConfig

__all__ = ["EmbeddingCache", "EmbeddingsClient"]

Vector = list[float]


class EmbeddingsClient(HTTPLLMClient):
    """An OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, LiteLLM, TEI...).

    ``base_url`` ends in ``/v1``; ``batch_size`` texts go in one request. ``dimensions``
    is sent when set (models that can shorten their vectors). Build one from the
    settings with :meth:`from_config` (None unless ``ORCH_EMBEDDINGS_BASE_URL`` and
    ``ORCH_EMBEDDINGS_MODEL`` are set).
    """

    provider = "openai-embeddings"
    structured_output = "none"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        batch_size: int = 128,
        dimensions: int | None = None,
        http_client: httpx.AsyncClient | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        super().__init__(base_url=base_url, model=model, api_key=api_key, timeout_s=timeout_s,
                         http_client=http_client, extra_headers=extra_headers)
        self.batch_size = batch_size
        self.dimensions = dimensions

    @classmethod
    def from_config(cls, config: OrchestratorConfig) -> EmbeddingsClient | None:
        if not (config.embeddings_base_url and config.embeddings_model):
            return None
        key = config.embeddings_api_key
        return cls(base_url=config.embeddings_base_url, model=config.embeddings_model,
                   api_key=key.get_secret_value() if key is not None else None,
                   timeout_s=config.embeddings_timeout_s,
                   batch_size=config.embeddings_batch_size)

    @property
    def url(self) -> str:
        return f"{self.base_url}/embeddings"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self._extra_headers}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One vector per text, in order; raises :class:`LLMError` on any failure."""
        vectors: list[Vector] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += await self._batch(list(texts[start:start + self.batch_size]))
        return vectors

    async def _batch(self, texts: list[str]) -> list[Vector]:
        payload: dict[str, Any] = {"model": self.model, "input": texts,
                                   "encoding_format": "float"}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        response = await post_json(self._pool(), self.url, payload=payload,
                                   headers=self._headers(), timeout_s=self.timeout_s,
                                   provider=self.provider, secret=self._api_key)
        if response.status_code >= 300:
            message = response.text
            hint = setting_hint(response.status_code, message, url=self.url,
                                base_url=self.base_url, base_example="https://api.openai.com/v1")
            hint = hint.replace("ORCH_LLM_", "ORCH_EMBEDDINGS_")
            raise error_for_status(response, provider=self.provider, secret=self._api_key,
                                   hint=hint)
        body = json_object_body(response, provider=self.provider, secret=self._api_key)
        return _vectors(body, len(texts), response, self.provider, self._api_key)


def _vectors(body: dict[str, Any], count: int, response: httpx.Response, provider: str,
             secret: str | None) -> list[Vector]:
    """The vectors of an answer, by ``index``; MALFORMED when any is missing or not numbers."""
    data = body.get("data")
    if not isinstance(data, list) or len(data) != count:
        raise malformed(response, f"expected 'data' with {count} embeddings", provider, secret)
    out: list[Vector | None] = [None] * count
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, dict) else None
        vector = item.get("embedding") if isinstance(item, dict) else None
        if (not isinstance(index, int) or not 0 <= index < count or out[index] is not None
                or not isinstance(vector, list) or not vector
                or not all(isinstance(x, int | float) and not isinstance(x, bool)
                           for x in vector)):
            raise malformed(response, f"embedding {position} is not a list of numbers with "
                            "a valid index", provider, secret)
        out[index] = [float(x) for x in vector]
    if len({len(v) for v in out if v is not None}) != 1:
        raise malformed(response, "the embeddings differ in length", provider, secret)
    return [v for v in out if v is not None]


class EmbeddingCache:
    """Vectors by (model, text) in a SQLite file, or in memory when ``path`` is None.

    Safe to share between threads (one connection behind a lock); the file is created
    with its directory.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path) if self.path else ":memory:",
                                   check_same_thread=False)
        with self._lock, self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS embeddings "
                             "(key TEXT PRIMARY KEY, vector BLOB NOT NULL)")

    @staticmethod
    def key(model: str, text: str) -> str:
        return hashlib.sha256(f"{model}\0{text}".encode()).hexdigest()

    def get_many(self, model: str, texts: Sequence[str]) -> list[Vector | None]:
        keys = [self.key(model, t) for t in texts]
        found: dict[str, bytes] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                marks = ",".join("?" * len(chunk))
                found.update(self._db.execute(
                    f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", chunk))
        out: list[Vector | None] = []
        for key in keys:
            blob = found.get(key)
            out.append(list(array("f", blob)) if blob is not None else None)
        return out

    def put_many(self, model: str, texts: Sequence[str], vectors: Sequence[Vector]) -> None:
        rows = [(self.key(model, t), array("f", v).tobytes())
                for t, v in zip(texts, vectors, strict=True)]
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?)", rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()


async def embed_cached(client: EmbeddingsClient, cache: EmbeddingCache,
                       texts: Sequence[str]) -> list[Vector]:
    """Vectors for ``texts``: from ``cache``, the missing ones from ``client`` (then cached)."""
    vectors = cache.get_many(client.model, texts)
    missing = [i for i, v in enumerate(vectors) if v is None]
    if missing:
        fresh = await client.embed([texts[i] for i in missing])
        cache.put_many(client.model, [texts[i] for i in missing], fresh)
        for i, v in zip(missing, fresh, strict=True):
            vectors[i] = v
    if any(v is None for v in vectors):  # pragma: no cover - guarded above
        raise LLMError(LLMErrorKind.MALFORMED, "embeddings missing after a fetch")
    return [v for v in vectors if v is not None]
