"""The shapes real OpenAPI documents take, each loaded through the public API: what is
mapped, what is repaired (a note), what is left out (skipped, with its pointer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestration import Catalog, CatalogError
from orchestration.capability import schema_problems
from tests.openapi.corpus import kept_documents, materialize

pytest.importorskip("openapi_spec_validator", reason="the 'openapi' extra is not installed")

BASE = "http://127.0.0.1:9"


def write(tmp_path: Path, doc: dict[str, Any], name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def doc(paths: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"openapi": "3.0.3", "info": {"title": "Test - Api", "version": "1"}}
    if paths is not None:
        out["paths"] = paths
    out.update(extra)
    return out


OK = {"200": {"description": "ok"}}


def test_a_31_document_without_paths_loads_empty(tmp_path: Path) -> None:
    spec = doc(webhooks={"newPet": {"post": {"responses": OK}}})
    spec["openapi"] = "3.1.0"
    catalog = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE, validate=True)
    assert len(catalog) == 0 and catalog.skipped == [] and catalog.notes == []


def test_yaml_is_read_by_yaml_1_2_rules_as_openapi_tools_write_it(tmp_path: Path) -> None:
    """PyYAML's YAML 1.1 would read ``on``/``off`` as booleans, ``12:30`` as 750 and
    ``017`` as 15: values the API never meant, sent on the wire as they were read."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("""openapi: 3.0.3
info: {title: Lights, version: '1'}
paths:
  /lamp:
    put:
      operationId: setLamp
      parameters:
        - {name: state, in: query, required: true, schema: {type: string, enum: [on, off]}}
        - {name: at, in: query, schema: {type: string, example: 12:30}}
        - {name: mode, in: query, schema: {type: integer, default: 017}}
        - {name: since, in: query, schema: {type: string, example: 2024-01-01}}
        - {name: gain, in: query, schema: {type: number, default: .5, maximum: 1e3}}
      responses: {'204': {description: done}}
""")
    props = Catalog.from_openapi(spec, base_url=BASE).get("lights", "setLamp").input_schema[
        "properties"]
    assert props["state"]["enum"] == ["on", "off"]
    assert props["at"]["example"] == "12:30" and props["since"]["example"] == "2024-01-01"
    assert props["mode"]["default"] == 17
    assert props["gain"] == {"type": "number", "default": 0.5, "maximum": 1000.0}


def test_swagger_2_short_references_name_definitions(tmp_path: Path) -> None:
    """Swagger 2.0's ``$ref: pet`` (no '#', '/' or '.') is read as ``#/definitions/pet``,
    as Swagger's own tools read it (the original petstore-simple example writes it so)."""
    spec = {"swagger": "2.0", "info": {"title": "Pets", "version": "1"}, "host": "127.0.0.1:9",
            "definitions": {"pet": {"type": "object", "required": ["name"],
                                    "properties": {"name": {"type": "string"}}},
                            "petInput": {"allOf": [{"$ref": "pet"}, {"type": "object"}]}},
            "paths": {"/pets": {"post": {"operationId": "addPet", "parameters": [
                {"name": "pet", "in": "body", "required": True, "schema": {"$ref": "petInput"}}],
                "responses": {"200": {"description": "ok", "schema": {"$ref": "pet"}}}}}}}
    catalog = Catalog.from_openapi(write(tmp_path, spec))
    cap = catalog.get("pets", "addPet")
    assert catalog.skipped == [] and cap.output_schema is not None
    assert cap.output_schema["required"] == ["name"]
    assert cap.input_schema["properties"]["body"]["allOf"][0]["required"] == ["name"]


def test_names_are_clean_identifiers(tmp_path: Path) -> None:
    spec = doc({"/pets/{petId}/photos": {"get": {"responses": OK}},
                "x-codegen-contextRoot": "/apis/registry",  # an extension, as Apicurio has
                "/v1/a.b": {"post": {"operationId": "make thing!", "responses": OK}}})
    catalog = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)
    assert sorted(c.key for c in catalog) == ["test_api.get_pets_petId_photos",
                                              "test_api.make_thing"]
    assert catalog.skipped == []


