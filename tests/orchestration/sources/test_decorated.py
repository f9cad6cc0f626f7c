"""@catalog.tool: schemas from type hints, JSON in and out, errors layer 3 can act on."""

from __future__ import annotations

import asyncio
import enum
import json
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, field_validator

from orchestration import Catalog, CatalogError, ErrorCategory, ToolFailed
from orchestration.llm.base import LLMRequest
from tests.support.sources import block, orchestrator


class Size(enum.Enum):
    SMALL = "small"
    LARGE = "large"


class Line(BaseModel):
    sku: str
    quantity: Annotated[int, Field(ge=1, le=10)]


class Order(BaseModel):
    lines: list[Line]
    size: Size = Size.SMALL
    note: str | None = None

    @field_validator("note")
    @classmethod
    def no_shouting(cls, value: str | None) -> str | None:
        if value is not None and value.isupper():
            raise ValueError("note must not be all capitals")
        return value


class Opaque:
    """A class pydantic cannot describe as JSON."""


class Receipt(BaseModel):
    order_id: int
    items: int
    size: Size


def shop() -> tuple[Catalog, list[Any]]:
    catalog = Catalog()
    seen: list[Any] = []

    @catalog.tool("shop.place_order")
    async def place_order(order: Order, express: bool = False) -> Receipt:
        """Place an order.

        Each line names a SKU and a quantity between 1 and 10."""
        seen.append(order)
        await asyncio.sleep(0)
        return Receipt(order_id=7, items=sum(line.quantity for line in order.lines), size=order.size)

    @catalog.tool(name="calc.scale", description="Scale a number.", run_in_thread=True)
    def scale(value: Annotated[float, Field(gt=0)], factor: int = 2,
              unit: Size | None = None) -> dict[str, float]:
        seen.append((value, factor, unit))
        return {"scaled": value * factor}

    @catalog.tool
    def refuse(reason: str) -> None:
        raise ToolFailed("NOPE", reason, "INPUT_ERROR", retryable=False)

    return catalog, seen


def test_schemas_come_from_the_type_hints_and_docstring() -> None:
    catalog, _ = shop()
    order = catalog.get("shop", "place_order")
    assert order.source == "python" and order.description.startswith("Place an order.")
    schema = order.input_schema
    assert schema["required"] == ["order"] and schema["additionalProperties"] is False
    assert schema["properties"]["express"] == {"default": False, "type": "boolean"}
    line = schema["$defs"]["Line"]["properties"]
    assert line["quantity"] == {"maximum": 10, "minimum": 1, "type": "integer"}
    assert schema["$defs"]["Size"]["enum"] == ["small", "large"]
    assert order.output_schema is not None and order.output_schema["required"] == ["order_id", "items", "size"]
    scale = catalog.get("calc", "scale")
    assert scale.description == "Scale a number." and scale.run_in_thread
    props = scale.input_schema["properties"]
    assert props["value"] == {"exclusiveMinimum": 0, "type": "number"}
    assert props["factor"] == {"default": 2, "type": "integer"}
    assert props["unit"]["anyOf"][1] == {"type": "null"} and props["unit"]["default"] is None
    assert catalog.get("python", "refuse").output_schema is None


def test_a_run_passes_pydantic_models_in_and_json_out() -> None:
    catalog, seen = shop()
    plan = {"steps": [
        {"id": "order", "tool": "shop", "capability": "place_order",
         "params": {"order": {"lines": [{"sku": "A1", "quantity": "3"}, {"sku": "B2", "quantity": 2}],
                              "size": "large"}}},
        {"id": "scale", "tool": "calc", "capability": "scale",
         "params": {"value": "{{order.items}}", "factor": "3"}, "depends_on": ["order"]},
    ]}
    result = orchestrator(catalog, [plan]).run("order")
    assert result.status == "succeeded", result.error
    assert result.steps["order"].output == {"order_id": 7, "items": 5, "size": "large"}
    assert result.steps["scale"].output == {"scaled": 15.0}
    placed = seen[0]
    assert isinstance(placed, Order) and placed.size is Size.LARGE
    assert placed.lines[0] == Line(sku="A1", quantity=3)  # "3" coerced by layer 2
    assert seen[1] == (5.0, 3, None)
    json.dumps(result.to_dict())


