"""The demo tools over real sockets: data, strict validation, envelopes and every fault.

One set of servers is shared by the module (starting three servers per test would be
slow for no benefit); an autouse fixture resets recorded requests and queued faults.
Tests that stop servers start their own.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from orchestration.demo import (
    CITIES,
    STOCK_PRICES,
    USD_RATES,
    DemoTools,
    DemoToolServer,
    Drop,
    Garbage,
    Hang,
    NotFoundAs503,
    RateLimited,
    ServiceUnavailable,
    Status,
    forecast,
    serve_forever,
    start_demo_tools,
)
from orchestration.demo.tool_data import STOCKS
from orchestration.protocol import ErrorCategory, classify_http_response


@pytest.fixture(scope="module")
def tools() -> Iterator[DemoTools]:
    with start_demo_tools() as running:
        yield running


@pytest.fixture(autouse=True)
def _clean(tools: DemoTools) -> None:
    tools.reset()


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=2.0) as c:
        yield c


def call(
    client: httpx.Client, tools: DemoTools, tool: str, path: str, body: Any = None
) -> httpx.Response:
    return client.post(tools.urls[tool] + path, json=body)


def output_schema(tools: DemoTools, tool: str, capability: str) -> dict[str, Any]:
    for cap in tools.servers[tool].describe()["capabilities"]:
        if cap["name"] == capability:
            return dict(cap["output_schema"])
    raise KeyError(capability)


def ok_data(response: httpx.Response, tools: DemoTools, tool: str, capability: str) -> Any:
    """The data of a success envelope, checked against the capability's output schema."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True and body["error"] is None
    Draft202012Validator(output_schema(tools, tool, capability)).validate(body["data"])
    return body["data"]


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["success"] is False
    return dict(body["error"])


# ----------------------------------------------------------------------------- stocks


@pytest.mark.parametrize("symbol", sorted(STOCK_PRICES))
def test_quote_returns_fixed_prices(tools: DemoTools, client: httpx.Client, symbol: str) -> None:
    data = ok_data(
        call(client, tools, "stocks", "/quote", {"symbol": symbol}), tools, "stocks", "quote"
    )
    assert data == {"symbol": symbol, "price": STOCK_PRICES[symbol], "currency": "USD"}


def test_quote_tsla_price(tools: DemoTools, client: httpx.Client) -> None:
    data = call(client, tools, "stocks", "/quote", {"symbol": "TSLA"}).json()["data"]
    assert data["price"] == 468.285


def test_unknown_symbol_is_404_with_hint(tools: DemoTools, client: httpx.Client) -> None:
    err = error_of(call(client, tools, "stocks", "/quote", {"symbol": "TESLA"}), 404)
    assert err["category"] == "NOT_FOUND" and err["code"] == "SYMBOL_NOT_FOUND"
    assert err["retryable"] is True
    assert err["details"]["hint"] == "did you mean 'TSLA'?"

    err = error_of(call(client, tools, "stocks", "/quote", {"symbol": "XYZQ"}), 404)
    assert "TSLA" in err["details"]["hint"] and "AAPL" in err["details"]["hint"]


@pytest.mark.parametrize(
    ("given", "meant"), [("Tesla", "TSLA"), ("tsla", "TSLA"), ("apple", "AAPL")]
)
def test_company_name_or_lower_case_ticker_fails_pattern_with_hint(
    tools: DemoTools, client: httpx.Client, given: str, meant: str
) -> None:
    err = error_of(call(client, tools, "stocks", "/quote", {"symbol": given}), 400)
    assert err["code"] == "INVALID_REQUEST" and err["details"]["field"] == "symbol"
    assert err["details"]["hint"] == f"did you mean {meant!r}?"


@pytest.mark.parametrize("company", ["Tesla", "tesla", "TESLA", "Tesla, Inc.", " tesla "])
def test_lookup_matches_names_case_insensitively(
    tools: DemoTools, client: httpx.Client, company: str
) -> None:
    data = ok_data(
        call(client, tools, "stocks", "/lookup", {"company": company}), tools, "stocks", "lookup"
    )
    assert data == {"company": "Tesla", "symbol": "TSLA"}