def test_duplicate_required_is_normalised_with_a_note(tmp_path: Path) -> None:
    spec = doc({"/c": {"get": {"operationId": "ListContainers", "responses": {"200": {
        "description": "ok", "content": {"application/json": {"schema": {
            "$ref": "#/components/schemas/List"}}}}}}}},
        components={"schemas": {"List": {"type": "object", "required": ["id", "id", "name"],
                                          "properties": {"id": {"type": "string"},
                                                         "name": {"type": "string"}}}}})
    catalog = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)
    cap = catalog.get("test_api", "ListContainers")
    assert cap.output_schema is not None
    assert cap.output_schema["required"] == ["id", "name"]
    [note] = catalog.notes
    assert note.pointer == "#/components/schemas/List/required"
    assert "duplicate 'required' entries removed" in note.message
    with pytest.raises(CatalogError, match=r"ListContainers.*#/components/schemas/List/required"):
        Catalog.from_openapi(write(tmp_path, spec), base_url=BASE, strict=True)


def test_a_schema_met_again_is_repaired_and_noted_at_each_place(tmp_path: Path) -> None:
    """Valid schemas are checked once per document (a parameter shared by thousands of
    operations); an invalid one is repaired, and noted, wherever it stands."""
    bad = {"type": "object", "required": ["a", "a"], "properties": {"a": {"type": "string"}}}
    good = {"type": "integer", "minimum": 1}
    spec = doc({f"/{p}": {"get": {"operationId": p, "parameters": [
        {"name": "filter", "in": "query", "content": {"application/json": {"schema": bad}}},
        {"name": "top", "in": "query", "schema": good}], "responses": OK}} for p in "xy"})
    catalog = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)
    for name in "xy":
        props = catalog.get("test_api", name).input_schema["properties"]
        assert props["filter"]["required"] == ["a"] and props["top"] == good
    assert sorted(n.pointer for n in catalog.notes) == [
        "#/paths/~1x/get/parameters/0/schema/required",
        "#/paths/~1y/get/parameters/0/schema/required"]


