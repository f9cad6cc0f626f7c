"""The bundled demo tools (stocks, currency, weather) as real HTTP services.

They let the demo and the tests exercise dagwright against real sockets, the real wire
protocol and real failures (see :mod:`orchestration.demo.tools` for fault injection).
"""

from orchestration.demo.tool_data import (
    CITIES,
    COMPANY_SYMBOLS,
    DEMO_TOOL_SPECS,
    STOCK_PRICES,
    USD_RATES,
    CapabilitySpec,
    ToolFailure,
    ToolSpec,
    forecast,
)
from orchestration.demo.tools import (
    DEFAULT_PORT,
    DemoTools,
    DemoToolServer,
    Drop,
    Fault,
    Garbage,
    Hang,
    NotFoundAs503,
    RateLimited,
    RecordedRequest,
    ServiceUnavailable,
    Status,
    serve_forever,
    start_demo_tools,
)

__all__ = [
    "CITIES",
    "COMPANY_SYMBOLS",
    "DEFAULT_PORT",
    "DEMO_TOOL_SPECS",
    "STOCK_PRICES",
    "USD_RATES",
    "CapabilitySpec",
    "DemoToolServer",
    "DemoTools",
    "Drop",
    "Fault",
    "Garbage",
    "Hang",
    "NotFoundAs503",
    "RateLimited",
    "RecordedRequest",
    "ServiceUnavailable",
    "Status",
    "ToolFailure",
    "ToolSpec",
    "forecast",
    "serve_forever",
    "start_demo_tools",
]