def test_a_model_validator_failure_is_an_input_error_layer_3_corrects() -> None:
    catalog, seen = shop()

    def script(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return {"steps": [{"id": "o", "tool": "shop", "capability": "place_order",
                               "params": {"order": {"lines": [{"sku": "A", "quantity": 1}],
                                                    "note": "RING TWICE"}}}]}
        if request.purpose == "validation_feedback":
            params = block(request.prompt_text, "failed parameters")
            error = str(block(request.prompt_text, "tool error"))
            assert "note must not be all capitals" in error
            params["order"]["note"] = params["order"]["note"].capitalize()
            return {"can_fix": True, "analysis": "lower-case the note", "corrected_parameters": params}
        raise AssertionError(request.purpose)

    result = orchestrator(catalog, script).run("order")
    assert result.status == "succeeded", result.error
    first, second = result.steps["o"].attempts
    assert first.error is not None
    assert (first.error.category, first.error.code, first.error.retryable) == (
        ErrorCategory.INPUT_ERROR, "BAD_ARGUMENTS", True)
    assert second.layer == "validation_feedback"
    assert [o.note for o in seen] == ["Ring twice"]  # the bad call never reached the function


def test_tool_failed_keeps_its_category() -> None:
    catalog, _ = shop()
    plan = {"steps": [{"id": "r", "tool": "python", "capability": "refuse", "params": {"reason": "closed"}}]}
    result = orchestrator(catalog, [plan], semantic_retry_enabled=False).run("x")
    error = result.steps["r"].error
    assert error is not None and (error.code, error.message) == ("NOPE", "closed")


def test_what_cannot_be_described_is_a_clear_error() -> None:
    catalog = Catalog()
    with pytest.raises(CatalogError, match=r"must be 'tool\.capability'"):
        catalog.tool("add")(lambda a: a)
    with pytest.raises(CatalogError, match=r"parameter 'rest' is variadic"):
        @catalog.tool("x.star")
        def star(*rest: int) -> int:
            return 0

    with pytest.raises(CatalogError, match=r"x\.opaque.*no JSON Schema"):
        @catalog.tool("x.opaque")
        def opaque(thing: Opaque) -> None:
            pass
    assert len(catalog) == 0


def test_the_catalog_file_form_in_tools_md_loads_and_runs_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user looked for how to put a Python tool in a catalog file in tools.md and
    found only code; the page now shows the file form, which must load as written."""
    import re
    import sys

    from tests import ROOT

    page = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")
    snippet = next(b for b in re.findall(r"```yaml\n(.*?)```", page, re.S)
                   if "function: pricing:price" in b)
    (tmp_path / "catalog.yaml").write_text(snippet)
    (tmp_path / "pricing.py").write_text(
        'def price(sku: str, quantity: int = 1) -> dict:\n'
        '    """Total price of a quantity of an item, in EUR."""\n'
        '    return {"sku": sku, "total_eur": 2.5 * quantity}\n')
    monkeypatch.delitem(sys.modules, "pricing", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder the catalog adds goes away
    catalog = Catalog.from_file(tmp_path / "catalog.yaml")
    try:
        cap = catalog.get("pricing", "price")
        assert cap.source.startswith("file:") and cap.source.endswith("catalog.yaml")
        assert cap.description == "Total price of a quantity of an item, in EUR."
        assert cap.input_schema["required"] == ["sku"]
        orch = orchestrator(catalog, [{"steps": [{"id": "p", "tool": "pricing",
                                                  "capability": "price",
                                                  "params": {"sku": "A1", "quantity": "4"}}]}],
                            store_url="memory://")
        result = orch.run("price of 4 A1")
        orch.close()
        assert result.status == "succeeded" and result.steps["p"].output == {
            "sku": "A1", "total_eur": 10.0}
    finally:
        sys.modules.pop("pricing", None)
