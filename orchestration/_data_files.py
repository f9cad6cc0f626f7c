"""Reading a YAML or JSON file a person wrote: a catalog, a saved workflow, an eval dataset.

One reader, so every such file fails the same way: a :class:`DataFileError` whose message
names the file, the line and column where the parser stopped, and what it found —
``tools.yaml:4:1: catalog is not valid yaml: expected ',' or ']' ...`` — for a file that
cannot be read, is not UTF-8, or does not parse. Each caller raises it again as its own
error type (``CatalogError``, ``WorkflowError``, ``DatasetError``). The parsed data is
plain YAML/JSON; what it must look like is the caller's to check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

__all__ = ["DataFileError", "parse_data_text", "read_data_file", "read_text_file"]


class DataFileError(ValueError):
    """A data file that cannot be read or parsed; the message says where and why."""


def read_data_file(path: Path, what: str, *, max_bytes: int | None = None) -> tuple[Any, bytes]:
    """The parsed content of ``path`` (JSON for ``.json``, else YAML) and its bytes (for a
    digest of the file). ``what`` names the file in messages (``catalog``, ``workflow``);
    ``max_bytes`` refuses a larger file before it is parsed."""
    text, raw = read_text_file(path, what, max_bytes=max_bytes)
    return parse_data_text(text, path, what), raw


def read_text_file(path: Path, what: str, *, max_bytes: int | None = None) -> tuple[str, bytes]:
    """The UTF-8 text of ``path`` and its bytes, or :class:`DataFileError` saying why not."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if max_bytes is not None and len(raw) > max_bytes:
        raise DataFileError(f"{path}: {len(raw)} bytes; a {what} file is at most {max_bytes}")
    try:
        return raw.decode("utf-8"), raw
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: {what} is not UTF-8 text ({exc.reason} at byte "
                            f"{exc.start})") from None


def parse_data_text(text: str, path: Path, what: str) -> Any:
    """``text`` parsed as the file ``path`` holds it: JSON for ``.json``, else YAML."""
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataFileError(f"{path}:{exc.lineno}:{exc.colno}: {what} is not valid json: "
                                f"{exc.msg}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DataFileError(_yaml_error(path, what, exc)) from None


def _yaml_error(path: Path, what: str, exc: yaml.YAMLError) -> str:
    """A YAML error located in the file (PyYAML says ``<unicode string>``)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    detail = f"{problem} ({context})" if context else str(problem)
    return f"{where}: {what} is not valid yaml: {detail}"
