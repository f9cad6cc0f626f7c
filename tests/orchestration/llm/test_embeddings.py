"""The embeddings client against a loopback OpenAI-compatible /v1/embeddings server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration import OrchestratorConfig
from orchestration.errors import LLMError, LLMErrorKind
from orchestration.llm.embeddings import EmbeddingCache, EmbeddingsClient, embed_cached
from tests.llm_servers import FakeEmbeddingsServer

KEY = "sk-embed-secret-1234"


@pytest.fixture
def embeddings_server() -> Iterator[FakeEmbeddingsServer]:
    with FakeEmbeddingsServer() as server:
        yield server


def client(server: FakeEmbeddingsServer, **kw: object) -> EmbeddingsClient:
    return EmbeddingsClient(base_url=server.base_url, model="embed-small", **kw)  # type: ignore[arg-type]


async def test_vectors_come_back_in_order_in_batches(
        embeddings_server: FakeEmbeddingsServer) -> None:
    texts = ["weather forecast", "currency rates", "send mail", "weather alerts", "x"]
    vectors = await client(embeddings_server, batch_size=2).embed(texts)
    assert vectors == [embeddings_server.vector(t) for t in texts]
    assert [len(r.body["input"]) for r in embeddings_server.requests] == [2, 2, 1]
    assert all(r.body["model"] == "embed-small" for r in embeddings_server.requests)


async def test_an_answer_out_of_index_order_is_put_back_in_order(
        embeddings_server: FakeEmbeddingsServer) -> None:
    embeddings_server.reply({"data": [{"index": 1, "embedding": [0.0, 1.0]},
                                      {"index": 0, "embedding": [1.0, 0.0]}]})
    assert await client(embeddings_server).embed(["a", "b"]) == [[1.0, 0.0], [0.0, 1.0]]


@pytest.mark.parametrize("body", [
    {"data": [{"index": 0, "embedding": [1.0]}]},  # one vector for two texts
    {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]},
    {"data": [{"index": 0, "embedding": ["a"]}, {"index": 1, "embedding": [2.0]}]},
    {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [2.0, 3.0]}]},
    {"vectors": []},
])
async def test_an_answer_without_usable_vectors_is_malformed(
        embeddings_server: FakeEmbeddingsServer, body: object) -> None:
    embeddings_server.reply(body)
    with pytest.raises(LLMError) as caught:
        await client(embeddings_server).embed(["a", "b"])
    assert caught.value.kind is LLMErrorKind.MALFORMED


async def test_a_wrong_key_is_an_auth_error_that_names_the_setting_and_hides_the_key() -> None:
    with FakeEmbeddingsServer(api_key="right-key-9999") as server:
        with pytest.raises(LLMError) as caught:
            await client(server, api_key=KEY).embed(["a"])
        assert caught.value.kind is LLMErrorKind.AUTH
        assert "ORCH_EMBEDDINGS_API_KEY" in str(caught.value)
        assert KEY not in str(caught.value) and KEY not in (caught.value.raw or "")
        assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
        assert KEY not in repr(client(server, api_key=KEY))


async def test_server_errors_are_classified(embeddings_server: FakeEmbeddingsServer) -> None:
    embeddings_server.error(503, "overloaded")
    with pytest.raises(LLMError) as caught:
        await client(embeddings_server).embed(["a"])
    assert caught.value.kind is LLMErrorKind.SERVER


async def test_the_cache_keeps_vectors_across_instances(
        embeddings_server: FakeEmbeddingsServer, tmp_path: Path) -> None:
    path = tmp_path / "cache" / "vectors.sqlite"
    texts = ["weather forecast", "currency rates"]
    first = await embed_cached(client(embeddings_server), EmbeddingCache(path), texts)
    assert len(embeddings_server.requests) == 1
    again = await embed_cached(client(embeddings_server), EmbeddingCache(path),
                               [*texts, "send mail"])
    assert again[:2] == first  # float32 round trip of small integers is exact
    assert embeddings_server.requests[-1].body["input"] == ["send mail"]
    assert len(embeddings_server.requests) == 2
    # another model is another key
    other = EmbeddingsClient(base_url=embeddings_server.base_url, model="embed-large")
    await embed_cached(other, EmbeddingCache(path), texts[:1])
    assert len(embeddings_server.requests) == 3


def test_from_config_needs_both_url_and_model() -> None:
    assert EmbeddingsClient.from_config(OrchestratorConfig()) is None
    assert EmbeddingsClient.from_config(OrchestratorConfig(embeddings_model="m")) is None
    made = EmbeddingsClient.from_config(OrchestratorConfig(
        embeddings_base_url="http://127.0.0.1:9/v1/", embeddings_model="m",
        embeddings_api_key=KEY, embeddings_batch_size=7))
    assert made is not None and made.url == "http://127.0.0.1:9/v1/embeddings"
    assert made.batch_size == 7 and KEY not in repr(made)
