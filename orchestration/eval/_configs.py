"""The configurations an eval compares: a name and the settings its runs use.

From the command line each is ``NAME=ENV_FILE``: the ``ORCH_*`` variables of the file
(dotenv syntax) laid over the settings of the environment, so one file says what a
configuration changes — layers on or off, another model, another prompt budget — and the
file wins over whatever the shell exports. A relative path in a path-valued setting
(``ORCH_LLM_SCRIPT``, ``ORCH_CATALOG``, ...) is read relative to the file, so a
configuration and the files it names travel together.
"""

from __future__ import annotations

import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from pydantic_core import to_jsonable_python

from orchestration._text import closest
from orchestration.catalog import Catalog
from orchestration.config import ENV_PREFIX, OrchestratorConfig, env_name
from orchestration.errors import ConfigError
from orchestration.llm.base import LLMClient

__all__ = ["CONFIG_NAME_PATTERN", "EvalConfig", "config_from_env_file", "parse_config_option"]

CONFIG_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""A configuration's name names its cassette file and its runs' ids."""
_NAME = re.compile(CONFIG_NAME_PATTERN)


@dataclass(frozen=True)
class EvalConfig:
    """One configuration of an eval: ``name``, the ``config`` its runs use, and optionally
    the ``llm`` client (default: the one ``config`` describes, ``ORCH_LLM_*``) and the
    ``catalog`` (default: the eval's, else ``config.catalog``). ``settings`` are the
    ``ORCH_*`` values this configuration sets (for the report; secrets masked)."""

    name: str
    config: OrchestratorConfig = field(default_factory=OrchestratorConfig)
    llm: LLMClient | None = None
    catalog: Catalog | None = None
    source: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(f"configuration name {self.name!r} is not usable: use 1-64 letters, "
                              "digits, '_', '.', '-' (it names a cassette file and run ids)")


def parse_config_option(text: str) -> tuple[str, Path]:
    """``NAME=ENV_FILE`` → (name, path); raises :class:`ConfigError` saying the form."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"--config {text!r}: expected NAME=ENV_FILE, e.g. "
                          "--config layers-off=config/eval/layers-off.env")
    return name, Path(path)


def config_from_env_file(name: str, path: str | Path) -> EvalConfig:
    """The configuration ``name``: the environment's settings with the ``ORCH_*`` values of
    the dotenv file ``path`` laid over them. Raises :class:`ConfigError` naming the file and
    the variable: an unreadable file, a variable no setting reads (with the closest one), a
    value its setting does not accept."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"configuration {name!r}: {file} is not a file (expected an env file "
                          "of ORCH_* settings)")
    try:
        values = dotenv_values(file, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"configuration {name!r}: cannot read {file}: {exc}") from None
    fields = OrchestratorConfig.model_fields
    known = {env_name(f): f for f in fields}
    overrides: dict[str, Any] = {}
    for variable, value in values.items():
        upper = variable.upper()
        if upper not in known:
            near = closest(upper, known)
            what = "is not a dagwright setting" if upper.startswith(ENV_PREFIX) else \
                "is not an ORCH_* setting (only those configure a run)"
            raise ConfigError(f"{file}: {variable} {what}" +
                              (f"; did you mean {near}?" if near else "") +
                              " (`dagwright config` lists every setting)")
        if value is None:
            raise ConfigError(f"{file}: {variable} has no value; write {variable}=VALUE")
        overrides[known[upper]] = _typed(known[upper], value, file)
    try:
        config = OrchestratorConfig(**overrides)
    except ConfigError as exc:
        message = str(exc).replace(" (argument of OrchestratorConfig)", "")
        for field_name in overrides:
            message = re.sub(rf"(?<![\w]){field_name}=", f"{env_name(field_name)}=", message)
        raise ConfigError(f"{file}: {message}") from None
    effective = config.effective_values()
    settings = {env_name(f): to_jsonable_python(effective[env_name(f)]) for f in overrides}
    return EvalConfig(name=name, config=config, source=str(file), settings=settings)


def _typed(field_name: str, value: str, file: Path) -> Any:
    """An env file's text as the setting takes it: JSON for a mapping (a price table),
    a path relative to the file for a path."""
    annotation = OrchestratorConfig.model_fields[field_name].annotation
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = typing.get_args(annotation) if union else (annotation,)
    if any(typing.get_origin(k) is dict or k is dict for k in kinds):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"{file}: {env_name(field_name)} is not valid: it must be a JSON "
                              f"object ({exc})") from None
    if Path in kinds and value and not Path(value).is_absolute():
        return str((file.parent / value).resolve())
    return value