def test_recursive_nullable_and_composed_schemas(tmp_path: Path) -> None:
    spec = doc({"/tree": {"parameters": [{"name": "depth", "in": "query",
                                          "schema": {"type": "integer", "nullable": True}}],
                          "post": {"requestBody": {"required": True, "content": {
                              "application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}},
                              "responses": OK}}},
               components={"schemas": {
                   "Node": {"allOf": [{"$ref": "#/components/schemas/Base"}, {
                       "type": "object", "properties": {
                           "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
                           "kind": {"oneOf": [{"type": "string", "enum": ["a", "b"]},
                                              {"type": "integer"}]},
                           "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                           "label": {"type": "string", "nullable": True, "enum": ["x", "y"]}}}]},
                   "Base": {"type": "object", "required": ["name"], "properties": {
                       "name": {"type": "string", "description": "its name " * 80}}}}})
    catalog = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)
    cap = catalog.get("test_api", "post_tree")
    schema = cap.input_schema
    assert schema_problems(schema, "tree") == []
    assert schema["properties"]["depth"]["type"] == ["integer", "null"]
    assert schema["required"] == ["body"]
    assert schema["properties"]["body"] == {"$ref": "#/$defs/Node"}
    node = schema["$defs"]["Node"]["allOf"][1]["properties"]
    assert node["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert node["label"] == {"type": ["string", "null"], "enum": ["x", "y", None]}
    # the validator the engine uses follows the recursion
    from orchestration._schema import validator

    check = validator(schema)
    good = {"body": {"name": "root", "children": [{"name": "leaf", "kind": 3, "label": None}]}}
    assert list(check.iter_errors(good)) == []
    bad = {"body": {"name": "root", "children": [{"kind": "c"}]}}
    assert len(list(check.iter_errors(bad))) >= 1


def test_path_level_parameters_and_an_override(tmp_path: Path) -> None:
    spec = doc({"/pets/{id}": {
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                       {"name": "id", "in": "query", "schema": {"type": "integer"}},
                       {"name": "trace", "in": "header", "schema": {"type": "string"}}],
        "get": {"operationId": "getPet", "parameters": [
            {"name": "trace", "in": "header", "required": True, "schema": {"type": "string",
                                                                           "minLength": 3}},
            {"name": "session", "in": "cookie", "schema": {"type": "string"}},
            {"name": "Accept", "in": "header", "schema": {"type": "string"}}],
            "responses": OK}}})
    cap = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE).get("test_api", "getPet")
    props = cap.input_schema["properties"]
    assert set(props) == {"id", "id_query", "trace", "session"}  # Accept is ignored (OpenAPI)
    assert props["trace"] == {"type": "string", "minLength": 3}
    assert sorted(cap.input_schema["required"]) == ["id", "trace"]


def test_one_bad_operation_is_left_out_with_its_pointer(tmp_path: Path) -> None:
    spec = doc({"/a": {"get": {"operationId": "good", "responses": OK},
                       "post": {"operationId": "noSchema", "requestBody": {"content": {
                           "application/json": {"schema": {"$ref": "#/components/schemas/Gone"}}}},
                                "responses": OK}},
                "/b": {"get": {"operationId": "badParam", "parameters": [{"in": "query"}],
                               "responses": OK}},
                "/c": {"$ref": "#/components/pathItems/Nope"}})
    catalog = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)
    assert [c.name for c in catalog] == ["good"]
    reasons = {s.item: (s.pointer, s.message) for s in catalog.skipped}
    assert reasons["noSchema (POST /a)"][0] == \
        "#/paths/~1a/post/requestBody/content/application~1json/schema"
    assert "'#/components/schemas/Gone' does not resolve" in reasons["noSchema (POST /a)"][1]
    assert reasons["badParam (GET /b)"] == (
        "#/paths/~1b/get/parameters/0",
        "a parameter needs a 'name' and 'in' (path, query, header or cookie)")
    assert "does not resolve" in reasons["(every operation of /c)"][1]
    with pytest.raises(CatalogError, match=r"noSchema \(POST /a\) at #/paths/~1a/post/requestBody"):
        Catalog.from_openapi(write(tmp_path, spec), base_url=BASE, strict=True)


def test_a_body_offered_only_as_xml_takes_the_xml_text(tmp_path: Path) -> None:
    """openSUSE's Build Service takes 17 of its 81 bodies only as XML (left out before):
    the capability takes the XML text and sends it as the document says."""
    spec = doc({"/meta": {"put": {"operationId": "putMeta", "requestBody": {
        "required": True, "content": {"application/xml; charset=utf-8": {"schema": {
            "type": "object", "description": "the package's meta data"}}}},
        "responses": OK}}})
    cap = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE).get("test_api", "putMeta")
    assert cap.input_schema["properties"]["body"] == {
        "type": "string",
        "description": "the body as application/xml; charset=utf-8 text: the package's meta data"}
    request = cap.invoker.operation.render({"body": "<package name='a'/>"})  # type: ignore[union-attr]
    assert request.content["content"] == b"<package name='a'/>"
    assert request.content["headers"] == {"Content-Type": "application/xml; charset=utf-8"}


def test_a_multi_file_document_resolves_files_beside_it(tmp_path: Path) -> None:
    """Box's real document, split the way DigitalOcean keeps its own: one file per schema,
    and properties that point into another file (``attributes.yml#/name``)."""
    [real] = [d for d in kept_documents() if d.name == "box.com"]
    data = json.loads(materialize(real, tmp_path).read_text())
    schemas = data["components"].pop("schemas")
    (tmp_path / "models").mkdir()

    def relink(node: Any, prefix: str) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[-1]
                return {"$ref": f"{prefix}{name}.yml"}
            return {k: relink(v, prefix) for k, v in node.items()}
        if isinstance(node, list):
            return [relink(v, prefix) for v in node]
        return node

    attributes: dict[str, Any] = {}
    for name, schema in schemas.items():
        schema = relink(schema, "")
        props = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(props, dict):  # a property defined in attributes.yml, as DO does
            for key in list(props)[:1]:
                attributes[f"{name}_{key}"] = props[key]
                props[key] = {"$ref": f"attributes.yml#/{name}_{key}"}
        (tmp_path / "models" / f"{name}.yml").write_text(yaml.safe_dump(schema))
    (tmp_path / "models" / "attributes.yml").write_text(yaml.safe_dump(attributes))
    root = write(tmp_path, relink(data, "models/"), "box-public.yaml")
    catalog = Catalog.from_openapi(root, base_url=BASE)
    whole = Catalog.from_openapi(materialize(real, tmp_path), base_url=BASE)
    assert len(catalog) == len(whole) == 260 and catalog.skipped == []
    split = catalog.get("box_platform_api", "post_folders").input_schema
    assert split == whole.get("box_platform_api", "post_folders").input_schema
    catalog.close()
    whole.close()


def test_digitaloceans_own_files_map_like_its_bundled_document(tmp_path: Path) -> None:
    """DigitalOcean's specification folder as its authors keep it (2,907 files, each
    operation in its own) maps the operations the bundled document of the corpus has
    with the same parameters (the folder is newer: it has more operations)."""
    docs = {d.name: d for d in kept_documents()}
    split = Catalog.from_openapi(materialize(docs["digitalocean.com_multifile"], tmp_path),
                                 base_url=BASE)
    bundled = Catalog.from_openapi(materialize(docs["digitalocean.com"], tmp_path), base_url=BASE)
    try:
        assert len(split) == 659 and split.skipped == []
        same = 0
        for cap in bundled:
            mine = {c.name: c for c in split}.get(cap.name)
            if mine is None:
                continue
            same += set(mine.input_schema["properties"]) == set(cap.input_schema["properties"])
        assert same >= 250  # of the bundled document's 290 (the API moved on in between)
        with pytest.raises(CatalogError, match=r"no operation\(s\) droplets_lst \(it has 659; "
                           r"closest: droplets_list, "):
            Catalog.from_openapi(materialize(docs["digitalocean.com_multifile"], tmp_path),
                                 base_url=BASE, operations=["droplets_lst"])
        create = split.get("digitalocean_api", "loadBalancers_create").input_schema
        assert "droplet_ids" in json.dumps(create) and '"$ref": "attributes' not in json.dumps(create)
    finally:
        split.close()
        bundled.close()


def test_a_multi_file_document_given_as_a_url_is_fetched_over_few_connections(
        tmp_path: Path) -> None:
    """DigitalOcean's folder served on 127.0.0.1 and loaded by URL: its files are fetched
    from the spec's own origin over kept-alive connections (a client per file made this
    load take 141 s instead of 5)."""
    import functools
    import http.server
    import threading

    docs = {d.name: d for d in kept_documents()}
    root = materialize(docs["digitalocean.com_multifile"], tmp_path)
    connections: list[int] = []
    requests: list[str] = []

    class Files(http.server.SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers offer
        disable_nagle_algorithm = True  # headers and body are written apart

        def setup(self) -> None:
            connections.append(1)
            super().setup()

        def log_message(self, format: str, *args: Any) -> None:
            requests.append(str(args[0]))

    handler = functools.partial(Files, directory=str(root.parent.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/specification/{root.name}"
        catalog = Catalog.from_openapi(url, base_url=BASE)
        assert len(catalog) == 659 and catalog.skipped == []
        assert len(requests) > 1000 and len(connections) <= 5
        catalog.close()
    finally:
        server.shutdown()
        server.server_close()


def test_operations_and_property_maps_kept_in_other_files(tmp_path: Path) -> None:
    """DigitalOcean's own layout: each operation is a file (``get: {$ref: ...}``) whose
    references are relative to it, and a ``properties`` map can itself be a reference
    (``properties: {$ref: 'attributes.yml#/ids'}``), which is not a property named $ref."""
    (tmp_path / "resources" / "lb" / "models").mkdir(parents=True)
    (tmp_path / "resources" / "lb" / "lb_create.yml").write_text(yaml.safe_dump({
        "operationId": "loadBalancers_create",
        "parameters": [{"$ref": "parameters.yml#/tag"}],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "models/lb.yml"}}}},
        "responses": {"202": {"description": "ok", "content": {"application/json": {
            "schema": {"$ref": "models/lb.yml"}}}}}}))
    (tmp_path / "resources" / "lb" / "parameters.yml").write_text(yaml.safe_dump({
        "tag": {"name": "tag", "in": "query", "schema": {"type": "string"}}}))
    (tmp_path / "resources" / "lb" / "models" / "lb.yml").write_text(yaml.safe_dump({
        "allOf": [{"type": "object", "required": ["name"],
                   "properties": {"name": {"type": "string"}}},
                  {"type": "object", "properties": {"$ref": "attributes.yml#/droplet_ids"}}]}))
    (tmp_path / "resources" / "lb" / "models" / "attributes.yml").write_text(yaml.safe_dump({
        "droplet_ids": {"droplet_ids": {"type": "array", "items": {"type": "integer"}}}}))
    root = write(tmp_path, doc({"/v2/load_balancers": {
        "post": {"$ref": "resources/lb/lb_create.yml"},
        "get": {"$ref": "resources/lb/missing.yml"}}}), "public.v2.yaml")
    catalog = Catalog.from_openapi(root, base_url=BASE)
    cap = catalog.get("test_api", "loadBalancers_create")
    assert cap.method == "POST" and not cap.idempotent
    assert set(cap.input_schema["properties"]) == {"tag", "body"}
    body = cap.input_schema["properties"]["body"]  # small: inlined rather than a $defs entry
    assert body["allOf"][1]["properties"] == {
        "droplet_ids": {"type": "array", "items": {"type": "integer"}}}
    assert cap.output_schema == body
    assert catalog.notes == []
    [skipped] = catalog.skipped  # the operation whose file is missing, and only it
    assert skipped.item == "get_v2_load_balancers (GET /v2/load_balancers)"
    assert "resources/lb/missing.yml" in skipped.message and "No such file" in skipped.message
    catalog.close()


@pytest.mark.parametrize("count", [600, 4000])
def test_hundreds_of_query_parameters_stay_within_the_budget(tmp_path: Path, count: int) -> None:
    """gsmtasks.com's task_exports_list has 582 filter parameters (64 KiB of schema even
    cut one level deep, before): each keeps its name and type; past what even that
    allows, the required ones are described and the others named, and still sent."""
    from orchestration.sources.openapi import MAX_SCHEMA_BYTES

    params = [{"name": "page", "in": "query", "required": True, "schema": {"type": "integer"}}]
    params += [{"name": f"field_{i}__icontains", "in": "query", "description": "filter " * 9,
                "schema": {"type": "string", "maxLength": 200}} for i in range(count)]
    spec = doc({"/exports": {"get": {"operationId": "exports_list", "parameters": params,
                                     "responses": OK}}})
    catalog = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)
    cap = catalog.get("test_api", "exports_list")
    schema = cap.input_schema
    assert len(json.dumps(schema, separators=(",", ":"))) <= MAX_SCHEMA_BYTES
    assert schema_problems(schema, "exports") == [] and schema["required"] == ["page"]
    [note] = catalog.notes
    assert "even one level deep" in note.message
    if count == 600:
        assert len(schema["properties"]) == 601 and not schema["additionalProperties"]
        assert schema["properties"]["field_7__icontains"] == {"type": "string"}
    else:
        assert set(schema["properties"]) == {"page"} and schema["additionalProperties"]
        assert "field_0__icontains, field_1__icontains" in schema["description"]
        assert schema["description"].endswith(" more")
        request = cap.invoker.operation.render(  # type: ignore[union-attr]
            {"page": 2, "field_3999__icontains": "x"})
        assert list(request.query) == [("page", "2"), ("field_3999__icontains", "x")]
    catalog.close()


