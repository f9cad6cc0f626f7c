"""The LLM debug store: full prompts and answers of every LLM call, as redacted JSONL.

Spans keep token counts and short errors; when a layer makes a surprising decision an
operator needs the exact prompt and answer. With ``ORCH_LLM_DEBUG_ENABLED=true`` the
LLM gateway hands every call (success or failure) to :meth:`LLMDebugStore.record`, which
appends one JSON line to ``ORCH_LLM_DEBUG_PATH``:

``{"ts", "run_id", "step_id", "site", "model", "provider", "trace_id", "span_id",
"latency_ms", "messages": [{"role", "content"}], "response_schema", "response",
"finish_reason", "usage", "error", "truncated"}``

``site`` is the request's purpose (``plan``, ``validation_feedback``,
``semantic_retry``, ``synthesis``, ``replan``...). Bounded: the prompt and the answer are
each cut to ``ORCH_LLM_DEBUG_MAX_CHARS`` with a visible marker, and the file rotates at
``ORCH_LLM_DEBUG_MAX_FILE_BYTES`` keeping one previous file (``<path>.1``). Secrets are
redacted before anything is written. Writing never breaks a run: an I/O error is logged
once and the record is dropped.

``dagwright debug RUN_ID`` reads a run's records back (:func:`read_run`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from opentelemetry import trace

from orchestration._text import clip
from orchestration.config import OrchestratorConfig
from orchestration.llm.base import LLMRequest, LLMResponse
from orchestration.logging_setup import get_logger
from orchestration.redaction import DEFAULT_REDACTOR, Redactor

__all__ = ["LLMDebugStore", "iter_records", "read_run", "render_run"]

log = get_logger("dagwright.debug_store")


def _clipped(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters with a marker; and whether it was cut."""
    kept = clip(text, limit, marker="debug store: truncated")
    return kept, kept is not text


class _RotatingWriter(RotatingFileHandler):
    """The stdlib's size-based rotation, with write errors raised to the store (which
    counts and drops the record) instead of printed by the logging machinery."""

    def handleError(self, record: logging.LogRecord) -> None:
        raise  # re-raises the error emit() caught


class LLMDebugStore:
    """Appends redacted, size-bounded LLM exchanges to a rotating JSONL file.

    One store per file: :meth:`for_path` returns the store already writing a path, so
    orchestrators sharing a file share one lock and one rotation.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_chars: int = 100_000,
        max_file_bytes: int = 50_000_000,
        redactor: Redactor | None = None,
    ) -> None:
        self.path = Path(path)
        self.max_chars = max_chars
        self.redactor = redactor or DEFAULT_REDACTOR
        self.records_written = 0
        self.records_dropped = 0
        self._failed_once = False
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handler = _RotatingWriter(
            self.path, maxBytes=max_file_bytes, backupCount=1, encoding="utf-8", delay=True
        )
        self._handler.setFormatter(logging.Formatter("%(message)s"))

    @classmethod
    def from_config(
        cls, config: OrchestratorConfig, redactor: Redactor | None = None
    ) -> LLMDebugStore | None:
        """The store the config asks for, or None when the debug store is off."""
        if not config.llm_debug_enabled:
            return None
        return cls.for_path(
            config.llm_debug_path, max_chars=config.llm_debug_max_chars,
            max_file_bytes=config.llm_debug_max_file_bytes,
            redactor=redactor or Redactor.from_config(config),
        )

    @classmethod
    def for_path(cls, path: Path, **kwargs: Any) -> LLMDebugStore:
        """The store writing ``path`` (created on first use; redactor and limits updated)."""
        key = Path(path).resolve()
        with _STORES_LOCK:
            store = _STORES.get(key)
            if store is None:
                store = _STORES[key] = cls(key, **kwargs)
            else:
                store.redactor = kwargs.get("redactor") or store.redactor
                store.max_chars = kwargs.get("max_chars", store.max_chars)
            return store

    # --- writing -------------------------------------------------------------------
    def record(
        self,
        request: LLMRequest,
        response: LLMResponse | None,
        error: BaseException | None,
        elapsed_s: float,
        *,
        redactor: Redactor | None = None,
    ) -> None:
        """Write one exchange; the signature of the gateway's ``debug_recorder``."""
        try:
            entry = self.build_record(request, response, error, elapsed_s, redactor or self.redactor)
            line = json.dumps(entry, ensure_ascii=False, default=str)
            with self._lock:
                self._handler.handle(logging.makeLogRecord({"msg": line, "args": None}))
                self.records_written += 1
        except Exception as exc:  # the debug store must never break an LLM call
            self.records_dropped += 1
            if not self._failed_once:
                self._failed_once = True
                log.warning("LLM debug store could not write to %s: %s", self.path, exc)

    def recorder_for(self, redactor: Redactor) -> Any:
        """A ``debug_recorder`` that redacts with a run's own redactor."""

        def record(request: LLMRequest, response: LLMResponse | None,
                   error: BaseException | None, elapsed_s: float) -> None:
            self.record(request, response, error, elapsed_s, redactor=redactor)

        return record

    def build_record(
        self,
        request: LLMRequest,
        response: LLMResponse | None,
        error: BaseException | None,
        elapsed_s: float,
        redactor: Redactor,
    ) -> dict[str, Any]:
        """The JSON object of one exchange: redacted first, then clipped."""
        budget = self.max_chars
        truncated = False
        messages = []
        for message in request.messages:
            content = redactor.redact(str(message.get("content", "")))
            kept, cut = _clipped(content, max(0, budget))
            budget -= min(len(content), budget)
            truncated |= cut
            messages.append({"role": message.get("role", "user"), "content": kept})
        answer: str | None = None
        if response is not None:
            answer, cut = _clipped(redactor.redact(response.content), self.max_chars)
            truncated |= cut
        span_context = trace.get_current_span().get_span_context()
        entry: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "run_id": request.run_id,
            "step_id": request.step_id,
            "site": request.purpose,
            "model": response.model if response is not None and response.model else None,
            "trace_id": f"{span_context.trace_id:032x}" if span_context.is_valid else None,
            "span_id": f"{span_context.span_id:016x}" if span_context.is_valid else None,
            "latency_ms": round(elapsed_s * 1000, 3),
            "messages": messages,
            "response_schema": request.schema_name if request.response_schema else None,
            "response": answer,
            "finish_reason": response.finish_reason if response is not None else None,
            "usage": ({"input_tokens": response.usage.input_tokens,
                       "output_tokens": response.usage.output_tokens}
                      if response is not None else None),
            "error": _error_entry(error, redactor, self.max_chars),
            "truncated": truncated,
        }
        if request.metadata:
            entry["metadata"] = redactor.redact_value(request.metadata)
        return entry

    def close(self) -> None:
        with self._lock:
            self._handler.close()


