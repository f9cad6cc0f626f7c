"""What the three demo tools know and how they answer: data, schemas and handlers.

Everything here is fixed and deterministic so that demos and tests give the same answers
on every run and offline. Each capability is defined exactly once (:class:`CapabilitySpec`):
the HTTP servers in :mod:`orchestration.demo.tools`, their ``GET /capabilities`` and the
catalog handed to the planner are all derived from these definitions, so a schema can
never disagree with the handler that enforces it.

Data
----
``stocks``
    :data:`STOCK_PRICES` (USD): TSLA 468.285, AAPL 227.52, MSFT 415.10, NVDA 131.38,
    GOOGL 178.35, AMZN 201.20. :data:`COMPANY_SYMBOLS` maps company names to tickers.
``currency``
    :data:`USD_RATES`, units of each currency per 1 USD: USD 1, EUR 0.92, GBP 0.79,
    JPY 151.2, CHF 0.88. A cross rate is ``USD_RATES[to] / USD_RATES[from]``.
``weather``
    :data:`CITIES`: Tokyo, London, Paris, New York, Sydney, Berlin with fixed coordinates.
    Forecasts are computed by :func:`forecast` from the coordinates alone (see there).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestration.protocol import ErrorCategory, ToolError

__all__ = [
    "CITIES",
    "COMPANY_SYMBOLS",
    "CONDITIONS",
    "CURRENCIES",
    "CURRENCY",
    "DEMO_TOOL_SPECS",
    "STOCKS",
    "STOCK_PRICES",
    "USD_RATES",
    "WEATHER",
    "CapabilitySpec",
    "City",
    "Handler",
    "HintFunction",
    "JSONDict",
    "ToolFailure",
    "ToolSpec",
    "cross_rate",
    "forecast",
    "input_error",
    "not_found",
    "suggest_symbol"
]

JSONDict = dict[str, Any]
Handler = Callable[[JSONDict], Any]
HintFunction = Callable[[Any], str | None]


class ToolFailure(Exception):
    """Raised by a handler to answer with a structured :class:`ToolError`.

    Handlers raise instead of returning error values so that the happy path reads
    straight through and the server owns the one place that turns errors into envelopes.
    """

    def __init__(self, error: ToolError) -> None:
        super().__init__(error.message)
        self.error = error


def input_error(code: str, message: str, **details: str) -> ToolFailure:
    """A retryable ``INPUT_ERROR``: the caller can fix the parameters and try again."""
    return ToolFailure(
        ToolError(
            code=code,
            message=message,
            category=ErrorCategory.INPUT_ERROR,
            retryable=True,
            details=details,
        )
    )


def not_found(code: str, message: str, hint: str) -> ToolFailure:
    """A retryable ``NOT_FOUND``; retryable because a corrected name may well be found."""
    return ToolFailure(
        ToolError(
            code=code,
            message=message,
            category=ErrorCategory.NOT_FOUND,
            retryable=True,
            details={"hint": hint},
        )
    )


@dataclass(frozen=True)
class CapabilitySpec:
    """One operation of a tool, defined once for routing, validation and the catalog.

    ``input_schema`` validates the JSON body (POST) or the query parameters (GET, whose
    values are therefore strings). ``input_hint`` may suggest a fix when the input fails
    schema validation (e.g. a company name where a ticker is required).
    """

    name: str
    description: str
    method: str
    path: str
    input_schema: JSONDict
    output_schema: JSONDict
    handler: Handler
    idempotent: bool = True
    input_hint: HintFunction | None = None

    def describe(self) -> JSONDict:
        """The capability as it appears in ``GET /capabilities`` and the catalog."""
        return {
            "name": self.name,
            "description": self.description,
            "method": self.method,
            "path": self.path,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "idempotent": self.idempotent,
        }


@dataclass(frozen=True)
class ToolSpec:
    """A tool: a name, a description and its capabilities (one HTTP server each)."""

    name: str
    description: str
    capabilities: tuple[CapabilitySpec, ...]

    def capability_at(self, path: str) -> CapabilitySpec | None:
        """The capability served at ``path``, if any."""
        for capability in self.capabilities:
            if capability.path == path:
                return capability
        return None

    def describe(self) -> JSONDict:
        """The body of ``GET /capabilities``."""
        return {
            "tool": self.name,
            "description": self.description,
            "capabilities": [c.describe() for c in self.capabilities],
        }


def _did_you_mean(candidate: str | None, known: list[str], what: str) -> str:
    if candidate is not None:
        return f"did you mean {candidate!r}?"
    return f"known {what}: {', '.join(sorted(known))}"


def _close_match(word: str, choices: list[str]) -> str | None:
    matches = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return matches[0] if matches else None


# --------------------------------------------------------------------------- stocks

STOCK_PRICES: dict[str, float] = {
    "TSLA": 468.285,
    "AAPL": 227.52,
    "MSFT": 415.10,
    "NVDA": 131.38,
    "GOOGL": 178.35,
    "AMZN": 201.20,
}
"""Fixed quotes in USD."""

COMPANY_SYMBOLS: dict[str, str] = {
    "Tesla": "TSLA",
    "Apple": "AAPL",
    "Microsoft": "MSFT",
    "Nvidia": "NVDA",
    "Alphabet": "GOOGL",
    "Google": "GOOGL",
    "Amazon": "AMZN",
}
"""Company display name -> ticker; names match case-insensitively (see :func:`_norm_company`)."""

_COMPANY_SUFFIXES = re.compile(
    r"[\s,]+(inc|incorporated|corp|corporation|co|company|ltd|plc|com)\.?$", re.IGNORECASE
)


def _norm_company(name: str) -> str:
    """Lower-case, trimmed, without a legal suffix: "Tesla, Inc." and "tesla" are equal."""
    text = name.strip().rstrip(".").strip()
    previous = None
    while previous != text:
        previous = text
        text = _COMPANY_SUFFIXES.sub("", text).strip()
    return text.lower().removesuffix(".com")


_COMPANY_BY_NORM: dict[str, str] = {_norm_company(c): c for c in COMPANY_SYMBOLS}


def suggest_symbol(text: str) -> str | None:
    """The ticker a caller most likely meant by ``text`` (a ticker, a name, a typo)."""
    if text.strip().upper() in STOCK_PRICES:
        return text.strip().upper()
    norm = _norm_company(text)
    if norm in _COMPANY_BY_NORM:
        return COMPANY_SYMBOLS[_COMPANY_BY_NORM[norm]]
    symbol = _close_match(text.strip().upper(), list(STOCK_PRICES))
    if symbol is not None:
        return symbol
    company = _close_match(norm, list(_COMPANY_BY_NORM))
    return COMPANY_SYMBOLS[_COMPANY_BY_NORM[company]] if company is not None else None


def _symbol_hint(body: Any) -> str | None:
    """Hint for a quote whose symbol failed the ticker pattern (e.g. "Tesla", "tsla")."""
    if isinstance(body, dict) and isinstance(body.get("symbol"), str):
        suggestion = suggest_symbol(body["symbol"])
        if suggestion is not None:
            return _did_you_mean(suggestion, list(STOCK_PRICES), "symbols")
    return None


def _quote(body: JSONDict) -> JSONDict:
    symbol: str = body["symbol"]
    if symbol not in STOCK_PRICES:
        raise not_found(
            "SYMBOL_NOT_FOUND",
            f"unknown stock symbol {symbol!r}",
            _did_you_mean(suggest_symbol(symbol), list(STOCK_PRICES), "symbols"),
        )
    return {"symbol": symbol, "price": STOCK_PRICES[symbol], "currency": "USD"}


def _lookup(body: JSONDict) -> JSONDict:
    company: str = body["company"]
    norm = _norm_company(company)
    if norm not in _COMPANY_BY_NORM:
        match = _close_match(norm, list(_COMPANY_BY_NORM))
        raise not_found(
            "COMPANY_NOT_FOUND",
            f"unknown company {company!r}",
            _did_you_mean(
                _COMPANY_BY_NORM[match] if match is not None else None,
                list(COMPANY_SYMBOLS),
                "companies",
            ),
        )
    name = _COMPANY_BY_NORM[norm]
    return {"company": name, "symbol": COMPANY_SYMBOLS[name]}


STOCKS = ToolSpec(
    name="stocks",
    description="Stock market data: latest share prices by ticker, and ticker lookup by "
    "company name.",
    capabilities=(
        CapabilitySpec(
            name="quote",
            description="Latest share price (in USD) of a stock, by its ticker symbol such "
            "as 'TSLA'. If you only have a company name, call stocks.lookup first.",
            method="POST",
            path="/quote",
            input_schema={
                "type": "object",
                "properties": {
                    "symbol": {
                        "type": "string",
                        "pattern": "^[A-Z]{1,5}$",
                        "description": "Ticker symbol, upper case, e.g. 'TSLA'.",
                    }
                },
                "required": ["symbol"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "symbol": {"type": "string"},
                    "price": {"type": "number", "description": "Price per share."},
                    "currency": {"type": "string", "const": "USD"},
                },
                "required": ["symbol", "price", "currency"],
                "additionalProperties": False,
            },
            handler=_quote,
            input_hint=_symbol_hint,
        ),
        CapabilitySpec(
            name="lookup",
            description="Find the ticker symbol of a company by its name, e.g. 'Tesla' -> "
            "'TSLA'. The name matches case-insensitively.",
            method="POST",
            path="/lookup",
            input_schema={
                "type": "object",
                "properties": {
                    "company": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Company name, e.g. 'Tesla'.",
                    }
                },
                "required": ["company"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "company": {"type": "string", "description": "Canonical company name."},
                    "symbol": {"type": "string"},
                },
                "required": ["company", "symbol"],
                "additionalProperties": False,
            },
            handler=_lookup,
        ),
    ),
)

# ------------------------------------------------------------------------- currency

USD_RATES: dict[str, float] = {
    "USD": 1.0,
    "EUR": 0.92,
    "GBP": 0.79,
    "JPY": 151.2,
    "CHF": 0.88,
}
"""Units of each currency per 1 USD. Cross rates go through USD."""

CURRENCIES: list[str] = list(USD_RATES)

_CURRENCY_NAMES: dict[str, str] = {
    "dollar": "USD",
    "dollars": "USD",
    "us dollar": "USD",
    "euro": "EUR",
    "euros": "EUR",
    "pound": "GBP",
    "pounds": "GBP",
    "sterling": "GBP",
    "yen": "JPY",
    "franc": "CHF",
    "francs": "CHF",
    "swiss franc": "CHF",
    "$": "USD",
    "€": "EUR",
    "£": "GBP",
    "¥": "JPY",
}


def cross_rate(source: str, target: str) -> float:
    """Units of ``target`` per unit of ``source``, via the USD rates."""
    return USD_RATES[target] / USD_RATES[source]


def _currency_hint(body: Any) -> str | None:
    """Hint for a currency code given in lower case or by name ("usd", "euro", "€")."""
    if not isinstance(body, dict):
        return None
    for field in ("from", "to", "base"):
        value = body.get(field)
        if isinstance(value, str) and value not in USD_RATES:
            text = value.strip()
            code = text.upper() if text.upper() in USD_RATES else _CURRENCY_NAMES.get(text.lower())
            if code is not None:
                return f"{field}: did you mean {code!r}?"
    return None


def _convert(body: JSONDict) -> JSONDict:
    amount = body["amount"]
    # A business rule rather than a schema keyword on purpose: the schema says "number",
    # so 0 passes validation and the tool itself must reject it (as real tools do).
    if amount <= 0:
        raise input_error(
            "INVALID_AMOUNT",
            "amount must be greater than 0",
            field="amount",
            expected="number greater than 0",
        )
    source, target = body["from"], body["to"]
    rate = cross_rate(source, target)
    return {
        "amount": amount,
        "from": source,
        "to": target,
        "rate": round(rate, 6),
        "converted": round(amount * rate, 2),
    }


def _rates(query: JSONDict) -> JSONDict:
    base = query.get("base", "USD")
    return {
        "base": base,
        "rates": {code: round(cross_rate(base, code), 6) for code in CURRENCIES},
    }


_CURRENCY_CODE = {"type": "string", "enum": CURRENCIES}

CURRENCY = ToolSpec(
    name="currency",
    description="Currency conversion between USD, EUR, GBP, JPY and CHF at fixed daily rates.",
    capabilities=(
        CapabilitySpec(
            name="convert",
            description="Convert an amount of money from one currency to another; returns "
            "the rate used and the converted amount rounded to 2 decimals.",
            method="POST",
            path="/convert",
            input_schema={
                "type": "object",
                "properties": {
                    "amount": {
                        "type": "number",
                        "description": "Amount in the source currency; must be > 0.",
                    },
                    "from": {**_CURRENCY_CODE, "description": "Source currency code."},
                    "to": {**_CURRENCY_CODE, "description": "Target currency code."},
                },
                "required": ["amount", "from", "to"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "amount": {"type": "number"},
                    "from": {"type": "string"},
                    "to": {"type": "string"},
                    "rate": {"type": "number", "description": "Units of 'to' per 'from'."},
                    "converted": {"type": "number"},
                },
                "required": ["amount", "from", "to", "rate", "converted"],
                "additionalProperties": False,
            },
            handler=_convert,
            input_hint=_currency_hint,
        ),
        CapabilitySpec(
            name="rates",
            description="All exchange rates relative to a base currency (query parameter "
            "'base', default USD).",
            method="GET",
            path="/rates",
            input_schema={
                "type": "object",
                "properties": {
                    "base": {**_CURRENCY_CODE, "default": "USD", "description": "Base code."}
                },
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "base": {"type": "string"},
                    "rates": {"type": "object", "additionalProperties": {"type": "number"}},
                },
                "required": ["base", "rates"],
                "additionalProperties": False,
            },
            handler=_rates,
            input_hint=_currency_hint,
        ),
    ),
)

# -------------------------------------------------------------------------- weather


@dataclass(frozen=True)
class City:
    """A geocoded place."""

    name: str
    lat: float
    lon: float
    country: str


CITIES: dict[str, City] = {
    c.name.lower(): c
    for c in (
        City("Tokyo", 35.6897, 139.6917, "JP"),
        City("London", 51.5074, -0.1278, "GB"),
        City("Paris", 48.8566, 2.3522, "FR"),
        City("New York", 40.7128, -74.0060, "US"),
        City("Sydney", -33.8688, 151.2093, "AU"),
        City("Berlin", 52.52, 13.405, "DE"),
    )
}
"""Lower-case name -> city. "Paris, France" matches too: text after a comma is ignored."""

_CITY_ALIASES: dict[str, str] = {"nyc": "new york", "new york city": "new york"}


def _geocode(body: JSONDict) -> JSONDict:
    location: str = body["location"]
    key = location.split(",")[0].strip().lower()
    key = _CITY_ALIASES.get(key, key)
    city = CITIES.get(key)
    if city is None:
        match = _close_match(key, list(CITIES))
        raise not_found(
            "LOCATION_NOT_FOUND",
            f"unknown location {location!r}",
            _did_you_mean(
                CITIES[match].name if match is not None else None,
                [c.name for c in CITIES.values()],
                "locations",
            ),
        )
    return {"name": city.name, "lat": city.lat, "lon": city.lon, "country": city.country}


CONDITIONS: tuple[str, ...] = (
    "sunny",
    "partly cloudy",
    "cloudy",
    "light rain",
    "rain",
    "thunderstorms",
)
_PRECIPITATION_BASE: dict[str, int] = {
    "sunny": 0,
    "partly cloudy": 10,
    "cloudy": 20,
    "light rain": 55,
    "rain": 80,
    "thunderstorms": 85,
    "snow": 75,
}


def _day_hash(lat: float, lon: float, day: int) -> int:
    """A stable hash (unlike ``hash()``, not salted per process) of a place and a day."""
    key = f"{lat:.4f}|{lon:.4f}|{day}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def _in_units(celsius: float, units: str) -> float:
    return round(celsius * 9 / 5 + 32 if units == "fahrenheit" else celsius, 1)


def forecast(lat: float, lon: float, days: int = 3, units: str = "celsius") -> JSONDict:
    """A deterministic forecast for a place: the same coordinates always give the same data.

    The mean temperature falls with latitude, ``28 - 0.45 * |lat|`` degrees Celsius
    (Tokyo about 11.9). For each day ``d`` (0 is today) a SHA-256 hash of
    ``(lat, lon, d)`` picks the condition from :data:`CONDITIONS` and a swing of
    -3.0..+3.0 degrees; the day's max/min are mean +/- 4 plus the swing. Rain at or
    below 1 degree max becomes snow. ``daily`` holds days 1..``days`` dated "day+1"...
    """
    mean_c = 28.0 - 0.45 * abs(lat)

    def day_weather(day: int) -> tuple[str, float, int]:
        h = _day_hash(lat, lon, day)
        condition = CONDITIONS[h % len(CONDITIONS)]
        swing = ((h >> 8) % 61) / 10 - 3.0
        if "rain" in condition and mean_c + 4 + swing <= 1:
            condition = "snow"
        chance = min(100, _PRECIPITATION_BASE[condition] + (h >> 16) % 10)
        return condition, swing, chance

    condition_now, swing_now, _ = day_weather(0)
    daily = []
    for day in range(1, days + 1):
        condition, swing, chance = day_weather(day)
        daily.append(
            {
                "day": day,
                "date": f"day+{day}",
                "condition": condition,
                "temp_max": _in_units(mean_c + 4 + swing, units),
                "temp_min": _in_units(mean_c - 4 + swing, units),
                "precipitation_chance": chance,
            }
        )
    return {
        "lat": lat,
        "lon": lon,
        "units": units,
        "temperature": _in_units(mean_c + swing_now, units),
        "condition": condition_now,
        "daily": daily,
    }


def _forecast(body: JSONDict) -> JSONDict:
    return forecast(
        body["lat"], body["lon"], int(body.get("days", 3)), body.get("units", "celsius")
    )


WEATHER = ToolSpec(
    name="weather",
    description="Weather: geocode a city name to coordinates, and forecasts by coordinates.",
    capabilities=(
        CapabilitySpec(
            name="geocode",
            description="Coordinates and country code of a city by name (case-insensitive), "
            "e.g. 'Tokyo' -> lat 35.6897, lon 139.6917.",
            method="POST",
            path="/geocode",
            input_schema={
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "minLength": 1,
                        "description": "City name, e.g. 'Tokyo' or 'Paris, France'.",
                    }
                },
                "required": ["location"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "lat": {"type": "number"},
                    "lon": {"type": "number"},
                    "country": {"type": "string", "description": "ISO 3166 alpha-2 code."},
                },
                "required": ["name", "lat", "lon", "country"],
                "additionalProperties": False,
            },
            handler=_geocode,
        ),
        CapabilitySpec(
            name="forecast",
            description="Current temperature and condition plus a daily forecast for the "
            "next 'days' days at the given coordinates (use weather.geocode to get them).",
            method="POST",
            path="/forecast",
            input_schema={
                "type": "object",
                "properties": {
                    "lat": {"type": "number", "minimum": -90, "maximum": 90},
                    "lon": {"type": "number", "minimum": -180, "maximum": 180},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 3},
                    "units": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "default": "celsius",
                    },
                },
                "required": ["lat", "lon"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "lat": {"type": "number"},
                    "lon": {"type": "number"},
                    "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "temperature": {"type": "number", "description": "Current temperature."},
                    "condition": {"type": "string"},
                    "daily": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "day": {"type": "integer"},
                                "date": {"type": "string"},
                                "condition": {"type": "string"},
                                "temp_max": {"type": "number"},
                                "temp_min": {"type": "number"},
                                "precipitation_chance": {"type": "integer"},
                            },
                            "required": [
                                "day",
                                "date",
                                "condition",
                                "temp_max",
                                "temp_min",
                                "precipitation_chance",
                            ],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["lat", "lon", "units", "temperature", "condition", "daily"],
                "additionalProperties": False,
            },
            handler=_forecast,
        ),
    ),
)

DEMO_TOOL_SPECS: tuple[ToolSpec, ...] = (STOCKS, CURRENCY, WEATHER)
"""The bundled tools, in the order their servers start (and their ports are assigned)."""