def test_references_never_reach_the_network_unless_allowed(tmp_path: Path) -> None:
    spec = doc({"/x": {"get": {"operationId": "remote", "parameters": [{
        "name": "q", "in": "query",
        "schema": {"$ref": "http://127.0.0.1:9/schemas.yaml#/Q"}}], "responses": OK}}})
    catalog = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)
    [skipped] = catalog.skipped
    assert "allow_remote_refs=True" in skipped.message
    assert skipped.pointer == "#/paths/~1x/get/parameters/0/schema"
    # allowed: it is fetched (nothing listens on port 9: a read error, not a refusal)
    allowed = Catalog.from_openapi(write(tmp_path, spec), base_url=BASE, allow_remote_refs=True)
    [failed] = allowed.skipped
    assert "allow_remote_refs" not in failed.message and "cannot read" in failed.message


def test_a_title_makes_a_clean_tool_name(tmp_path: Path) -> None:
    spec = doc({"/x": {"get": {"responses": OK}}})
    spec["info"]["title"] = "Twilio - Api"
    assert [c.tool for c in Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)] == ["twilio_api"]
    spec["info"]["title"] = "  "
    assert [c.tool for c in Catalog.from_openapi(write(tmp_path, spec), base_url=BASE)] == ["api"]


def test_dagwright_tools_skipped_lists_what_was_left_out(tmp_path: Path) -> None:
    import io

    from orchestration.cli import main

    spec = doc({"/a": {"get": {"operationId": "good", "responses": OK},
                       "post": {"operationId": "noSchema", "requestBody": {"content": {
                           "application/json": {"schema": {"$ref": "#/components/schemas/Gone"}}}},
                                "responses": OK}}})
    write(tmp_path, spec)
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(
        {"openapi": [{"spec": "spec.yaml", "base_url": BASE, "credentials": {}}]}))
    out = io.StringIO()
    assert main(["tools", "--catalog", str(tmp_path / "catalog.yaml"), "--skipped"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("noSchema (POST /a) (skipped) at #/paths/~1a/post/requestBody/content/"
                             "application~1json/schema: $ref '#/components/schemas/Gone' does "
                             "not resolve: there is no 'components' where the pointer leads")
    assert lines[-1] == "1 left out, 0 note(s), 1 capabilities"
    listing = io.StringIO()
    assert main(["tools", "--catalog", str(tmp_path / "catalog.yaml")], out=listing) == 0
    assert "(1 operation(s) left out: dagwright tools --skipped)" in listing.getvalue()
