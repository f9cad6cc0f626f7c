"""The recovery ablation's world: ten in-process tools with strict schemas, and the scenarios.

The tools behave like the HTTP demo tools: strict JSON Schemas (checked by dagwright
before a call), business rules the schema cannot express (``amount must be greater than
0``), ``NOT_FOUND`` with a did-you-mean hint, all reported by raising
:class:`orchestration.ToolFailed`. A :class:`TransientFaults` injector makes calls fail
transiently at configured rates: a retryable 503, a timeout (the call outlives its
timeout) and a 503 that wraps an upstream timeout but says ``retryable: false`` (only
layer 4's transient override recovers that one).

Every scenario is a query with its ground-truth plan; :func:`scenarios` builds 40 of
them from 8 templates.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestration import Catalog, ErrorCategory, ToolFailed
from orchestration.plan import find_references

# ------------------------------------------------------------------------------- data

PRICES = {"TSLA": 468.29, "AAPL": 227.52, "MSFT": 415.1, "NVDA": 131.38, "GOOGL": 178.35,
          "AMZN": 201.2}
COMPANIES = {"Tesla": "TSLA", "Apple": "AAPL", "Microsoft": "MSFT", "Nvidia": "NVDA",
             "Alphabet": "GOOGL", "Amazon": "AMZN"}
USD_RATES = {"USD": 1.0, "EUR": 0.92, "GBP": 0.79, "JPY": 151.2, "CHF": 0.88}
CITIES = {"Tokyo": (35.6897, 139.6917, "JP"), "London": (51.5074, -0.1278, "GB"),
          "Paris": (48.8566, 2.3522, "FR"), "Sydney": (-33.8688, 151.2093, "AU"),
          "Berlin": (52.52, 13.405, "DE"), "Toronto": (43.6532, -79.3832, "CA")}
COUNTRIES = ["US", "GB", "FR", "JP", "DE", "AU", "CA"]
WAREHOUSES = ["east", "west", "north", "south"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday"]
SKUS = {"ABC-1001": 12.5, "ABC-2002": 49.99, "XYZ-3003": 7.25, "QRS-4004": 129.0}
EMAIL = r"^[a-z]+@example\.com$"


def _stable(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:6], "big")


def _input_error(code: str, message: str, **details: str) -> ToolFailed:
    return ToolFailed(code, message, ErrorCategory.INPUT_ERROR, retryable=True, details=details)


def _not_found(code: str, message: str, known: list[str], got: str) -> ToolFailed:
    match = difflib.get_close_matches(got, known, n=1, cutoff=0.5)
    hint = f"did you mean {match[0]!r}?" if match else f"known: {', '.join(known)}"
    return ToolFailed(code, message, ErrorCategory.NOT_FOUND, retryable=True,
                      details={"hint": hint})


# ------------------------------------------------------------------------------ tools


def lookup(company: str) -> dict[str, Any]:
    """Ticker symbol of a company by name."""
    for name, symbol in COMPANIES.items():
        if name.lower() == company.strip().lower():
            return {"company": name, "symbol": symbol}
    raise _not_found("COMPANY_NOT_FOUND", f"unknown company {company!r}", list(COMPANIES), company)


def quote(symbol: str) -> dict[str, Any]:
    """Latest share price in USD by ticker."""
    if symbol not in PRICES:
        raise _not_found("SYMBOL_NOT_FOUND", f"unknown symbol {symbol!r}", list(PRICES), symbol)
    return {"symbol": symbol, "price": PRICES[symbol], "currency": "USD"}


def convert(amount: float, to: str, round_to: int = 2, **kw: Any) -> dict[str, Any]:
    """Convert an amount between currencies (``from`` is a keyword, hence ``**kw``)."""
    source = kw["from"]
    if amount <= 0:
        raise _input_error("INVALID_AMOUNT", "amount must be greater than 0", field="amount")
    rate = USD_RATES[to] / USD_RATES[source]
    return {"amount": amount, "from": source, "to": to, "rate": round(rate, 6),
            "converted": round(amount * rate, round_to)}


def geocode(location: str) -> dict[str, Any]:
    """Coordinates of a city."""
    key = location.split(",")[0].strip().title()
    if key not in CITIES:
        raise _not_found("LOCATION_NOT_FOUND", f"unknown location {location!r}", list(CITIES), key)
    lat, lon, country = CITIES[key]
    return {"name": key, "lat": lat, "lon": lon, "country": country}


def forecast(lat: float, lon: float, days: int = 3, units: str = "celsius",
             include_hourly: bool = False) -> dict[str, Any]:
    """A deterministic forecast from the coordinates."""
    mean = 28.0 - 0.45 * abs(lat)
    temps = [round(mean + (_stable(lat, lon, d) % 61) / 10 - 3, 1) for d in range(1, days + 1)]
    if units == "fahrenheit":
        temps = [round(t * 9 / 5 + 32, 1) for t in temps]
    out: dict[str, Any] = {"lat": lat, "lon": lon, "units": units, "daily_max": temps}
    if include_hourly:
        out["hourly"] = [round(temps[0] - 2 + h / 6, 1) for h in range(0, 24, 6)]
    return out


def portfolio_value(shares: int, price: float, fee_pct: float = 0.0) -> dict[str, Any]:
    """Value of a holding after a percentage fee."""
    if price <= 0:
        raise _input_error("INVALID_PRICE", "price must be greater than 0", field="price")
    return {"shares": shares, "price": price, "value": round(shares * price * (1 - fee_pct / 100), 2)}


def shipping_quote(weight_kg: float, destination: str, express: bool = False) -> dict[str, Any]:
    """Cost and days to ship a parcel."""
    base = 8.0 + 3.1 * weight_kg + (12.0 if destination in ("JP", "AU") else 4.0)
    cost = round(base * (1.8 if express else 1.0), 2)
    return {"weight_kg": weight_kg, "destination": destination, "cost_usd": cost,
            "days": 2 if express else 6}


def inventory_check(sku: str, warehouses: list[str]) -> dict[str, Any]:
    """Stock of a SKU across warehouses, and its unit price."""
    if sku not in SKUS:
        raise _not_found("SKU_NOT_FOUND", f"unknown SKU {sku!r}", list(SKUS), sku)
    available = sum(_stable(sku, w) % 40 + 5 for w in warehouses)
    return {"sku": sku, "available": available, "unit_price_usd": SKUS[sku]}


def create_order(sku: str, quantity: int, unit_price: float, gift_wrap: bool = False) -> dict[str, Any]:
    """Place an order; the id is derived from its content."""
    if unit_price <= 0:
        raise _input_error("INVALID_PRICE", "unit_price must be greater than 0", field="unit_price")
    total = round(quantity * unit_price + (4.99 if gift_wrap else 0.0), 2)
    return {"order_id": f"ORD-{_stable(sku, quantity, unit_price, gift_wrap) % 10**6:06d}",
            "total_usd": total}


def schedule(title: str, day: str, duration_minutes: int, attendees: list[str],
             remote: bool = False) -> dict[str, Any]:
    """Book a meeting."""
    return {"event_id": f"EVT-{_stable(title, day, duration_minutes, *attendees) % 10**6:06d}",
            "day": day, "duration_minutes": duration_minutes, "attendees": len(attendees),
            "remote": remote}


def notify(channel: str, recipients: list[str], message: str, urgent: bool = False) -> dict[str, Any]:
    """Send a message."""
    if not message.strip():
        raise _input_error("EMPTY_MESSAGE", "message cannot be empty", field="message")
    return {"channel": channel, "sent": len(recipients), "urgent": urgent,
            "digest": _stable(channel, message, *recipients) % 10**8}


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


_CURRENCY = {"type": "string", "enum": list(USD_RATES)}

TOOL_SPECS: list[tuple[str, str, Callable[..., Any], dict[str, Any], str]] = [
    ("stocks", "lookup", lookup, _obj({"company": {"type": "string", "minLength": 1}}, ["company"]),
     "Ticker symbol of a company by its name, e.g. Tesla -> TSLA."),
    ("stocks", "quote", quote,
     _obj({"symbol": {"type": "string", "pattern": "^[A-Z]{1,5}$"}}, ["symbol"]),
     "Latest share price in USD of a ticker symbol."),
    ("currency", "convert", convert, _obj({
        "amount": {"type": "number", "description": "Amount in the source currency; > 0."},
        "from": {**_CURRENCY, "description": "Source currency code."},
        "to": {**_CURRENCY, "description": "Target currency code."},
        "round_to": {"type": "integer", "minimum": 0, "maximum": 4, "default": 2}},
        ["amount", "from", "to"]),
     "Convert an amount of money between USD, EUR, GBP, JPY and CHF."),
    ("weather", "geocode", geocode, _obj({"location": {"type": "string", "minLength": 1}},
                                         ["location"]),
     "Coordinates of a city by name."),
    ("weather", "forecast", forecast, _obj({
        "lat": {"type": "number", "minimum": -90, "maximum": 90},
        "lon": {"type": "number", "minimum": -180, "maximum": 180},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "include_hourly": {"type": "boolean"}}, ["lat", "lon"]),
     "Daily maximum temperatures for the next days at the given coordinates."),
    ("portfolio", "value", portfolio_value, _obj({
        "shares": {"type": "integer", "minimum": 1},
        "price": {"type": "number", "description": "Price per share in USD; > 0."},
        "fee_pct": {"type": "number", "minimum": 0, "maximum": 5}}, ["shares", "price"]),
     "Value in USD of a number of shares at a price, after a percentage fee."),
    ("shipping", "quote", shipping_quote, _obj({
        "weight_kg": {"type": "number", "exclusiveMinimum": 0, "maximum": 70,
                      "description": "Parcel weight in kilograms."},
        "destination": {"type": "string", "enum": COUNTRIES},
        "express": {"type": "boolean"}}, ["weight_kg", "destination"]),
     "Cost in USD and delivery days to ship a parcel to a country."),
    ("inventory", "check", inventory_check, _obj({
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "warehouses": {"type": "array", "items": {"type": "string", "enum": WAREHOUSES},
                       "minItems": 1}}, ["sku", "warehouses"]),
     "Units of a SKU available in the given warehouses, and its unit price in USD."),
    ("orders", "create", create_order, _obj({
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
        "unit_price": {"type": "number", "description": "Unit price in USD; > 0."},
        "gift_wrap": {"type": "boolean"}}, ["sku", "quantity", "unit_price"]),
     "Place an order for a quantity of a SKU at a unit price."),
    ("calendar", "schedule", schedule, _obj({
        "title": {"type": "string", "minLength": 1},
        "day": {"type": "string", "enum": DAYS},
        "duration_minutes": {"type": "integer", "minimum": 15, "maximum": 480,
                             "description": "Length of the meeting in minutes."},
        "attendees": {"type": "array", "items": {"type": "string", "pattern": EMAIL},
                      "minItems": 1},
        "remote": {"type": "boolean"}}, ["title", "day", "duration_minutes", "attendees"]),
     "Book a meeting on a weekday for a list of attendees."),
    ("notify", "send", notify, _obj({
        "channel": {"type": "string", "enum": ["email", "sms", "slack"]},
        "recipients": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "message": {"type": "string"},
        "urgent": {"type": "boolean"}}, ["channel", "recipients", "message"]),
     "Send a message to recipients on a channel."),
]

def _out(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": sorted(props),
            "additionalProperties": False}


_NUM, _STR = {"type": "number"}, {"type": "string"}
OUTPUT_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("stocks", "lookup"): _out({"company": _STR, "symbol": _STR}),
    ("stocks", "quote"): _out({"symbol": _STR, "price": _NUM, "currency": _STR}),
    ("currency", "convert"): _out({"amount": _NUM, "from": _STR, "to": _STR, "rate": _NUM,
                                   "converted": _NUM}),
    ("weather", "geocode"): _out({"name": _STR, "lat": _NUM, "lon": _NUM, "country": _STR}),
}
"""Output schemas for some tools only, as in real catalogs: with one, the planner checks
reference paths before anything runs; without, a wrong path fails when it is bound."""

UNIT_SLIPS: dict[tuple[str, str, str], tuple[float, str]] = {
    ("shipping", "quote", "weight_kg"): (1000.0, "grams instead of kilograms"),
    ("calendar", "schedule", "duration_minutes"): (1 / 60, "hours instead of minutes"),
}
"""Parameters where a planner plausibly slips units, pushing the value out of range."""

ENTITY_PARAMS: dict[tuple[str, str, str], str] = {
    ("stocks", "lookup", "company"): "company",
    ("weather", "geocode", "location"): "city",
}
"""Parameters naming an entity a planner may misspell (the tool answers NOT_FOUND + hint)."""

WRONG_FIELD_NAMES = {"price": "last_price", "lat": "latitude", "lon": "longitude",
                     "value": "total_value", "cost_usd": "cost", "unit_price_usd": "unit_price",
                     "symbol": "ticker", "converted": "result", "total_usd": "total",
                     "order_id": "id", "event_id": "id"}
"""The field name a planner writes instead of the real one in a reference."""


# ------------------------------------------------------------------------------ faults


@dataclass
class TransientRates:
    """Per-call probabilities of transient tool failures."""

    unavailable: float = 0.04  # 503 SERVICE_ERROR, retryable: resilience retries it
    timeout: float = 0.02  # the call outlives its timeout: TIMEOUT, resilience retries it
    wrapped_timeout: float = 0.02  # 503 "upstream timed out", retryable FALSE: layer 4 only

    def describe(self) -> str:
        return (f"{self.unavailable:.0%} retryable 503, {self.timeout:.0%} timeouts, "
                f"{self.wrapped_timeout:.0%} 503 wrapping a timeout with retryable=false "
                "(per tool call)")


WRAPPED_TIMEOUT_CODE = "UPSTREAM_TIMEOUT"
WRAPPED_TIMEOUT_MESSAGE = "the upstream service timed out while handling the request"


class TransientFaults:
    """Decides, per tool call, whether it fails transiently; seeded per run.

    The decision for the k-th call of a capability in a run depends only on the run's
    seed, the capability and k, so every configuration of the ablation meets the same
    faults at the same calls.
    """

    def __init__(self, rates: TransientRates, call_timeout_s: float) -> None:
        self.rates = rates
        self.call_timeout_s = call_timeout_s
        self.seed = "0"
        self.calls: dict[str, int] = {}
        self.injected: dict[str, int] = {"unavailable": 0, "timeout": 0, "wrapped_timeout": 0}

    def start_run(self, seed: str) -> None:
        self.seed = seed
        self.calls = {}

    async def maybe_fail(self, key: str) -> None:
        k = self.calls.get(key, 0)
        self.calls[key] = k + 1
        u = random.Random(f"{self.seed}|{key}|{k}").random()
        r = self.rates
        if u < r.unavailable:
            self.injected["unavailable"] += 1
            raise ToolFailed("SERVICE_UNAVAILABLE", "the service is overloaded; try again later",
                             ErrorCategory.SERVICE_ERROR, retryable=True)
        if u < r.unavailable + r.timeout:
            self.injected["timeout"] += 1
            await asyncio.sleep(self.call_timeout_s * 3)  # the engine gives up first
        elif u < r.unavailable + r.timeout + r.wrapped_timeout:
            self.injected["wrapped_timeout"] += 1
            raise ToolFailed(WRAPPED_TIMEOUT_CODE, WRAPPED_TIMEOUT_MESSAGE,
                             ErrorCategory.SERVICE_ERROR, retryable=False,
                             details={"upstream": "timeout"})


def build_catalog(faults: TransientFaults) -> Catalog:
    """The ten tools as in-process capabilities, each call first asking ``faults``."""
    catalog = Catalog()
    for tool, name, fn, schema, description in TOOL_SPECS:
        key = f"{tool}.{name}"

        async def call(_fn: Callable[..., Any] = fn, _key: str = key, **params: Any) -> Any:
            await faults.maybe_fail(_key)
            return _fn(**params)

        catalog.add_function(call, tool=tool, capability=name, input_schema=schema,
                             description=description, timeout_s=faults.call_timeout_s,
                             output_schema=OUTPUT_SCHEMAS.get((tool, name)))
    return catalog


# --------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    """A query and the plan a perfect planner would write for it."""

    name: str
    query: str
    plan: dict[str, Any]
    quantities: dict[str, str] = field(default_factory=dict)
    """Per ``step.param``: the words of the query that give its value (for unit slips)."""


def _step(sid: str, tool: str, cap: str, params: dict[str, Any]) -> dict[str, Any]:
    """A plan step that lists the steps it references in ``depends_on`` too, as LLM
    planners usually do (so a reference the planner gets wrong keeps its dependency)."""
    deps = sorted({ref.step_id for _, ref in find_references(params)})
    return {"id": sid, "tool": tool, "capability": cap, "params": params, "depends_on": deps}


def _ref(text: str) -> str:
    return "{{" + text + "}}"


def scenarios() -> list[Scenario]:
    """40 scenarios from 8 templates, 5 instances each; 2–5 steps, 1–3 references each."""
    out: list[Scenario] = []
    for company, cur in [("Tesla", "EUR"), ("Apple", "GBP"), ("Microsoft", "JPY"),
                         ("Nvidia", "CHF"), ("Amazon", "EUR")]:
        out.append(Scenario(
            f"stock_in_{company.lower()}_{cur.lower()}",
            f"What is the {company} share price in {cur}, rounded to 2 decimals?",
            {"steps": [
                _step("find", "stocks", "lookup", {"company": company}),
                _step("price", "stocks", "quote", {"symbol": _ref("find.symbol")}),
                _step("conv", "currency", "convert",
                      {"amount": _ref("price.price"), "from": "USD", "to": cur, "round_to": 2}),
            ]}))
    for city, days, units, hourly in [("Tokyo", 3, "celsius", False), ("London", 5, "fahrenheit", True),
                                      ("Paris", 2, "celsius", True), ("Sydney", 7, "fahrenheit", False),
                                      ("Berlin", 4, "celsius", False)]:
        out.append(Scenario(
            f"weather_{city.lower()}",
            f"Forecast for {city} for the next {days} days in {units}"
            + (", with hourly detail" if hourly else "") + ".",
            {"steps": [
                _step("geo", "weather", "geocode", {"location": city}),
                _step("fc", "weather", "forecast",
                      {"lat": _ref("geo.lat"), "lon": _ref("geo.lon"), "days": days,
                       "units": units, "include_hourly": hourly}),
            ]}))
    for company, shares, fee, cur in [("Apple", 10, 0.5, "GBP"), ("Tesla", 25, 1.0, "EUR"),
                                      ("Nvidia", 100, 0.25, "JPY"), ("Alphabet", 7, 0.0, "CHF"),
                                      ("Microsoft", 40, 1.5, "EUR")]:
        out.append(Scenario(
            f"holding_{company.lower()}",
            f"What are {shares} shares of {company} worth in {cur} after a {fee}% fee?",
            {"steps": [
                _step("find", "stocks", "lookup", {"company": company}),
                _step("price", "stocks", "quote", {"symbol": _ref("find.symbol")}),
                _step("val", "portfolio", "value",
                      {"shares": shares, "price": _ref("price.price"), "fee_pct": fee}),
                _step("conv", "currency", "convert",
                      {"amount": _ref("val.value"), "from": "USD", "to": cur}),
            ]}))
    for weight, dest, express, cur in [(2.5, "JP", True, "JPY"), (0.8, "GB", False, "GBP"),
                                       (12.0, "DE", True, "EUR"), (4.2, "AU", False, "USD"),
                                       (1.5, "FR", True, "EUR")]:
        out.append(Scenario(
            f"ship_{dest.lower()}",
            f"How much does it cost in {cur} to ship a {weight} kg parcel to {dest}"
            + (" by express" if express else " by standard post") + "?",
            {"steps": [
                _step("ship", "shipping", "quote",
                      {"weight_kg": weight, "destination": dest, "express": express}),
                _step("conv", "currency", "convert",
                      {"amount": _ref("ship.cost_usd"), "from": "USD", "to": cur}),
            ]},
            quantities={"ship.weight_kg": f"{weight} kg"}))
    for sku, qty, whs, gift in [("ABC-1001", 3, ["east", "west"], False),
                                ("ABC-2002", 1, ["north"], True),
                                ("XYZ-3003", 12, ["east", "south", "west"], False),
                                ("QRS-4004", 2, ["west"], True),
                                ("XYZ-3003", 40, ["north", "south"], True)]:
        out.append(Scenario(
            f"order_{sku.lower()}_{qty}",
            f"Check stock of {sku} in the {', '.join(whs)} warehouses, order {qty} at its "
            f"price{' gift-wrapped' if gift else ''}, and email sales@example.com the order id.",
            {"steps": [
                _step("inv", "inventory", "check", {"sku": sku, "warehouses": whs}),
                _step("order", "orders", "create",
                      {"sku": sku, "quantity": qty, "unit_price": _ref("inv.unit_price_usd"),
                       "gift_wrap": gift}),
                _step("tell", "notify", "send",
                      {"channel": "email", "recipients": ["sales@example.com"],
                       "message": "Order " + _ref("order.order_id") + " placed",
                       "urgent": False}),
            ]}))
    for title, day, hours, people, remote in [
            ("Planning", "monday", 2, ["ann", "bob"], True),
            ("Review", "wednesday", 1.5, ["cat"], False),
            ("Retro", "friday", 1, ["dan", "eve", "fay"], True),
            ("Offsite", "tuesday", 6, ["gus", "hal"], False),
            ("Sync", "thursday", 0.5, ["ivy", "jon"], True)]:
        emails = [f"{p}@example.com" for p in people]
        minutes = int(hours * 60)
        out.append(Scenario(
            f"meeting_{title.lower()}",
            f"Book a {hours} hour {title} meeting on {day.title()} with {', '.join(emails)}"
            f"{' (remote)' if remote else ' (in person)'} and post the event id on slack to "
            "the attendees.",
            {"steps": [
                _step("meet", "calendar", "schedule",
                      {"title": title, "day": day, "duration_minutes": minutes,
                       "attendees": emails, "remote": remote}),
                _step("post", "notify", "send",
                      {"channel": "slack", "recipients": emails,
                       "message": f"{title}: " + _ref("meet.event_id"), "urgent": False}),
            ]},
            quantities={"meet.duration_minutes": f"{hours} hour"}))
    for city, company, cur in [("Tokyo", "Nvidia", "JPY"), ("London", "Apple", "GBP"),
                               ("Toronto", "Amazon", "CHF"), ("Paris", "Tesla", "EUR"),
                               ("Sydney", "Microsoft", "GBP")]:
        out.append(Scenario(
            f"trip_{city.lower()}",
            f"I'm travelling to {city}: the 3-day forecast in celsius, and the {company} share "
            f"price in {cur}.",
            {"steps": [
                _step("geo", "weather", "geocode", {"location": city}),
                _step("fc", "weather", "forecast",
                      {"lat": _ref("geo.lat"), "lon": _ref("geo.lon"), "days": 3,
                       "units": "celsius"}),
                _step("find", "stocks", "lookup", {"company": company}),
                _step("price", "stocks", "quote", {"symbol": _ref("find.symbol")}),
                _step("conv", "currency", "convert",
                      {"amount": _ref("price.price"), "from": "USD", "to": cur}),
            ]}))
    for sku, qty, weight, dest in [("ABC-1001", 5, 3.0, "GB"), ("QRS-4004", 1, 9.5, "JP"),
                                   ("ABC-2002", 2, 1.2, "CA"), ("XYZ-3003", 30, 6.0, "US"),
                                   ("QRS-4004", 4, 22.0, "FR")]:
        out.append(Scenario(
            f"fulfil_{sku.lower()}_{dest.lower()}",
            f"Order {qty} of {sku} from the east warehouse at its price and quote express "
            f"shipping of the {weight} kg parcel to {dest}; text ops@example.com urgently.",
            {"steps": [
                _step("inv", "inventory", "check", {"sku": sku, "warehouses": ["east"]}),
                _step("order", "orders", "create",
                      {"sku": sku, "quantity": qty, "unit_price": _ref("inv.unit_price_usd")}),
                _step("ship", "shipping", "quote",
                      {"weight_kg": weight, "destination": dest, "express": True}),
                _step("tell", "notify", "send",
                      {"channel": "sms", "recipients": ["ops@example.com"],
                       "message": "Order " + _ref("order.order_id") + " ships for $"
                       + _ref("ship.cost_usd"), "urgent": True}),
            ]},
            quantities={"ship.weight_kg": f"{weight} kg"}))
    return out
