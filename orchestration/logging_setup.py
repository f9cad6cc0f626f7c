"""Structured logging through the standard library, with run/step/trace ids on every record.

Loggers are named ``dagwright.*``. The ids come from a context variable that follows
the run: the orchestrator sets the run id for the whole run, and the tracer sets the
step id while a step's span is current (see :mod:`orchestration.telemetry._tracing`), so
concurrent steps never see each other's ids. The OpenTelemetry trace and span ids of the
current span are added when tracing is on, so a log line leads to its trace.

Every record that passes :class:`ContextFilter` is also redacted (message, arguments,
traceback, extra fields) with the run's :class:`~orchestration.redaction.Redactor`.

The library installs no handler beyond a ``NullHandler``; a service keeps its own logging
setup (the filter travels with the loggers from :func:`get_logger`), and the CLI calls
:func:`configure_logging` (text or JSON, ``ORCH_LOG_FORMAT``).

Third-party loggers that write what the engine sends get the same filter
(:func:`protect_logger`): httpx logs every request's URL at INFO, query string included,
so the engine adds the redacting filter to it when it makes its HTTP client, and
:func:`configure_logging` to httpx and httpcore.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from opentelemetry import trace

from orchestration.redaction import DEFAULT_REDACTOR, Redactor

if TYPE_CHECKING:
    from orchestration.config import OrchestratorConfig

__all__ = [
    "CONTEXT_FIELDS",
    "ROOT_LOGGER",
    "TEXT_FORMAT",
    "ContextFilter",
    "JsonFormatter",
    "LogContext",
    "TextFormatter",
    "configure_logging",
    "current_context",
    "current_redactor",
    "enter_log_context",
    "exit_log_context",
    "extra_fields",
    "get_logger",
    "log_context",
    "protect_logger"
]

ROOT_LOGGER = "dagwright"
CONTEXT_FIELDS = ("run_id", "step_id", "trace_id", "span_id")

# attributes every LogRecord has; anything else on a record came from ``extra=``
_STANDARD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_DONE = "_dagwright_context"  # set on a record once the filter has run
_OURS = "_dagwright_handler"  # marks the handler configure_logging installed


@dataclass(frozen=True)
class LogContext:
    """What the current task is working on, and how to redact what it logs."""

    run_id: str | None = None
    step_id: str | None = None
    redactor: Redactor = DEFAULT_REDACTOR


_NO_CONTEXT = LogContext()
_CONTEXT: ContextVar[LogContext | None] = ContextVar("dagwright_log_context", default=None)


def current_context() -> LogContext:
    """The log context of the running task (the run and step it works for), or an empty one."""
    return _CONTEXT.get() or _NO_CONTEXT


def current_redactor() -> Redactor:
    """The redactor of the run in scope (built-in patterns only outside a run)."""
    return current_context().redactor


def log_context(
    *,
    run_id: str | None = None,
    step_id: str | None = None,
    redactor: Redactor | None = None,
) -> LogScope:
    """Scope ids (and the run's redactor) to the enclosed code (``with``); unset
    arguments are kept.

    A new ``run_id`` clears the step id of the enclosing scope.
    """
    return LogScope(run_id, step_id, redactor)


class LogScope:
    """What :func:`log_context` returns: one small object rather than a generator and
    its context manager (a scope is open for a whole run or LLM call, and thousands of
    concurrent runs keep thousands of them alive for the garbage collector to walk)."""

    __slots__ = ("_redactor", "_run_id", "_step_id", "_token")

    def __init__(self, run_id: str | None, step_id: str | None,
                 redactor: Redactor | None) -> None:
        self._run_id = run_id
        self._step_id = step_id
        self._redactor = redactor
        self._token: Token[LogContext | None] | None = None

    def __enter__(self) -> LogContext:
        current = current_context()
        run_id, step_id, redactor = self._run_id, self._step_id, self._redactor
        if run_id is None and step_id is None and redactor is None:
            scoped = current
        else:
            scoped = LogContext(
                current.run_id if run_id is None else run_id,
                step_id if step_id is not None else
                (current.step_id if run_id is None or run_id == current.run_id else None),
                current.redactor if redactor is None else redactor)
        self._token = _CONTEXT.set(scoped)
        return scoped

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CONTEXT.reset(self._token)
            self._token = None


def enter_log_context(run_id: str, step_id: str) -> Token[LogContext | None]:
    """Scope a step's ids to the current context until :func:`exit_log_context` (the
    step path's cheap form of :func:`log_context`; the run's redactor is kept)."""
    return _CONTEXT.set(LogContext(run_id, step_id, current_context().redactor))


def exit_log_context(token: Token[LogContext | None]) -> None:
    """End the scope :func:`enter_log_context` opened."""
    _CONTEXT.reset(token)


class ContextFilter(logging.Filter):
    """Adds ``run_id``, ``step_id``, ``trace_id``, ``span_id`` and redacts the record.

    Ids already on the record (``extra={"step_id": ...}``) win. Runs once per record, so
    it can sit on loggers and handlers alike.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _DONE, False):
            return True
        ctx = current_context()
        span_context = trace.get_current_span().get_span_context()
        ids = {
            "run_id": ctx.run_id,
            "step_id": ctx.step_id,
            "trace_id": f"{span_context.trace_id:032x}" if span_context.is_valid else None,
            "span_id": f"{span_context.span_id:016x}" if span_context.is_valid else None,
        }
        for name, value in ids.items():  # always set, so any format string can name them
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        redactor = ctx.redactor
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not break the caller
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = redactor.redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = redactor.redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redactor.redact(record.stack_info)
        for key, value in list(record.__dict__.items()):
            if key not in _STANDARD_ATTRS and key not in CONTEXT_FIELDS and not key.startswith("_"):
                setattr(record, key, redactor.redact_value(value))
        setattr(record, _DONE, True)
        return True


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` fields of a record (not the standard ones, not the context ids)."""
    return {
        k: v for k, v in record.__dict__.items()
        if k not in _STANDARD_ATTRS and k not in CONTEXT_FIELDS and not k.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, ids, extra fields, error."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        entry.update(extra_fields(record))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["error"] = record.exc_text
        return json.dumps(entry, default=str, ensure_ascii=False)


TEXT_FORMAT = (
    "%(asctime)s %(levelname)-7s %(name)s [run=%(run_id)s step=%(step_id)s "
    "trace=%(trace_id)s] %(message)s"
)


class TextFormatter(logging.Formatter):
    """A classic one-line format with the ids in brackets; ``-`` for an id not known."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        missing = {f: "-" for f in CONTEXT_FIELDS if getattr(record, f, None) is None}
        if missing:
            record = logging.makeLogRecord({**record.__dict__, **missing})
        return super().formatMessage(record)


def get_logger(name: str) -> logging.Logger:
    """A ``dagwright.*`` logger that carries the context filter wherever its records go."""
    if name != ROOT_LOGGER and not name.startswith(ROOT_LOGGER + "."):
        name = f"{ROOT_LOGGER}.{name}"
    logger = logging.getLogger(name)
    if not any(isinstance(f, ContextFilter) for f in logger.filters):
        logger.addFilter(ContextFilter())
    return logger


THIRD_PARTY_LOGGERS = ("httpx", "httpcore")
"""Loggers of the HTTP client that may print URLs, headers or bodies the engine sends."""


def protect_logger(name: str) -> logging.Logger:
    """Add the redacting :class:`ContextFilter` to the logger ``name`` (once): every record
    logged on it directly is redacted with the redactor of the run in scope before any
    handler — the service's own included — sees it."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, ContextFilter) for f in logger.filters):
        logger.addFilter(ContextFilter())
    return logger


def configure_logging(
    config: OrchestratorConfig | None = None,
    *,
    level: str | int | None = None,
    fmt: str | None = None,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send ``dagwright.*`` records to ``stream`` (stderr) as text or JSON; for the CLI.

    Replaces the handler a previous call installed; records stop propagating to the root
    logger so they are not printed twice. Services with their own logging setup should
    not call this: the filter on :func:`get_logger` loggers already adds the ids.
    """
    level = level if level is not None else (config.log_level if config else "INFO")
    fmt = fmt if fmt is not None else (config.log_format if config else "text")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    setattr(handler, _OURS, True)
    root = logging.getLogger(ROOT_LOGGER)
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    root.propagate = False
    for name in THIRD_PARTY_LOGGERS:
        protect_logger(name)
    return handler


logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())
