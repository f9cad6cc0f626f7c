"""Whole plans over real OpenAPI documents against a loopback server that records each
request: path, query, header, cookie, JSON, form and multipart parameters are checked as
they arrived on the wire, with the credentials the document's securitySchemes ask for."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestration import Catalog, CatalogError
from tests.openapi.corpus import kept_documents, materialize
from tests.openapi.recording_server import RecordingServer
from tests.support.sources import orchestrator

pytest.importorskip("openapi_spec_validator", reason="the 'openapi' extra is not installed")


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with RecordingServer() as recording:
        yield recording


def real(name: str, tmp_path: Path) -> Path:
    [doc] = [d for d in kept_documents() if d.name == name]
    return materialize(doc, tmp_path)


def run(catalog: Catalog, steps: list[dict[str, Any]]) -> Any:
    result = orchestrator(catalog, [{"steps": steps}]).run("do it")
    assert result.status == "succeeded", (result.error, {k: s.error for k, s in result.steps.items()})
    return result


def test_twilio_form_body_path_parameter_and_basic_auth(tmp_path: Path, server: RecordingServer) -> None:
    secret = "AC0123456789abcdef0123456789abcdef:s3cr3t-auth-token"
    catalog = Catalog.from_openapi(real("twilio.com_api", tmp_path), base_url=server.url,
                                   credentials={"accountSid_authToken": secret})
    account = "AC" + "0123456789abcdef" * 2
    run(catalog, [{"id": "send", "tool": "twilio_api", "capability": "CreateMessage", "params": {
        "AccountSid": account,
        "body": {"To": "+15551234567", "From": "+15557654321", "Body": "héllo & bye",
                 "PersistentAction": ["mailto:a@example.com", "sms:+15550000000"],
                 "ValidityPeriod": 600, "SmartEncoded": True}}}])
    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", f"/2010-04-01/Accounts/{account}/Messages.json")
    assert sent.content_type == "application/x-www-form-urlencoded"
    assert sent.form() == [("To", "+15551234567"), ("From", "+15557654321"),
                           ("Body", "héllo & bye"), ("PersistentAction", "mailto:a@example.com"),
                           ("PersistentAction", "sms:+15550000000"), ("ValidityPeriod", "600"),
                           ("SmartEncoded", "true")]
    assert sent.headers["authorization"] == "Basic " + base64.b64encode(secret.encode()).decode()
    # the credential lives only in the request: not in the capability, not in the catalog
    assert secret not in json.dumps(catalog.to_dict(skip_unnamed_functions=True), default=str)
    catalog.close()


def test_digitalocean_bearer_query_and_json_body(tmp_path: Path, server: RecordingServer) -> None:
    catalog = Catalog.from_openapi(real("digitalocean.com", tmp_path), base_url=server.url,
                                   credentials={"bearer_auth": "dop_v1_" + "f" * 64})
    run(catalog, [
        {"id": "list", "tool": "digitalocean_api", "capability": "droplets_list",
         "params": {"per_page": 5, "page": 2, "tag_name": "web"}},
        {"id": "make", "tool": "digitalocean_api", "capability": "volumes_create", "params": {
            "body": {"name": "data-1", "size_gigabytes": 10, "region": "nyc1",
                     "tags": ["web", "prod"]}}},
    ])
    by_path = {r.path: r for r in server.requests}
    listing = by_path["/v2/droplets"]
    assert listing.method == "GET"
    assert sorted(listing.query) == [("page", "2"), ("per_page", "5"), ("tag_name", "web")]
    assert listing.headers["authorization"] == "Bearer dop_v1_" + "f" * 64
    made = by_path["/v2/volumes"]
    assert made.method == "POST" and made.content_type == "application/json"
    assert made.json() == {"name": "data-1", "size_gigabytes": 10, "region": "nyc1",
                           "tags": ["web", "prod"]}
    catalog.close()


def test_discourse_multipart_upload_from_content_and_from_an_allowed_path(
        tmp_path: Path, server: RecordingServer) -> None:
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    (uploads / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    catalog = Catalog.from_openapi(real("discourse.local", tmp_path), base_url=server.url,
                                   upload_dirs=[uploads])
    cap = catalog.get("discourse_api_documentation", "createUpload")
    assert "anyOf" in cap.input_schema["properties"]["body"]["properties"]["file"]
    run(catalog, [
        {"id": "text", "tool": "discourse_api_documentation", "capability": "createUpload",
         "params": {"body": {"type": "composer", "synchronous": True, "file": {
             "filename": "notes.txt", "content_type": "text/plain", "content": "hello"}}}},
        {"id": "path", "tool": "discourse_api_documentation", "capability": "createUpload",
         "params": {"body": {"type": "avatar", "user_id": 7,
                             "file": str(uploads / "photo.png")}}},
    ])
    assert len(server.requests) == 2
    for sent in server.requests:
        assert (sent.method, sent.path) == ("POST", "/uploads.json")
        assert sent.content_type.startswith("multipart/form-data; boundary=")
    parts = sorted(({p.name: p for p in r.parts} for r in server.requests),
                   key=lambda ps: ps["type"].content)
    avatar, composer = parts
    assert composer["type"].content == b"composer" and composer["synchronous"].content == b"true"
    assert (composer["file"].filename, composer["file"].content_type,
            composer["file"].content) == ("notes.txt", "text/plain", b"hello")
    assert avatar["user_id"].content == b"7"
    assert (avatar["file"].filename, avatar["file"].content_type,
            avatar["file"].content) == ("photo.png", "image/png", b"\x89PNG\r\n\x1a\nfake")
    catalog.close()


def test_a_path_outside_the_upload_dirs_is_refused_before_sending(
        tmp_path: Path, server: RecordingServer) -> None:
    catalog = Catalog.from_openapi(real("discourse.local", tmp_path), base_url=server.url)
    result = orchestrator(catalog, [{"steps": [
        {"id": "up", "tool": "discourse_api_documentation", "capability": "createUpload",
         "params": {"body": {"type": "composer", "file": "/etc/passwd"}}}]}],
        validation_feedback_enabled=False, semantic_retry_enabled=False).run("upload")
    assert result.status == "failed"
    assert "upload_dirs" in str(result.steps["up"].error)
    assert server.requests == []
    catalog.close()


@pytest.mark.parametrize(("given", "expected"), [
    ({"HeaderApiKey": "key-header-123"}, ("header", "x-api-key", "key-header-123")),
    ({"QueryApiKey": "key-query-456"}, ("query", "key", "key-query-456")),
    ({"CookieSid": "sid-789"}, ("header", "cookie", "brain.sid=sid-789")),
])
def test_api_keys_in_header_query_or_cookie(tmp_path: Path, server: RecordingServer,
                                            given: dict[str, str], expected: tuple[str, str, str]) -> None:
    catalog = Catalog.from_openapi(real("intellifi.nl", tmp_path), base_url=server.url,
                                   credentials=given)
    cap = next(c for c in catalog if c.method == "GET" and c.invoker.operation.path == "/blobs")
    run(catalog, [{"id": "blobs", "tool": cap.tool, "capability": cap.name,
                   "params": {"limit": 3, "sort": "-time_created"}}])
    [sent] = server.requests
    where, name, value = expected
    if where == "query":
        assert (name, value) in sent.query
    else:
        assert sent.headers[name] == value
    assert ("limit", "3") in sent.query
    catalog.close()


def test_credentials_from_the_environment_and_a_401_that_says_what_to_give(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = real("digitalocean.com", tmp_path)
    with RecordingServer() as ok:
        monkeypatch.setenv("ORCH_OPENAPI_CREDENTIALS",
                           json.dumps({"digitalocean_api": {"bearer_auth": "dop_v1_from_env"}}))
        catalog = Catalog.from_openapi(spec, base_url=ok.url)
        assert "dop_v1_from_env" not in repr(catalog.get("digitalocean_api", "droplets_list").invoker.source.credentials)  # type: ignore[union-attr]
        run(catalog, [{"id": "l", "tool": "digitalocean_api", "capability": "droplets_list",
                       "params": {}}])
        assert ok.requests[0].headers["authorization"] == "Bearer dop_v1_from_env"
        catalog.close()
    monkeypatch.delenv("ORCH_OPENAPI_CREDENTIALS")
    with RecordingServer(answer={"id": "unauthorized", "message": "Unable to authenticate you"},
                         status=401) as refusing:
        catalog = Catalog.from_openapi(spec, base_url=refusing.url)
        result = orchestrator(catalog, [{"steps": [
            {"id": "l", "tool": "digitalocean_api", "capability": "droplets_list", "params": {}}]}]
        ).run("list")
        error = result.steps["l"].error
        assert error is not None and error.category.value == "AUTH_ERROR"
        assert "security scheme(s) bearer_auth" in error.message
        assert "authorization" not in refusing.requests[0].headers
        catalog.close()
    with pytest.raises(Exception, match=r"unknown security scheme\(s\) bearer \(the document has: bearer_auth\)"):
        Catalog.from_openapi(spec, base_url="http://127.0.0.1:9", credentials={"bearer": "x"})


def test_oauth2_client_credentials_only_to_an_allowed_token_url(tmp_path: Path) -> None:
    with RecordingServer(answer={"access_token": "tok-1", "token_type": "bearer",
                                 "expires_in": 3600}) as tokens, RecordingServer() as api:
        token_url = f"{tokens.url}/oauth/token"
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({
            "openapi": "3.0.3", "info": {"title": "Ledger", "version": "1"},
            "security": [{"machine": []}],
            "components": {"securitySchemes": {"machine": {"type": "oauth2", "flows": {
                "clientCredentials": {"tokenUrl": token_url, "scopes": {"ledger.read": "read"}}}}}},
            "paths": {"/entries": {"get": {"operationId": "listEntries", "responses": {
                "200": {"description": "ok"}}}}}}))
        secret = {"machine": {"client_id": "app-7", "client_secret": "cs-very-secret"}}
        with pytest.raises(Exception, match=r"token_urls=\['http://127\.0\.0\.1:\d+/oauth/token'\]"):
            Catalog.from_openapi(spec, base_url=api.url, credentials=secret)
        catalog = Catalog.from_openapi(spec, base_url=api.url, credentials=secret,
                                       token_urls=[token_url])
        run(catalog, [{"id": "a", "tool": "ledger", "capability": "listEntries", "params": {}},
                      {"id": "b", "tool": "ledger", "capability": "listEntries", "params": {},
                       "depends_on": ["a"]}])
        [fetch] = tokens.requests  # fetched once, kept for the second call
        assert fetch.path == "/oauth/token"
        assert fetch.form() == [("grant_type", "client_credentials"), ("scope", "ledger.read")]
        assert fetch.headers["authorization"] == "Basic " + base64.b64encode(
            b"app-7:cs-very-secret").decode()
        assert [r.headers["authorization"] for r in api.requests] == ["Bearer tok-1"] * 2
        catalog.close()


def test_a_document_credential_echoed_by_the_tool_is_masked_by_value(tmp_path: Path) -> None:
    """A credential given for a security scheme is a known secret: echoed in an error body
    under an innocent name, it is masked before the run keeps the answer, so in the
    caller's result too, and in what dagwright writes (the run's redactor, as spans,
    logs and the debug store use it)."""
    spec = real("digitalocean.com", tmp_path)
    secret = "dop_v1_Zx81Kq09plainlooking"
    with RecordingServer(answer={"id": "bad_request", "message": f"echo: {secret}"},
                         status=400) as echoing:
        catalog = Catalog.from_openapi(spec, base_url=echoing.url,
                                       credentials={"bearer_auth": secret})
        orch = orchestrator(catalog, [{"steps": [
            {"id": "l", "tool": "digitalocean_api", "capability": "droplets_list",
             "params": {}}]}])
        result = orch.run("list")
        assert secret not in json.dumps(result.to_dict())
        assert "echo: " in result.steps["l"].error.message  # the rest of the answer is kept
        catalog.close()


def test_slacks_swagger_2_document_header_token_query_and_form_body(
        tmp_path: Path, server: RecordingServer) -> None:
    """Slack's Web API as Slack publishes it, in Swagger 2.0: formData parameters are a
    form body, a header parameter a header, query parameters the query string."""
    catalog = Catalog.from_openapi(real("slack.com_web-api.swagger2", tmp_path),
                                   base_url=server.url)
    [oauth] = catalog.notes  # its OAuth2 (accessCode) flow: the token is given as a parameter
    assert "OAuth2 flow(s) authorizationCode; only clientCredentials" in oauth.message
    assert oauth.pointer == "#/securityDefinitions/slackAuth"
    post = catalog.get("slack_web_api", "chat_postMessage")
    assert post.input_schema["required"] == ["token", "body"]
    assert post.input_schema["properties"]["body"]["required"] == ["channel"]
    run(catalog, [
        {"id": "say", "tool": "slack_web_api", "capability": "chat_postMessage", "params": {
            "token": "xoxb-test", "body": {"channel": "C123", "text": "héllo & bye"}}},
        {"id": "read", "tool": "slack_web_api", "capability": "conversations_history",
         "params": {"token": "xoxp-test", "channel": "C123", "limit": 5}},
    ])
    by_path = {r.path: r for r in server.requests}
    said = by_path["/chat.postMessage"]
    assert said.method == "POST" and said.headers["token"] == "xoxb-test"
    assert said.content_type == "application/x-www-form-urlencoded"
    assert said.form() == [("channel", "C123"), ("text", "héllo & bye")]
    read = by_path["/conversations.history"]
    assert read.method == "GET"
    assert sorted(read.query) == [("channel", "C123"), ("limit", "5"), ("token", "xoxp-test")]
    catalog.close()


SWAGGER_2 = {
    "swagger": "2.0", "info": {"title": "Pet Store", "version": "1"},
    "basePath": "/v2", "consumes": ["application/json"], "produces": ["application/json"],
    "securityDefinitions": {"basic": {"type": "basic"},
                            "key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}},
    "security": [{"key": []}],
    "definitions": {"Pet": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}}},
    "parameters": {"trace": {"name": "X-Trace", "in": "header", "type": "string"}},
    "paths": {
        "/pets": {
            "get": {"operationId": "findPets", "parameters": [
                {"$ref": "#/parameters/trace"},
                {"name": "tags", "in": "query", "type": "array", "items": {"type": "string"},
                 "collectionFormat": "multi"},
                {"name": "status", "in": "query", "type": "array", "collectionFormat": "csv",
                 "items": {"type": "string", "enum": ["sold", "available"]}}],
                "responses": {"200": {"description": "ok", "schema": {
                    "type": "array", "items": {"$ref": "#/definitions/Pet"}}}}},
            "post": {"operationId": "addPet", "security": [{"basic": []}], "parameters": [
                {"name": "pet", "in": "body", "required": True,
                 "schema": {"$ref": "#/definitions/Pet"}}],
                "responses": {"201": {"description": "made"}}}},
        "/pets/{petId}/image": {
            "post": {"operationId": "uploadImage", "consumes": ["multipart/form-data"],
                     "parameters": [
                         {"name": "petId", "in": "path", "required": True, "type": "integer"},
                         {"name": "note", "in": "formData", "type": "string"},
                         {"name": "file", "in": "formData", "type": "file", "required": True}],
                     "responses": {"200": {"description": "ok"}}}}},
}


def test_a_swagger_2_document_on_the_wire(tmp_path: Path, server: RecordingServer) -> None:
    spec = tmp_path / "petstore.json"
    spec.write_text(json.dumps(SWAGGER_2))
    with pytest.raises(CatalogError, match=r"no 'host'.*give base_url"):
        Catalog.from_openapi(spec)
    catalog = Catalog.from_openapi(spec, base_url=server.url + "/v2",
                                   credentials={"basic": "ann:pw", "key": "k-123"})
    found = catalog.get("pet_store", "findPets")
    assert found.output_schema is not None  # the response's schema, as 2.0 puts it
    assert found.output_schema["items"]["required"] == ["name"]
    run(catalog, [
        {"id": "find", "tool": "pet_store", "capability": "findPets", "params": {
            "X-Trace": "t-1", "tags": ["a", "b"], "status": ["sold", "available"]}},
        {"id": "add", "tool": "pet_store", "capability": "addPet",
         "params": {"body": {"name": "Rex", "tags": ["dog"]}}},
        {"id": "image", "tool": "pet_store", "capability": "uploadImage", "params": {
            "petId": 7, "body": {"note": "front", "file": {
                "filename": "rex.png", "content_type": "image/png", "content": "PNG"}}}},
    ])
    by_path = {r.path: r for r in server.requests}
    find = next(r for r in server.requests if r.method == "GET")
    assert find.query == [("tags", "a"), ("tags", "b"), ("status", "sold,available")]
    assert find.headers["x-trace"] == "t-1" and find.headers["x-api-key"] == "k-123"
    add = next(r for r in server.requests if r.path == "/v2/pets" and r.method == "POST")
    assert add.json() == {"name": "Rex", "tags": ["dog"]}
    assert add.headers["authorization"] == "Basic " + base64.b64encode(b"ann:pw").decode()
    image = by_path["/v2/pets/7/image"]
    assert image.content_type.startswith("multipart/form-data; boundary=")
    parts = {p.name: p for p in image.parts}
    assert parts["note"].content == b"front"
    assert (parts["file"].filename, parts["file"].content) == ("rex.png", b"PNG")
    catalog.close()