def test_lookup_unknown_company_is_404(tools: DemoTools, client: httpx.Client) -> None:
    err = error_of(call(client, tools, "stocks", "/lookup", {"company": "Microsft"}), 404)
    assert err["code"] == "COMPANY_NOT_FOUND" and err["category"] == "NOT_FOUND"
    assert err["details"]["hint"] == "did you mean 'Microsoft'?"
    err = error_of(call(client, tools, "stocks", "/lookup", {"company": "Zzyzx"}), 404)
    assert "Tesla" in err["details"]["hint"]


# --------------------------------------------------------------------------- currency


def test_convert(tools: DemoTools, client: httpx.Client) -> None:
    body = {"amount": 100, "from": "USD", "to": "EUR"}
    data = ok_data(call(client, tools, "currency", "/convert", body), tools, "currency", "convert")
    assert data == {"amount": 100, "from": "USD", "to": "EUR", "rate": 0.92, "converted": 92.0}

    body = {"amount": 1000, "from": "JPY", "to": "GBP"}
    data = call(client, tools, "currency", "/convert", body).json()["data"]
    assert data["converted"] == round(1000 * 0.79 / 151.2, 2) == 5.22


@pytest.mark.parametrize("amount", [0, -5, 0.0])
def test_non_positive_amount_passes_schema_but_is_refused(
    tools: DemoTools, client: httpx.Client, amount: float
) -> None:
    body = {"amount": amount, "from": "USD", "to": "EUR"}
    err = error_of(call(client, tools, "currency", "/convert", body), 400)
    assert err["category"] == "INPUT_ERROR" and err["code"] == "INVALID_AMOUNT"
    assert err["message"] == "amount must be greater than 0"
    assert err["retryable"] is True


def test_rates_with_query_parameters(tools: DemoTools, client: httpx.Client) -> None:
    url = tools.urls["currency"] + "/rates"
    data = ok_data(client.get(url), tools, "currency", "rates")
    assert data == {"base": "USD", "rates": USD_RATES}
    data = ok_data(client.get(url, params={"base": "EUR"}), tools, "currency", "rates")
    assert data["base"] == "EUR" and data["rates"]["EUR"] == 1.0
    assert data["rates"]["USD"] == round(1 / 0.92, 6)

    err = error_of(client.get(url, params={"base": "eur"}), 400)
    assert err["details"]["field"] == "base" and "did you mean 'EUR'" in err["details"]["hint"]
    err = error_of(client.get(url, params={"currency": "EUR"}), 400)
    assert err["details"]["field"] == "currency"


# ---------------------------------------------------------------------------- weather


@pytest.mark.parametrize("name", ["Tokyo", "tokyo", "TOKYO", "Tokyo, Japan"])
def test_geocode(tools: DemoTools, client: httpx.Client, name: str) -> None:
    data = ok_data(
        call(client, tools, "weather", "/geocode", {"location": name}), tools, "weather", "geocode"
    )
    assert data == {"name": "Tokyo", "lat": 35.6897, "lon": 139.6917, "country": "JP"}


def test_geocode_knows_every_city(tools: DemoTools, client: httpx.Client) -> None:
    for city in CITIES.values():
        data = call(client, tools, "weather", "/geocode", {"location": city.name}).json()["data"]
        assert (data["lat"], data["lon"], data["country"]) == (city.lat, city.lon, city.country)


def test_geocode_typo_hints_the_city(tools: DemoTools, client: httpx.Client) -> None:
    err = error_of(call(client, tools, "weather", "/geocode", {"location": "Tokio"}), 404)
    assert err["category"] == "NOT_FOUND" and err["code"] == "LOCATION_NOT_FOUND"
    assert err["retryable"] is True
    assert "Tokyo" in err["details"]["hint"]
    err = error_of(call(client, tools, "weather", "/geocode", {"location": "Atlantis"}), 404)
    assert "London" in err["details"]["hint"] and "Sydney" in err["details"]["hint"]