def _error_entry(
    error: BaseException | None, redactor: Redactor, max_chars: int
) -> dict[str, Any] | None:
    """A failed call's error; a stream cut midway also keeps the text it had received."""
    if error is None:
        return None
    entry: dict[str, Any] = {"type": type(error).__name__,
                             "message": _clipped(redactor.redact(str(error)), 2000)[0]}
    partial = getattr(error, "partial", None)
    if isinstance(partial, str) and partial:
        entry["partial"] = _clipped(redactor.redact(partial), max_chars)[0]
    return entry


_STORES: dict[Path, LLMDebugStore] = {}
_STORES_LOCK = threading.Lock()


# --- reading ---------------------------------------------------------------------------
def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every record of the store, oldest first (the rotated file, then the current one)."""
    path = Path(path)
    for file in (path.with_name(path.name + ".1"), path):
        if not file.exists():
            continue
        with file.open(encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash mid-write
                if isinstance(value, dict):
                    yield value


def read_run(path: Path, run_id: str) -> list[dict[str, Any]]:
    """The records of one run; ``run_id`` may be a unique prefix of the id."""
    records = [r for r in iter_records(path) if str(r.get("run_id", "")).startswith(run_id)]
    run_ids = {r.get("run_id") for r in records}
    if len(run_ids) > 1:
        raise ValueError(f"run id prefix {run_id!r} matches {len(run_ids)} runs; give more of it")
    return records


def render_run(records: list[dict[str, Any]], *, full: bool = True) -> str:
    """A human-readable transcript of a run's LLM exchanges (``dagwright debug``)."""
    if not records:
        return ""
    lines = [f"run {records[0].get('run_id')}: {len(records)} LLM exchange(s)"]
    for number, r in enumerate(records, 1):
        usage = r.get("usage") or {}
        head = (f"\n#{number} site={r.get('site')} step={r.get('step_id') or '-'} "
                f"model={r.get('model') or '-'} latency={r.get('latency_ms')}ms "
                f"tokens={usage.get('input_tokens', '-')}/{usage.get('output_tokens', '-')} "
                f"trace={r.get('trace_id') or '-'}")
        lines.append(head + (" (truncated)" if r.get("truncated") else ""))
        for message in r.get("messages", []):
            content = message.get("content", "")
            if not full:
                content = _clipped(content, 500)[0]
            lines.append(f"--- {message.get('role')}\n{content}")
        if r.get("error"):
            error = r["error"]
            lines.append(f"--- error\n{error.get('type')}: {error.get('message')}")
        else:
            response = r.get("response") or ""
            lines.append(f"--- response (finish={r.get('finish_reason')})\n"
                         f"{response if full else _clipped(response, 500)[0]}")
    return "\n".join(lines) + "\n"
