"""The catalog request as real providers carry it: OpenAI-compatible (streamed content,
json_schema) and Anthropic (forced tool use), against loopback servers."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry

from orchestration import Orchestrator, OrchestratorConfig
from orchestration.llm.anthropic import AnthropicClient
from orchestration.llm.openai_compat import OpenAICompatibleClient
from tests.llm_servers import FakeAnthropicServer, FakeOpenAIServer
from tests.planners.test_catalog_request import ASK_NAME, PLAN, QUERY
from tests.planners.test_selection import big_catalog

CONFIG = {"synthesis_enabled": False, "planner_max_capabilities": 2}


async def test_openai_compatible_streamed_request_then_plan(
        openai_server: FakeOpenAIServer) -> None:
    text = json.dumps(ASK_NAME)
    openai_server.stream_answer([text[:20], text[20:]])
    openai_server.stream_answer([json.dumps(PLAN)])
    llm = OpenAICompatibleClient(base_url=openai_server.base_url, model="m")
    orch = Orchestrator(big_catalog(500), llm=llm, registry=CollectorRegistry(),
                        config=OrchestratorConfig(**CONFIG))
    result = await orch.arun(QUERY)
    assert result.status == "succeeded", result.error
    first, second = (r.body for r in openai_server.requests)
    schema = first["response_format"]["json_schema"]["schema"]
    assert "need" in schema["properties"] and schema["required"] == []
    assert second["messages"][-2] == {"role": "assistant", "content": text}
    assert "### mail.list_parcel" in second["messages"][-1]["content"]
    assert "list_parcel" in json.dumps(second["response_format"])
    await llm.aclose()


async def test_anthropic_forced_tool_request_then_plan(
        anthropic_server: FakeAnthropicServer) -> None:
    anthropic_server.answer_tool_use(ASK_NAME)
    anthropic_server.answer_tool_use(PLAN)
    llm = AnthropicClient(base_url=anthropic_server.url, model="claude-test", api_key="k")
    orch = Orchestrator(big_catalog(500), llm=llm, registry=CollectorRegistry(),
                        config=OrchestratorConfig(stream_plan=False, **CONFIG))
    result = await orch.arun(QUERY)
    assert result.status == "succeeded", result.error
    first, second = (r.body for r in anthropic_server.requests)
    tool_schema = first["tools"][0]["input_schema"]
    assert "need" in tool_schema["properties"]
    # the request went back as the assistant's turn, the signatures as the user's
    assert json.loads(second["messages"][-2]["content"]) == ASK_NAME
    assert "### mail.list_parcel" in second["messages"][-1]["content"]
    await llm.aclose()