def test_forecast_is_deterministic_and_documented(tools: DemoTools, client: httpx.Client) -> None:
    body = {"lat": 35.6897, "lon": 139.6917}
    first = ok_data(call(client, tools, "weather", "/forecast", body), tools, "weather", "forecast")
    second = call(client, tools, "weather", "/forecast", body).json()["data"]
    assert first == second == forecast(35.6897, 139.6917)
    assert first["units"] == "celsius"
    assert [d["date"] for d in first["daily"]] == ["day+1", "day+2", "day+3"]
    mean = 28 - 0.45 * 35.6897
    assert mean - 3.05 <= first["temperature"] <= mean + 3.05
    for day in first["daily"]:
        assert round(day["temp_max"] - day["temp_min"], 1) == 8.0

    week = call(client, tools, "weather", "/forecast", {**body, "days": 7, "units": "fahrenheit"})
    data = ok_data(week, tools, "weather", "forecast")
    assert len(data["daily"]) == 7 and data["units"] == "fahrenheit"
    assert abs(data["temperature"] - (first["temperature"] * 9 / 5 + 32)) < 0.2
    other = call(client, tools, "weather", "/forecast", {"lat": -33.8688, "lon": 151.2093})
    assert other.json()["data"]["daily"] != first["daily"]


def test_numeric_string_is_input_error_naming_the_field(
    tools: DemoTools, client: httpx.Client
) -> None:
    body = {"lat": "35.6897", "lon": 139.6917}
    err = error_of(call(client, tools, "weather", "/forecast", body), 400)
    assert err["category"] == "INPUT_ERROR" and err["code"] == "INVALID_REQUEST"
    assert err["retryable"] is True
    assert err["message"] == "lat: '35.6897' is not of type 'number'"
    assert err["details"]["field"] == "lat" and err["details"]["expected"] == "number"
    assert "without quotes" in err["details"]["hint"]

    err = error_of(
        call(client, tools, "currency", "/convert", {"amount": "10", "from": "USD", "to": "EUR"}),
        400,
    )
    assert err["details"]["field"] == "amount"


@pytest.mark.parametrize(
    ("body", "field", "expected"),
    [
        ({"lat": 91, "lon": 0}, "lat", "number <= 90"),
        ({"lat": 0, "lon": -181}, "lon", "number >= -180"),
        ({"lat": 0, "lon": 0, "days": 8}, "days", "number <= 7"),
        ({"lat": 0, "lon": 0, "days": 2.5}, "days", "integer"),
        ({"lat": 0, "lon": 0, "units": "kelvin"}, "units", "one of 'celsius', 'fahrenheit'"),
        ({"lat": True, "lon": 0}, "lat", "number"),
        ({"lon": 0}, "lat", "number (required)"),
        (
            {"lat": 0, "lon": 0, "city": "Tokyo"},
            "city",
            "no such field; allowed: lat, lon, days, units",
        ),
    ],
)
def test_forecast_schema_is_strict(
    tools: DemoTools, client: httpx.Client, body: dict[str, Any], field: str, expected: str
) -> None:
    err = error_of(call(client, tools, "weather", "/forecast", body), 400)
    assert err["code"] == "INVALID_REQUEST"
    assert err["details"]["field"] == field and err["details"]["expected"] == expected
    assert err["message"].startswith(f"{field}: ")


def test_value_errors_lead_when_there_are_several(tools: DemoTools, client: httpx.Client) -> None:
    body = {"amount": "100", "from": "usd", "to": "EUR", "extra": 1}
    err = error_of(call(client, tools, "currency", "/convert", body), 400)
    assert err["details"]["field"] == "amount" and err["details"]["errors"] == "3"
    assert "from:" in err["details"]["all_errors"] and "extra:" in err["details"]["all_errors"]


@pytest.mark.parametrize("content", [b"{not json", b"", b'{"lat": NaN, "lon": 0}', b"\xff\xfe"])
def test_body_that_is_not_json_is_input_error(
    tools: DemoTools, client: httpx.Client, content: bytes
) -> None:
    response = client.post(tools.urls["weather"] + "/forecast", content=content)
    err = error_of(response, 400)
    assert err["category"] == "INPUT_ERROR" and err["code"] == "INVALID_JSON"


def test_body_that_is_not_an_object(tools: DemoTools, client: httpx.Client) -> None:
    err = error_of(call(client, tools, "weather", "/geocode", ["Tokyo"]), 400)
    assert err["details"]["field"] == "body" and err["details"]["expected"] == "object"


