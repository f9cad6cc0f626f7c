"""The planner may ask for capabilities left out of a large catalog before it plans."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.llm.base import LLMRequest
from tests.planners.test_selection import big_catalog, sections

QUERY = "What is 100 degrees Fahrenheit in Celsius?"
PLAN = {"steps": [{"id": "p", "tool": "mail", "capability": "list_parcel",
                   "params": {"parcel_id": "p1"}}]}
ASK_NAME = {"need": {"capabilities": ["mail.list_parcel", "nowhere.nothing"]}}
ASK_SEARCH = {"need": {"search": "archive an employee in HR"}}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return big_catalog(500)


class Conversation:
    """A run whose scripted planner answers from ``answers`` in order."""

    def __init__(self, catalog: Catalog, answers: list[Any], **config: Any) -> None:
        self.answers = list(answers)
        self.llm = ScriptedLLM(self._answer)
        self.spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.spans))
        settings = {"synthesis_enabled": False, "planner_max_capabilities": 2, **config}
        self.orch = Orchestrator(catalog=catalog, llm=self.llm, registry=CollectorRegistry(),
                                 tracer_provider=provider, config=OrchestratorConfig(**settings))
        self.result = self.orch.run(QUERY)

    def _answer(self, request: LLMRequest) -> Any:
        return self.answers.pop(0)

    @property
    def requests(self) -> list[LLMRequest]:
        return self.llm.requests_for("plan")

    def events(self, name: str) -> list[dict[str, Any]]:
        span = next(s for s in self.spans.get_finished_spans() if s.name == "plan dagwright")
        return [dict(e.attributes or {}) for e in span.events if e.name == name]


def test_a_request_by_name_gets_the_signature_and_the_plan_is_asked_again(
        catalog: Catalog) -> None:
    run = Conversation(catalog, [ASK_NAME, PLAN])
    assert run.result.status == "succeeded", run.result.error
    first, second = run.requests
    system = first.messages[0]["content"]
    assert "### mail.list_parcel" not in system
    assert "you may answer with a request instead of a plan" in system
    assert "at most 2 more time(s)" in system
    # the schema lets the first answer be a request
    assert "need" in first.response_schema["properties"]  # type: ignore[index]
    reply = second.messages[-1]["content"]
    assert "### mail.list_parcel" in reply and "Not in the catalog: nowhere.nothing." in reply
    assert second.messages[-2] == {"role": "assistant", "content": first_answer_text(run)}
    step = second.response_schema["properties"]["steps"]["items"]["properties"]  # type: ignore[index]
    assert "list_parcel" in step["capability"]["enum"]
    [event] = run.events("catalog_request")
    assert event["dagwright.request.names"] == "mail.list_parcel,nowhere.nothing"
    assert event["dagwright.request.sent"] == "mail.list_parcel"
    assert event["dagwright.request.unknown"] == "nowhere.nothing"
    assert event["dagwright.request.left"] == 1
    # a request is not a failed attempt: one accepted attempt, numbered 1
    [attempt] = run.events("plan_attempt")
    assert attempt["outcome"] == "accepted" and attempt["dagwright.attempt"] == 1


def first_answer_text(run: Conversation) -> str:
    return run.requests[1].messages[-2]["content"]


def test_a_search_request_sends_the_best_matches_not_yet_shown(catalog: Catalog) -> None:
    plan = {"steps": [{"id": "s", "tool": "hr", "capability": "archive_employee",
                       "params": {"employee_id": "e1"}}]}
    run = Conversation(catalog, [ASK_SEARCH, plan])
    assert run.result.status == "succeeded", run.result.error
    full, abridged, _ = sections(run.requests[0].messages[0]["content"])
    assert "hr.archive_employee" not in full + abridged
    reply = run.requests[1].messages[-1]["content"]
    # the best match comes first, and a search sends at most 8
    assert reply.split("\n\n")[1].startswith("### hr.archive_employee\n")
    assert 1 < reply.count("\n### ") <= 8
    assert "best matches for your search text" in reply
    # asked again for what is already there, it says so
    again = {"need": {"capabilities": ["hr.archive_employee"], "search": "archive employee"}}
    run = Conversation(catalog, [ASK_SEARCH, again, plan])
    reply = run.requests[2].messages[-1]["content"]
    assert "Already shown above: hr.archive_employee." in reply


def test_requests_are_bounded_and_then_refused(catalog: Catalog) -> None:
    run = Conversation(catalog, [ASK_NAME, ASK_SEARCH, PLAN], planner_catalog_requests=1)
    assert run.result.status == "succeeded", run.result.error
    assert len(run.requests) == 3
    assert "No more requests can be answered" in run.requests[1].messages[-1]["content"]
    assert "need" not in run.requests[1].response_schema["properties"]  # type: ignore[index]
    # the second request was answered as a rejected attempt, with feedback
    attempts = run.events("plan_attempt")
    assert [a["outcome"] for a in attempts] == ["rejected", "accepted"]
    assert "no more catalog requests" in run.requests[2].messages[-1]["content"]


def test_requests_count_in_the_llm_budget(catalog: Catalog) -> None:
    run = Conversation(catalog, [ASK_NAME, PLAN], max_llm_calls_per_run=1)
    assert run.result.status == "failed"
    assert "budget" in (run.result.error or "")


def test_no_invitation_when_switched_off_or_when_everything_fits(catalog: Catalog) -> None:
    off = Conversation(catalog, [PLAN], planner_catalog_requests=0)
    assert off.result.status == "succeeded", off.result.error
    system = off.requests[0].messages[0]["content"]
    assert "request instead of a plan" not in system
    assert "Plan with the capabilities above." in system
    assert "need" not in off.requests[0].response_schema["properties"]  # type: ignore[index]
    small = big_catalog(12)
    plan = {"steps": [{"id": "x", "tool": "billing", "capability": "create_invoice",
                       "params": {"invoice_id": "i1"}}]}
    whole = Conversation(small, [ASK_NAME, plan], planner_max_capabilities=None)
    assert whole.result.status == "succeeded", whole.result.error
    assert "request instead of a plan" not in whole.requests[0].messages[0]["content"]
    # nothing was left out, so a request is just an unreadable plan
    assert [a["outcome"] for a in whole.events("plan_attempt")] == ["rejected", "accepted"]
    assert whole.events("catalog_request") == []


def test_a_capability_listed_by_name_only_is_asked_for_and_planned_with() -> None:
    """At the default budget a 1,200-capability catalog is named whole; the planner asks
    for a capability it saw only by name, gets its signature, and plans with it."""
    catalog = big_catalog(1200)
    wanted = "compliance.sync_ticket"  # no word of the query: listed by name only
    plan = {"steps": [{"id": "a", "tool": "compliance", "capability": "sync_ticket",
                       "params": {"ticket_id": "t1"}}]}
    run = Conversation(catalog, [{"need": {"capabilities": [wanted]}}, plan],
                       planner_max_capabilities=None)
    assert run.result.status == "succeeded", run.result.error
    first, second = run.requests
    system = first.messages[0]["content"]
    assert len(first.prompt_text) <= OrchestratorConfig().planner_prompt_budget_chars
    assert "Every other capability, by name only, grouped by tool:\n" in system
    full, abridged, names = sections(system)
    assert wanted in names and wanted not in full + abridged
    reply = second.messages[-1]["content"]
    assert f"### {wanted}\n" in reply and "ticket_id: string (required)" in reply
    [event] = run.events("catalog_request")
    assert event["dagwright.request.sent"] == wanted
