"""Grounded corrections through the public API: every source layer 4 claims for a changed
value is checked before the call is sent, and a value that cannot be traced is not sent.

In-process tools and a scripted LLM; the step runner, layer 2, validation, layers 3 and 4
and the observer are the real ones.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from executors._arithmetic import MAX_EXPONENT, Expression, ExpressionError
from orchestration import (
    Catalog,
    LLMRequest,
    Orchestrator,
    OrchestratorConfig,
    RunResult,
    ScriptedLLM,
    StepFailed,
    ToolFailed,
)
from orchestration.clock import ManualClock

PAY_SCHEMA = {"type": "object", "required": ["amount"], "additionalProperties": False,
              "properties": {"amount": {"type": "number"}, "city": {"type": "string"},
                             "seats": {"type": "integer"}, "tags": {"type": "array",
                                                                    "items": {"type": "string"}},
                             "express": {"type": "boolean"}}}
QUOTE = {"price": 2.5, "qty": 3, "fee": "1.25", "items": [{"name": "Oslo", "price": 2.5}]}


class World:
    """``quote`` (no input) → ``pay`` (refuses amount <= 0); records every pay call."""

    def __init__(self) -> None:
        self.paid: list[dict[str, Any]] = []
        self.catalog = Catalog()
        self.catalog.add_function(lambda: dict(QUOTE), tool="shop", capability="quote")
        self.catalog.add_function(lambda: {"note": "unrelated", "price": 99.0}, tool="shop",
                                  capability="other")

        def pay(**params: Any) -> dict[str, Any]:
            self.paid.append(params)
            if params["amount"] <= 0:
                raise ToolFailed("INVALID_AMOUNT", "amount must be greater than 0", retryable=True)
            return {"paid": params["amount"]}

        self.catalog.add_function(pay, tool="shop", capability="pay", input_schema=PAY_SCHEMA)


def plan(params: dict[str, Any]) -> dict[str, Any]:
    return {"steps": [
        {"id": "quote", "tool": "shop", "capability": "quote"},
        {"id": "other", "tool": "shop", "capability": "other"},
        {"id": "pay", "tool": "shop", "capability": "pay", "params": params,
         "depends_on": ["quote"]},
    ]}


def layer4(corrected: dict[str, Any], provenance: dict[str, Any] | None) -> dict[str, Any]:
    answer = {"should_retry": True, "is_transient_error": False,
              "corrected_parameters": corrected, "analysis": "re-resolved"}
    if provenance is not None:
        answer["provenance"] = provenance
    return answer


class Run:
    """One run of ``plan(params)`` for ``query`` whose layer 4 answers ``answer``."""

    def __init__(self, query: str, params: dict[str, Any], answer: dict[str, Any],
                 **config: Any) -> None:
        self.world = World()
        self.registry = CollectorRegistry()
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))

        def respond(request: LLMRequest) -> Any:
            if request.purpose == "plan":
                return plan(params)
            if request.purpose == "semantic_retry":
                return answer
            if request.purpose == "validation_feedback":
                return {"can_fix": False, "analysis": "not a form problem", "corrected_parameters": {}}
            raise AssertionError(request.purpose)

        self.llm = ScriptedLLM(respond)
        orch = Orchestrator(catalog=self.world.catalog, llm=self.llm, registry=self.registry,
                            clock=ManualClock(), tracer_provider=provider,
                            config=OrchestratorConfig(synthesis_enabled=False, **config))
        self.result: RunResult = orch.run(query)
        self.pay = self.result.steps["pay"]

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(
            name, {"tool": "shop", "capability": "pay", **labels}) or 0.0

    def events(self, name: str) -> list[dict[str, Any]]:
        return [dict(e.attributes or {}) for s in self.exporter.get_finished_spans()
                for e in s.events if e.name == name]


def refused(run: Run, reason: str, param: str = "amount") -> None:
    """The correction was not sent, and every record says why."""
    pay = run.pay
    assert pay.status == "failed" and pay.error is not None
    assert [(a.layer, a.outcome) for a in pay.attempts] == [
        ("plan", "failed"), ("semantic_retry", "not_sent")]
    assert len(run.world.paid) == 1  # only the planner's call reached the tool
    assert pay.error.code == "UNGROUNDED_CORRECTION" and pay.error.request_sent is False
    assert pay.error.details["needs_approval"] is True  # the seam for approvals
    assert pay.error.details["ungrounded"][param]["reason"] == reason
    verdict = pay.attempts[1].provenance[param]
    assert verdict.grounded is False and verdict.reason == reason and verdict.detail
    assert run.metric("orchestration_corrections_ungrounded_total", reason=reason) == 1
    (event,) = [e for e in run.events("correction_ungrounded") if e["param"] == param]
    assert event["reason"] == reason and event["enforced"] is True
    with pytest.raises(StepFailed, match="ungrounded correction"):
        pay.raise_for_status()


def sent(run: Run, kind: str, param: str = "amount", count: int = 1) -> Any:
    """The correction was grounded and sent; returns the value the tool received."""
    pay = run.pay
    assert pay.status == "succeeded", pay.error
    assert [(a.layer, a.outcome) for a in pay.attempts] == [
        ("plan", "failed"), ("semantic_retry", "succeeded")]
    verdict = pay.attempts[1].provenance[param]
    assert verdict.grounded is True and verdict.kind == kind
    assert run.metric("orchestration_corrections_grounded_total", kind=kind) == count
    assert run.metric("orchestration_corrections_ungrounded_total", reason="no_provenance") == 0
    return run.world.paid[-1][param]


# --- quotes of the request ---------------------------------------------------------------------

def test_a_quote_that_is_not_in_the_request_is_refused() -> None:
    run = Run("Pay for 3 tickets", {"amount": 0},
              layer4({"amount": 5}, {"amount": {"kind": "query", "quote": "5 tickets"}}))
    refused(run, "quote_not_found")


def test_a_real_quote_that_does_not_contain_the_value_is_refused() -> None:
    run = Run("Pay for 3 tickets", {"amount": 0},
              layer4({"amount": 5}, {"amount": {"kind": "query", "quote": "3 tickets"}}))
    refused(run, "value_not_in_quote")


@pytest.mark.parametrize(("query", "quote", "value", "received"), [
    ("Pay   1,000 EUR now", "pay 1,000 eur", 1000, 1000),  # case, spaces, thousands
    ("Pay 12.5 please", "12.5", "12.5", 12.5),  # layer 2 makes the number first
])
def test_a_quote_matches_case_and_space_insensitively_and_reads_numbers(
    query: str, quote: str, value: Any, received: Any,
) -> None:
    run = Run(query, {"amount": 0},
              layer4({"amount": value}, {"amount": {"kind": "query", "quote": quote}}))
    assert sent(run, "query") == received


def test_a_number_written_in_words_does_not_ground_a_number() -> None:
    run = Run("Pay one hundred euros", {"amount": 0},
              layer4({"amount": 100}, {"amount": {"kind": "query", "quote": "one hundred"}}))
    refused(run, "value_not_in_quote")


def test_a_string_and_a_list_are_grounded_item_by_item() -> None:
    run = Run("Pay 2 EUR for the Oslo trip, tags: work, travel", {"amount": 0},
              layer4({"amount": 2, "city": "oslo", "tags": ["work", "travel"]},
                     {"amount": {"kind": "query", "quote": "Pay 2 EUR"},
                      "city": {"kind": "query", "quote": "the Oslo trip"},
                      "tags": {"kind": "query", "quote": "tags: work, travel"}}))
    assert run.pay.status == "succeeded", run.pay.error
    assert all(p.grounded for p in run.pay.attempts[1].provenance.values())
    assert run.world.paid[-1] == {"amount": 2, "city": "oslo", "tags": ["work", "travel"]}


@pytest.mark.parametrize(("query", "quote", "value", "grounded"), [
    ("Pay for 3 tickets by express", "by express", True, True),
    ("Pay for 3 tickets, express please", "express please", True, True),
    ("Pay for 3 tickets, not express", "not express", False, True),
    ("Pay for 3 tickets, not express", "not express", True, False),  # the quote negates it
    ("Pay for 3 tickets by express", "by express", False, False),
    ("Pay for 3 tickets quickly", "quickly", True, False),  # does not name the flag
], ids=["named", "named-2", "negated-false", "negated-true", "unnegated-false", "unnamed"])
def test_a_boolean_needs_a_quote_that_names_the_flag(
    query: str, quote: str, value: bool, grounded: bool,
) -> None:
    run = Run(query, {"amount": 0, "express": not value},
              layer4({"amount": 7.5, "express": value},
                     {"amount": {"kind": "derived", "expression": "3 * {{quote.price}}"},
                      "express": {"kind": "query", "quote": quote}}))
    if grounded:
        assert run.pay.status == "succeeded" and run.world.paid[-1]["express"] is value
    else:
        refused(run, "value_not_in_quote", param="express")
        assert run.pay.attempts[1].provenance["amount"].grounded  # one bad value stops the call


# --- paths into upstream outputs ---------------------------------------------------------------

def test_an_upstream_path_that_holds_the_value_is_accepted() -> None:
    run = Run("Pay the price of the first item", {"amount": 0},
              layer4({"amount": 2.5, "city": "Oslo"},
                     {"amount": {"kind": "upstream", "path": "quote.items[0].price"},
                      "city": {"kind": "upstream", "path": "{{quote.items[0].name}}"}}))
    assert sent(run, "upstream", count=2) == 2.5
    assert run.pay.attempts[1].provenance["city"].value == "Oslo"


def test_a_value_written_as_a_reference_claims_its_own_path() -> None:
    run = Run("Pay the quoted price", {"amount": 0}, layer4({"amount": "{{quote.price}}"}, None))
    assert sent(run, "upstream") == 2.5
    assert run.pay.attempts[1].provenance["amount"].source == "quote.price"


def test_a_text_template_is_grounded_by_its_references() -> None:
    run = Run("Pay the quoted price", {"amount": 0, "city": "?"},
              layer4({"amount": "{{quote.price}}", "city": "Trip to {{quote.items[0].name}}"},
                     None))
    assert sent(run, "upstream", count=2) == 2.5
    assert run.world.paid[-1]["city"] == "Trip to Oslo"
    assert run.pay.attempts[1].provenance["city"].source == "Trip to {{quote.items[0].name}}"


def test_a_template_citing_a_step_it_does_not_depend_on_is_refused() -> None:
    run = Run("Pay the quoted price", {"amount": 0},
              layer4({"amount": 2.5, "city": "Near {{other.note}}"},
                     {"amount": {"kind": "upstream", "path": "quote.price"}}))
    refused(run, "not_upstream", param="city")


@pytest.mark.parametrize(("path", "reason"), [
    ("quote.qty", "value_mismatch"),  # resolves, to 3, not 2.5
    ("quote.total", "path_unresolved"),
    ("other.price", "not_upstream"),  # a step pay does not depend on
    ("quote price", "invalid_claim"),
])
def test_an_upstream_path_that_does_not_hold_the_value_is_refused(path: str, reason: str) -> None:
    run = Run("Pay the quoted price", {"amount": 0},
              layer4({"amount": 2.5}, {"amount": {"kind": "upstream", "path": path}}))
    refused(run, reason)


# --- arithmetic -------------------------------------------------------------------------------

@pytest.mark.parametrize(("query", "expression", "value", "received"), [
    ("Pay for 3 tickets", "3 * {{quote.price}}", 7.5, 7.5),
    ("Pay for 3 tickets", "{{quote.price}} * {{quote.qty}} + {{quote.fee}}", "8.75", 8.75),
    ("Split 100 between 3", "100 / 3", 33.33, 33.33),  # rounded to the cents it shows
    ("Pay 2 hours of parking at the quoted rate", "2 * 60 * {{quote.price}}", 300, 300),
])
def test_a_derivation_that_evaluates_to_the_value_sent_is_accepted(
    query: str, expression: str, value: Any, received: Any,
) -> None:
    run = Run(query, {"amount": 0},
              layer4({"amount": value}, {"amount": {"kind": "derived", "expression": expression}}))
    assert sent(run, "derived") == received


@pytest.mark.parametrize(("query", "expression", "value", "reason"), [
    ("Pay for 3 tickets", "3 * {{quote.price}}", 10, "value_mismatch"),  # 7.5, not 10
    ("Split 100 between 3", "100 / 3", 33, "value_mismatch"),  # no rounding to units
    ("Pay for 3 tickets", "4 * {{quote.price}}", 10, "literal_not_grounded"),  # 4 is nobody's
    ("Pay for tickets", "1000 + 1000", 2000, "literal_not_grounded"),  # constants alone
    ("Pay for 3 tickets", "3 * {{quote.total}}", 7.5, "path_unresolved"),
    ("Pay for 3 tickets", "3 * {{other.price}}", 297, "not_upstream"),
    ("Pay for 3 tickets", "3 * {{quote.items}}", 7.5, "invalid_expression"),  # not a number
    ("Pay for 3 tickets, 0 extra", "{{quote.price}} / 0", 1, "invalid_expression"),
], ids=["wrong-result", "no-unit-rounding", "invented-literal", "constants-only",
        "unresolved", "not-upstream", "not-a-number", "division-by-zero"])
def test_a_derivation_that_does_not_hold_is_refused(
    query: str, expression: str, value: Any, reason: str,
) -> None:
    run = Run(query, {"amount": 0},
              layer4({"amount": value}, {"amount": {"kind": "derived", "expression": expression}}))
    refused(run, reason)


@pytest.mark.parametrize("expression", [
    "__import__('os').system('touch /tmp/pwned')",
    "{{quote.price}}.real",
    "open('/etc/passwd')",
    "price * 3",
    "[1, 2][0]",
    "3 if {{quote.price}} else 4",
    "lambda: 3",
    "9 ** 9 ** 9",
    "'3' * 3",
])
def test_hostile_expressions_are_refused_without_being_run(expression: str) -> None:
    started = time.perf_counter()
    run = Run("Pay for 3 tickets, 9 of them", {"amount": 0},
              layer4({"amount": 7.5}, {"amount": {"kind": "derived", "expression": expression}}))
    refused(run, "invalid_expression")
    assert time.perf_counter() - started < 5


# --- no source, audit mode, and the hand-over from layer 3 ------------------------------------

@pytest.mark.parametrize(("provenance", "reason"), [
    (None, "no_provenance"),  # an answer in the old format
    ({}, "no_provenance"),
    ({"amount": {"kind": "guess", "quote": "7.5"}}, "invalid_claim"),
    ({"amount": {"kind": "query"}}, "invalid_claim"),
    ({"amount": "from the quote"}, "invalid_claim"),
])
def test_a_changed_value_without_a_usable_source_is_refused(
    provenance: dict[str, Any] | None, reason: str,
) -> None:
    refused(Run("Pay for 3 tickets", {"amount": 0}, layer4({"amount": 7.5}, provenance)), reason)


def test_audit_mode_records_the_verdict_but_sends() -> None:
    run = Run("Pay for 3 tickets", {"amount": 0}, layer4({"amount": 7.5}, None),
              grounded_corrections=False)
    assert run.pay.status == "succeeded" and run.world.paid[-1] == {"amount": 7.5}
    verdict = run.pay.attempts[1].provenance["amount"]
    assert (verdict.grounded, verdict.reason) == (False, "no_provenance")
    assert run.metric("orchestration_corrections_ungrounded_total", reason="no_provenance") == 1
    assert run.events("correction_ungrounded")[0]["enforced"] is False


def test_a_placeholder_goes_from_layer_3_to_layer_4_which_must_ground_the_value() -> None:
    run = Run("Pay for 3 tickets", {"amount": 0},
              layer4({"amount": 7.5},
                     {"amount": {"kind": "derived", "expression": "3 * {{quote.price}}"}}))
    assert sent(run, "derived") == 7.5
    assert run.llm.requests_for("validation_feedback") == []  # layer 3 did not guess
    (prompt,) = [r.prompt_text for r in run.llm.requests_for("semantic_retry")]
    assert "gave up (placeholder)" in prompt
    layer3 = re.search(r"<<<LAYER_3_ANALYSIS\n(.*?)\nLAYER_3_ANALYSIS>>>", prompt, re.S)
    assert layer3 and "$.amount = 0" in layer3.group(1)
    assert run.events("validation_feedback_handover")[0]["validation_feedback.verdict"] == \
        "placeholder"


# --- the evaluator on its own -------------------------------------------------------------------

def test_the_evaluator_computes_the_grammar() -> None:
    values = {"q.a": 2.0, "q.b[0].c": 10.0}
    expression = Expression("-({{q.a}} + 1) * {{ q.b[0].c }} // 4 % 5 + 2 ** 3 - 7 / 2")
    assert [r.dotted for r in expression.references] == ["q.a", "q.b[0].c"]
    assert expression.literals == [1.0, 4.0, 5.0, 2.0, 3.0, 7.0, 2.0]
    assert expression.evaluate(lambda ref: values[ref.dotted]) == \
        (-(2 + 1) * 10 // 4 % 5 + 2 ** 3 - 7 / 2)


@pytest.mark.parametrize(("text", "why"), [
    ("{{q.a}}.real", "attribute"),
    ("abs(-3)", "call"),
    ("x + 1", "name 'x'"),
    ("__ref0__ + 1", "reserved"),
    ("{{q.a}}[0]", "subscript"),
    ("1 < 2", "compare"),
    ("'a'", "only numbers"),
    ("True + 1", "only numbers"),
    ("1j", "only numbers"),
    ("{q.a} + 1", "reference"),
    ("1 +", "not an arithmetic expression"),
    ("", "empty"),
    ("1" + " + 1" * 200, "at most"),
    ("9" * 400, "at most"),
])
def test_the_evaluator_refuses_everything_outside_the_grammar(text: str, why: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(why)):
        Expression(text).evaluate(lambda ref: 1.0)


@pytest.mark.parametrize(("text", "why"), [
    (f"2 ** {MAX_EXPONENT + 1}", "exponent"),
    ("9 ** 9 ** 9", "exponent"),
    ("(10 ** 60) ** 60", "cannot compute|not a finite"),
    ("1e308 * 10", "cannot compute|not a finite"),
    ("(-8) ** 0.5", "not a finite real"),
    ("1 % 0", "division by zero"),
])
def test_the_evaluator_bounds_what_it_computes(text: str, why: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ExpressionError, match=why):
        Expression(text).evaluate(lambda ref: 1.0)
    assert time.perf_counter() - started < 0.5


def test_an_ungrounded_value_can_wait_for_a_person_instead_of_failing() -> None:
    """With ORCH_UNGROUNDED_NEEDS_APPROVAL the refused correction pauses the step: a person
    sees the value layer 4 wanted to send and decides; approved, it is sent."""
    world = World()
    answers = {"plan": plan({"amount": 0}), "semantic_retry": layer4(
        {"amount": 7.5}, {"amount": {"kind": "query", "quote": "seven fifty"}}),
        "synthesis": "done"}

    def answer(request: LLMRequest) -> Any:
        return answers[request.purpose]

    config = OrchestratorConfig(validation_feedback_enabled=False, ungrounded_needs_approval=True)
    orch = Orchestrator(catalog=world.catalog, llm=ScriptedLLM(answer), config=config,
                        registry=CollectorRegistry(), clock=ManualClock())
    paused = orch.run("pay seven fifty")
    assert paused.status == "awaiting_approval"
    (pending,) = paused.pending_approvals
    assert pending.step_id == "pay" and pending.params == {"amount": 7.5}
    assert "amount" in pending.reason and world.paid == [{"amount": 0}]

    from orchestration import Approval

    done = orch.resume(paused.run_id, approvals={"pay": Approval(approved=True)})
    assert done.status == "succeeded" and world.paid[-1] == {"amount": 7.5}
    assert done.steps["pay"].attempts[-1].layer == "approval"