def test_chunked_request_body(tools: DemoTools, client: httpx.Client) -> None:
    response = client.post(
        tools.urls["stocks"] + "/quote", content=iter([b'{"symbol":', b' "NVDA"}'])
    )
    assert response.json()["data"]["price"] == 131.38
    assert tools.servers["stocks"].requests[-1].header("Transfer-Encoding") == "chunked"


# ------------------------------------------------------------------- routing and meta


def test_unknown_path_and_wrong_method(tools: DemoTools, client: httpx.Client) -> None:
    err = error_of(call(client, tools, "stocks", "/price", {"symbol": "TSLA"}), 404)
    assert err["category"] == "NOT_FOUND" and err["code"] == "UNKNOWN_PATH"
    assert "/quote" in err["details"]["paths"]

    response = client.get(tools.urls["stocks"] + "/quote")
    err = error_of(response, 400)
    assert err["code"] == "METHOD_NOT_ALLOWED" and response.headers["allow"] == "POST"


def test_capabilities_endpoint(tools: DemoTools, client: httpx.Client) -> None:
    expected_routes = {
        "stocks": {("quote", "POST", "/quote"), ("lookup", "POST", "/lookup")},
        "currency": {("convert", "POST", "/convert"), ("rates", "GET", "/rates")},
        "weather": {("geocode", "POST", "/geocode"), ("forecast", "POST", "/forecast")},
    }
    for name, url in tools.urls.items():
        response = client.get(url + "/capabilities")
        assert response.status_code == 200
        body = response.json()
        assert body["tool"] == name and body["description"]
        routes = {(c["name"], c["method"], c["path"]) for c in body["capabilities"]}
        assert routes == expected_routes[name]
        for cap in body["capabilities"]:
            assert set(cap) == {
                "name",
                "description",
                "method",
                "path",
                "input_schema",
                "output_schema",
                "idempotent",
            }
            assert cap["idempotent"] is True and cap["description"]
            Draft202012Validator.check_schema(cap["input_schema"])
            Draft202012Validator.check_schema(cap["output_schema"])


def test_health(tools: DemoTools, client: httpx.Client) -> None:
    response = client.get(tools.urls["weather"] + "/health")
    assert response.json() == {
        "success": True,
        "data": {"status": "ok", "tool": "weather"},
        "error": None,
    }


def test_catalog_dict_is_the_capabilities_data(tools: DemoTools, client: httpx.Client) -> None:
    catalog = tools.catalog_dict()
    assert [t["name"] for t in catalog["tools"]] == ["stocks", "currency", "weather"]
    for entry in catalog["tools"]:
        assert entry["base_url"] == tools.urls[entry["name"]]
        assert entry["base_url"].startswith("http://127.0.0.1:")
        served = client.get(entry["base_url"] + "/capabilities").json()
        assert served["capabilities"] == entry["capabilities"]
        assert served["description"] == entry["description"]


# --------------------------------------------------------------------- fault injection


def test_service_unavailable(tools: DemoTools, client: httpx.Client) -> None:
    server = tools.servers["stocks"]
    server.inject(
        "/quote",
        ServiceUnavailable(retryable=True),
        ServiceUnavailable(retryable=False, code="OVERLOADED", message="too busy"),
    )
    first = error_of(call(client, tools, "stocks", "/quote", {"symbol": "TSLA"}), 503)
    assert first["category"] == "SERVICE_ERROR" and first["code"] == "REQUEST_TIMEOUT"
    assert first["retryable"] is True
    second = error_of(call(client, tools, "stocks", "/quote", {"symbol": "TSLA"}), 503)
    assert (second["code"], second["message"], second["retryable"]) == (
        "OVERLOADED",
        "too busy",
        False,
    )
    # queue empty: normal again
    assert call(client, tools, "stocks", "/quote", {"symbol": "TSLA"}).status_code == 200
    assert server.pending_faults() == 0


