"""OpenAPI specs as tools, end to end against a real loopback implementation of the spec."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from orchestration import Catalog, CatalogError, ErrorCategory, Orchestrator, OrchestratorConfig
from orchestration.clock import ManualClock
from orchestration.llm.base import LLMRequest
from orchestration.llm.scripted import ScriptedLLM
from tests import ROOT
from tests.openapi.petstore_server import PetStoreServer
from tests.support.sources import block, orchestrator

pytest.importorskip("openapi_spec_validator", reason="the 'openapi' extra is not installed")

SPEC = ROOT / "tests" / "openapi" / "petstore.yaml"


@pytest.fixture
def store() -> Iterator[PetStoreServer]:
    with PetStoreServer() as server:
        server.store.add(name="Rex", species="dog", age=3)
        server.store.add(name="Tom", species="cat", age=5)
        yield server


@pytest.fixture
def pets(store: PetStoreServer) -> Iterator[Catalog]:
    catalog = Catalog.from_openapi(SPEC, base_url=store.url)
    yield catalog
    catalog.close()


def one_step(capability: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"steps": [{"id": "s1", "tool": "pet_store", "capability": capability, "params": params}]}


def test_operations_become_capabilities_with_resolved_schemas(pets: Catalog) -> None:
    assert sorted(c.name for c in pets) == ["createPet", "deletePet", "getPet", "listPets", "searchPets"]
    get_pet = pets.get("pet_store", "getPet")
    assert get_pet.source == f"openapi:{SPEC}"
    # the path-level parameter was a $ref to components/parameters
    assert get_pet.input_schema["properties"]["petId"] == {
        "type": "integer", "minimum": 1, "description": "The pet's numeric id."}
    assert get_pet.input_schema["required"] == ["petId"]
    listing = pets.get("pet_store", "listPets").input_schema["properties"]
    assert set(listing) == {"limit", "species", "tags", "X-Request-Id"}
    assert listing["species"] == {"type": "string", "enum": ["cat", "dog", "bird"]}
    body = pets.get("pet_store", "createPet").input_schema["properties"]["body"]
    assert body["required"] == ["name", "species"]
    # a $ref to another file (./owner.yaml) is resolved and inlined
    assert body["properties"]["owner"]["properties"]["phone"] == {"type": "string"}
    assert "$ref" not in str(body)
    # a recursive schema (Pet.friends: [Pet]) becomes a local $defs entry
    output = get_pet.output_schema
    assert output is not None and output["$ref"] == "#/$defs/Pet"
    assert output["$defs"]["Pet"]["properties"]["friends"]["items"] == {"$ref": "#/$defs/Pet"}
    # idempotency from the method, and from x-idempotent on a POST that changes nothing
    flags = {c.name: c.idempotent for c in pets}
    assert flags == {"listPets": True, "getPet": True, "deletePet": True, "createPet": False,
                     "searchPets": True}


def test_path_query_header_and_coercion_reach_the_server(pets: Catalog, store: PetStoreServer) -> None:
    plan = {"steps": [
        {"id": "one", "tool": "pet_store", "capability": "getPet", "params": {"petId": "2"}},
        {"id": "dogs", "tool": "pet_store", "capability": "listPets",
         "params": {"species": "dog", "limit": "10", "tags": ["good", "old"], "X-Request-Id": "r-1"}},
    ]}
    result = orchestrator(pets, [plan]).run("pets")
    assert result.status == "succeeded", result.error
    assert result.steps["one"].output == {"id": 2, "name": "Tom", "species": "cat", "age": 5}
    assert [p["name"] for p in result.steps["dogs"].output] == ["Rex"]
    by_path = {(r.method, r.path): r for r in store.store.requests}
    assert ("GET", "/pets/2") in by_path  # "2" became 2 (layer 2), rendered in the path
    listing = by_path[("GET", "/pets")]
    assert listing.query == {"species": ["dog"], "limit": ["10"], "tags": ["good", "old"]}
    assert listing.headers["X-Request-Id"] == "r-1"


def capitalise_from_detail(request: LLMRequest) -> dict[str, Any]:
    """Layer 3 as a model would answer: the 422 body says which field and what rule."""
    params = dict(block(request.prompt_text, "failed parameters"))
    error = str(block(request.prompt_text, "tool error"))
    if "capital letter" not in error or '"name"' not in error:
        return {"can_fix": False, "analysis": "no usable detail", "corrected_parameters": {}}
    body = dict(params["body"])
    body["name"] = body["name"][:1].upper() + body["name"][1:]
    return {"can_fix": True, "analysis": "the name must be capitalised",
            "corrected_parameters": {**params, "body": body}}


def test_a_422_detail_body_lets_layer_3_fix_the_json_body(pets: Catalog, store: PetStoreServer) -> None:
    def script(request: LLMRequest) -> Any:
        if request.purpose == "plan":
            return one_step("createPet", {"body": {"name": "polly", "species": "bird"}})
        if request.purpose == "validation_feedback":
            return capitalise_from_detail(request)
        raise AssertionError(request.purpose)

    result = orchestrator(pets, script).run("add polly")
    assert result.status == "succeeded", result.error
    first, second = result.steps["s1"].attempts
    assert first.error is not None
    assert (first.error.category, first.error.code, first.error.http_status) == (
        ErrorCategory.INPUT_ERROR, "HTTP_422", 422)
    assert first.error.details["body"]["detail"][0]["msg"] == "name must start with a capital letter"
    assert second.layer == "validation_feedback" and second.params["body"]["name"] == "Polly"
    assert result.steps["s1"].output == {"id": 3, "name": "Polly", "species": "bird"}
    posts = [r.body for r in store.store.requests if r.method == "POST"]
    assert posts == [{"name": "polly", "species": "bird"}, {"name": "Polly", "species": "bird"}]


def test_a_429_waits_for_retry_after_then_succeeds(pets: Catalog, store: PetStoreServer) -> None:
    store.store.rate_limited, store.store.retry_after = 1, "2"
    clock = ManualClock()
    orch = Orchestrator(catalog=pets, llm=ScriptedLLM([one_step("listPets", {"limit": 1})]),
                        registry=CollectorRegistry(), clock=clock,
                        config=OrchestratorConfig(synthesis_enabled=False))
    result = orch.run("list")
    assert result.status == "succeeded", result.error
    first, second = result.steps["s1"].attempts
    assert first.error is not None and first.error.category == ErrorCategory.RATE_LIMIT
    assert first.error.retry_after_s == 2.0
    assert second.layer == "resilience" and clock.sleeps == [2.0]


def test_404_and_an_empty_204_are_classified(pets: Catalog) -> None:
    plan = {"steps": [
        {"id": "gone", "tool": "pet_store", "capability": "getPet", "params": {"petId": 99}},
        {"id": "delete", "tool": "pet_store", "capability": "deletePet", "params": {"petId": 1}},
    ]}
    result = orchestrator(pets, [plan], validation_feedback_enabled=False,
                          semantic_retry_enabled=False).run("x")
    gone = result.steps["gone"].error
    assert gone is not None and (gone.category, gone.http_status) == (ErrorCategory.NOT_FOUND, 404)
    assert result.steps["delete"].status == "succeeded" and result.steps["delete"].output is None


def test_operations_filter_and_unknown_operation(store: PetStoreServer) -> None:
    catalog = Catalog.from_openapi(SPEC, base_url=store.url, operations=["getPet", "listPets"],
                                   name="pets")
    assert sorted(c.key for c in catalog) == ["pets.getPet", "pets.listPets"]
    with pytest.raises(CatalogError, match=r"no operation.*updatePet.*it has: createPet"):
        Catalog.from_openapi(SPEC, base_url=store.url, operations=["getPet", "updatePet"])


def test_an_invalid_spec_names_the_place(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("openapi: 3.0.3\ninfo: {title: t, version: '1'}\n"
                   "paths:\n  /x:\n    get:\n      responses:\n        '200': {descriptio: ok}\n"
                   "  /y:\n    get: {operationId: noResponses}\n")
    # strict: refused at the first problem, naming the operation and the JSON pointer
    with pytest.raises(CatalogError, match=r"GET /x at #/paths/~1x/get/responses/200: spec "
                       r"validation: .*strict=True"):
        Catalog.from_openapi(bad, base_url="http://127.0.0.1:9", strict=True)
    # by default: what can be mapped is, and the validator's findings are notes
    catalog = Catalog.from_openapi(bad, base_url="http://127.0.0.1:9", validate=True)
    assert sorted(c.name for c in catalog) == ["get_x", "noResponses"]
    assert [(n.item, n.pointer) for n in catalog.notes] == [
        ("GET /x", "#/paths/~1x/get/responses/200"), ("GET /y", "#/paths/~1y/get")]
    assert "'responses' is a required property" in catalog.notes[1].message
    dangling = tmp_path / "dangling.yaml"
    dangling.write_text("openapi: 3.1.0\ninfo: {title: t, version: '1'}\npaths:\n  /x:\n    get:\n"
                        "      parameters: [{$ref: '#/components/parameters/Nope'}]\n"
                        "      responses: {'200': {description: ok}}\n"
                        "  /ok:\n    get: {responses: {'200': {description: ok}}}\n")
    with pytest.raises(CatalogError, match=r"get_x.*#/paths/~1x/get/parameters/0.*Nope"):
        Catalog.from_openapi(dangling, base_url="http://127.0.0.1:9", strict=True)
    catalog = Catalog.from_openapi(dangling, base_url="http://127.0.0.1:9")
    assert [c.name for c in catalog] == ["get_ok"]
    [skipped] = catalog.skipped
    assert (skipped.item, skipped.pointer) == ("get_x (GET /x)", "#/paths/~1x/get/parameters/0")
    assert "'#/components/parameters/Nope' does not resolve" in skipped.message
    swagger = tmp_path / "swagger.yaml"  # Swagger 1.2: what came before 2.0
    swagger.write_text("swaggerVersion: '1.2'\napis: []\n")
    with pytest.raises(CatalogError, match=r"only OpenAPI 3\.0, 3\.1 and Swagger 2\.0 .* "
                       r"says no version"):
        Catalog.from_openapi(swagger, base_url="http://127.0.0.1:9")
    relative = tmp_path / "relative.yaml"
    relative.write_text("openapi: 3.1.0\ninfo: {title: t, version: '1'}\nservers: [{url: /v1}]\n"
                        "paths: {}\n")
    with pytest.raises(CatalogError, match=r"no absolute server URL.*give base_url"):
        Catalog.from_openapi(relative)


def test_openapi_30_dialect_is_translated(tmp_path: Path) -> None:
    spec = tmp_path / "v30.yaml"
    spec.write_text("""
openapi: 3.0.3
info: {title: Thermo, version: "1"}
servers: [{url: "http://127.0.0.1:9"}]
paths:
  /set:
    post:
      operationId: setTemperature
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                celsius: {type: number, minimum: -50, exclusiveMinimum: true}
                label: {type: string, nullable: true}
      responses: {"200": {description: ok}}
""")
    catalog = Catalog.from_openapi(spec)
    cap = catalog.get("thermo", "setTemperature")
    props = cap.input_schema["properties"]["body"]["properties"]
    assert props["celsius"] == {"type": "number", "exclusiveMinimum": -50}
    assert props["label"] == {"type": ["string", "null"]}
    assert cap.invoker is not None


def test_a_spec_served_over_http_resolves_its_relative_refs(store: PetStoreServer) -> None:
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(SPEC.parent))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/petstore.yaml"
        catalog = Catalog.from_openapi(url, base_url=store.url)
        owner = catalog.get("pet_store", "createPet").input_schema["properties"]["body"]["properties"]["owner"]
        assert owner["required"] == ["name"]
        result = orchestrator(catalog, [one_step("getPet", {"petId": 1})]).run("get")
        assert result.steps["s1"].output["name"] == "Rex"
        catalog.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