def test_raw_status_answers(tools: DemoTools, client: httpx.Client) -> None:
    server = tools.servers["currency"]
    server.inject(
        "/convert",
        Status(500, "boom"),
        Status(429, "slow down", {"Retry-After": "2"}),
        Status(502, {"detail": "bad gateway"}),
    )
    body = {"amount": 1, "from": "USD", "to": "EUR"}
    response = call(client, tools, "currency", "/convert", body)
    assert (response.status_code, response.text) == (500, "boom")
    classified = classify_http_response(500, response.content, dict(response.headers))
    assert classified.error is not None
    assert classified.error.category is ErrorCategory.SERVICE_ERROR

    response = call(client, tools, "currency", "/convert", body)
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    classified = classify_http_response(429, response.content, dict(response.headers))
    assert classified.error is not None and classified.error.retry_after_s == 2.0

    response = call(client, tools, "currency", "/convert", body)
    assert response.status_code == 502 and response.json() == {"detail": "bad gateway"}


def test_rate_limited(tools: DemoTools, client: httpx.Client) -> None:
    tools.servers["weather"].inject("/geocode", RateLimited(0.5))
    response = call(client, tools, "weather", "/geocode", {"location": "Paris"})
    err = error_of(response, 429)
    assert err["category"] == "RATE_LIMIT" and err["retryable"] is True
    assert err["details"]["retry_after"] == "0.5"
    assert response.headers["retry-after"] == "0.5"
    classified = classify_http_response(429, response.content, dict(response.headers))
    assert classified.error is not None and classified.error.retry_after_s == 0.5


def test_hang_makes_the_client_time_out(tools: DemoTools) -> None:
    server = tools.servers["stocks"]
    server.inject("/quote", Hang(0.6))
    url = tools.urls["stocks"] + "/quote"
    with httpx.Client(timeout=0.15) as short, pytest.raises(httpx.ReadTimeout):
        short.post(url, json={"symbol": "TSLA"})
    with httpx.Client(timeout=2.0) as patient:
        server.inject("/quote", Hang(0.1))
        started = time.monotonic()
        response = patient.post(url, json={"symbol": "TSLA"})
        assert response.status_code == 200 and time.monotonic() - started >= 0.1


def test_drop_closes_without_answer(tools: DemoTools, client: httpx.Client) -> None:
    tools.servers["stocks"].inject("/quote", Drop())
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        call(client, tools, "stocks", "/quote", {"symbol": "TSLA"})
    assert call(client, tools, "stocks", "/quote", {"symbol": "TSLA"}).status_code == 200
    assert len(tools.servers["stocks"].requests) == 2


def test_garbage(tools: DemoTools, client: httpx.Client) -> None:
    tools.servers["stocks"].inject("/quote", Garbage())
    response = call(client, tools, "stocks", "/quote", {"symbol": "TSLA"})
    assert response.status_code == 200 and response.text == "<html>oops</html>"
    assert response.headers["content-type"].startswith("text/html")
    classified = classify_http_response(200, response.content, dict(response.headers))
    assert classified.error is not None
    assert classified.error.category is ErrorCategory.INVALID_RESPONSE


def test_not_found_as_503(tools: DemoTools, client: httpx.Client) -> None:
    tools.servers["weather"].inject("/geocode", NotFoundAs503(), NotFoundAs503())
    err = error_of(call(client, tools, "weather", "/geocode", {"location": "Tokio"}), 503)
    assert err["category"] == "SERVICE_ERROR" and err["retryable"] is False
    assert err["code"] == "LOCATION_NOT_FOUND" and "Tokyo" in err["details"]["hint"]
    # a request that finds something is answered normally
    ok = call(client, tools, "weather", "/geocode", {"location": "Tokyo"})
    assert ok.status_code == 200
    assert call(client, tools, "weather", "/geocode", {"location": "Tokio"}).status_code == 404


def test_faults_are_per_path_and_fifo(tools: DemoTools, client: httpx.Client) -> None:
    server = tools.servers["stocks"]
    server.inject("/lookup", Status(500, "one"))
    server.inject("/lookup", Status(500, "two"))
    assert server.pending_faults("/lookup") == 2 and server.pending_faults("/quote") == 0
    assert call(client, tools, "stocks", "/quote", {"symbol": "TSLA"}).status_code == 200
    texts = [call(client, tools, "stocks", "/lookup", {"company": "Apple"}).text for _ in range(3)]
    assert texts[:2] == ["one", "two"] and '"AAPL"' in texts[2]

    server.inject("/health", Status(500))
    server.reset()
    assert server.pending_faults() == 0 and server.requests == []


def test_inject_refuses_typos(tools: DemoTools) -> None:
    with pytest.raises(ValueError, match="/quote"):
        tools.servers["stocks"].inject("/qoute", Drop())
    with pytest.raises(TypeError):
        tools.servers["stocks"].inject("/quote", "drop")  # type: ignore[arg-type]


# ------------------------------------------------------------ recording and connection


def test_requests_are_recorded_with_headers(tools: DemoTools, client: httpx.Client) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    client.post(
        tools.urls["stocks"] + "/quote",
        json={"symbol": "AAPL"},
        headers={"Idempotency-Key": "key-1", "traceparent": traceparent},
    )
    client.get(tools.urls["stocks"] + "/capabilities")
    recorded = tools.servers["stocks"].requests
    assert [(r.method, r.path) for r in recorded] == [("POST", "/quote"), ("GET", "/capabilities")]
    first = recorded[0]
    assert first.body == {"symbol": "AAPL"}
    assert first.headers["idempotency-key"] == "key-1"
    assert first.header("Idempotency-Key") == "key-1"
    assert first.header("TraceParent") == traceparent
    assert tools.servers["stocks"].requests_to("/quote") == [first]
    assert tools.servers["currency"].requests == []


def test_get_query_is_recorded(tools: DemoTools, client: httpx.Client) -> None:
    client.get(tools.urls["currency"] + "/rates", params={"base": "GBP"})
    request = tools.servers["currency"].requests[-1]
    assert request.query == {"base": "GBP"} and request.body is None


def test_keep_alive_reuses_one_connection(tools: DemoTools, client: httpx.Client) -> None:
    for _ in range(3):
        assert call(client, tools, "stocks", "/quote", {"symbol": "MSFT"}).status_code == 200
    response = client.get(tools.urls["stocks"] + "/quote")  # an error keeps it alive too
    assert response.status_code == 400
    assert call(client, tools, "stocks", "/quote", {"symbol": "MSFT"}).status_code == 200
    ports = {r.client_port for r in tools.servers["stocks"].requests}
    assert len(ports) == 1


def test_concurrent_requests(tools: DemoTools) -> None:
    results: list[int] = []
    url = tools.urls["weather"] + "/geocode"

    def worker() -> None:
        with httpx.Client(timeout=2.0) as c:
            results.append(c.post(url, json={"location": "Berlin"}).status_code)

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 12


def test_close_stops_serving_and_cuts_open_connections() -> None:
    server = DemoToolServer(STOCKS)
    url = server.url
    with httpx.Client(timeout=1.0) as c:
        assert c.post(url + "/quote", json={"symbol": "TSLA"}).status_code == 200
        server.close()
        server.close()  # idempotent
        with pytest.raises(httpx.TransportError):
            c.post(url + "/quote", json={"symbol": "TSLA"})
    with httpx.Client(timeout=1.0) as fresh, pytest.raises(httpx.ConnectError):
        fresh.get(url + "/health")


def test_close_does_not_wait_for_a_hang() -> None:
    tools = start_demo_tools()
    tools.servers["weather"].inject("/geocode", Hang(30))
    errors: list[BaseException] = []

    def hang() -> None:
        try:
            httpx.post(tools.urls["weather"] + "/geocode", json={"location": "Paris"}, timeout=5)
        except httpx.HTTPError as exc:
            errors.append(exc)

    thread = threading.Thread(target=hang)
    thread.start()
    deadline = time.monotonic() + 2
    while not tools.servers["weather"].requests and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    tools.close()
    thread.join(timeout=3)
    assert time.monotonic() - started < 1.5
    assert not thread.is_alive() and len(errors) == 1


def test_serve_forever_prints_urls_and_stops() -> None:
    out = io.StringIO()
    stop = threading.Event()
    thread = threading.Thread(target=serve_forever, kwargs={"port": 0, "out": out, "stop": stop})
    thread.start()
    try:
        deadline = time.monotonic() + 2
        while "Ctrl-C" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        urls = [w for w in out.getvalue().split() if w.startswith("http://127.0.0.1:")]
        assert len(urls) == 3
        assert httpx.get(urls[0] + "/health", timeout=1).json()["data"]["tool"] == "stocks"
    finally:
        stop.set()
        thread.join(timeout=3)
    assert not thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(urls[0] + "/health", timeout=1)
