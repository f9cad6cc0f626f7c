"""An eval dataset: the cases, each a query and what its run must show.

A dataset is a JSONL file (one case a line; blank lines are skipped) or a YAML file (a
list of cases, or ``{cases: [...]}``). Each case is at least ``{"id", "query"}``, with an
``expect`` saying what its run must show — the run's status, the calls that must and
must not be made, checks on step outputs and on the answer — and may carry a ``plan``
(execution alone is measured) and a ``context`` (the run's context: docs/context.md).

Everything is checked when the file is read, every problem named with the file, the line
(JSONL) or the case's index (YAML), the case id and the field: a JSON Schema that is not
one, a path that does not parse, a regex that does not compile, two cases with one id.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestration._data_files import DataFileError, read_data_file, read_text_file
from orchestration._schema import check_schema_errors
from orchestration._text import closest
from orchestration.context import check_context
from orchestration.errors import ConfigError, InvalidInput
from orchestration.result import RunStatus

__all__ = ["AnswerCheck", "CallExpectation", "Case", "Dataset", "DatasetError", "Expect",
           "JudgeCheck", "OutputCheck", "PathPart", "parse_path"]

CASE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
"""A case id names files (cassettes) and run ids, so it is kept to these characters."""

PathPart = str | int | Literal["*"]
_PATH_SEGMENT = re.compile(r"\.([^.\[\]]+)|\[(\d{1,9}|\*)\]")


class DatasetError(ConfigError):
    """A dataset that cannot be read: the message names the file, the line or case, and
    the field that is wrong. Nothing ran."""


def parse_path(text: str) -> tuple[PathPart, ...]:
    """The parts of a JSONPath-like path: ``$.daily[0].temp_max`` (the ``$`` and its dot
    may be left out: ``daily[0].temp_max``), ``[*]`` for every element of a list.
    Raises ``ValueError`` naming where the path stops making sense."""
    body = text.strip()
    if body.startswith("$"):
        body = body[1:]
    if body and not body.startswith((".", "[")):
        body = "." + body
    parts: list[PathPart] = []
    position = 0
    while position < len(body):
        match = _PATH_SEGMENT.match(body, position)
        if match is None:
            raise ValueError(f"path {text!r} is not a JSONPath-like path at {body[position:]!r}: "
                             "use .name, [index] or [*], e.g. $.daily[0].temp_max")
        name, index = match.group(1), match.group(2)
        parts.append(name if name is not None else "*" if index == "*" else int(index))
        position = match.end()
    return tuple(parts)


def _check_schema(schema: dict[str, Any] | None, what: str) -> dict[str, Any] | None:
    if schema is None:
        return None
    problems = check_schema_errors(schema)
    if problems:
        raise ValueError(f"{what} is not a valid JSON Schema: " + "; ".join(
            f"{path}: {message}" for path, message in problems[:3]))
    return schema


class _NamesACapability(BaseModel):
    """A check that names a capability as a reader writes it: ``capability:
    "tool.capability"`` without ``tool`` is read as both."""

    @model_validator(mode="before")
    @classmethod
    def _dotted(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tool" not in data and "." in str(data.get("capability", "")):
            tool, _, capability = str(data["capability"]).partition(".")
            return {**data, "tool": tool, "capability": capability}
        return data


class CallExpectation(_NamesACapability):
    """A call of ``tool.capability``: made when some attempt that reached the tool was sent
    with every value of ``params`` (numbers compare by value: ``7`` matches ``7.0``) and
    with parameters ``params_schema`` (a JSON Schema of the whole parameter object)
    accepts. ``capability`` may be written ``"tool.capability"``, without ``tool``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    capability: str
    params: dict[str, Any] = Field(default_factory=dict)
    params_schema: dict[str, Any] | None = None


    @field_validator("params_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _check_schema(value, "params_schema")

    @property
    def key(self) -> str:
        return f"{self.tool}.{self.capability}"

    def describe(self) -> str:
        """``weather.forecast(days=7)``: the call as a reader recognises it."""
        values = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.params.items())
        schema = " matching params_schema" if self.params_schema is not None else ""
        return f"{self.key}({values}){schema}"


class OutputCheck(_NamesACapability):
    """A check of a step's output: the value at ``path`` equals ``equals`` and/or matches the
    JSON Schema ``schema``. The step is named by its ``step`` id, or by ``capability``
    (``"tool.capability"``, or ``tool`` + ``capability``): then the check passes when the
    output of some succeeded step of that capability passes it — a real model chooses its
    own step ids. A path with ``[*]`` checks every element it reaches."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    step: str | None = None
    tool: str | None = None
    capability: str | None = None
    path: str = "$"
    equals: Any = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")


    @model_validator(mode="after")
    def _complete(self) -> OutputCheck:
        if (self.step is None) == (self.capability is None):
            raise ValueError("name the step: either \"step\" (its id) or \"capability\" "
                             "(\"tool.capability\")")
        if self.capability is not None and self.tool is None:
            raise ValueError("\"capability\" needs its tool: write \"tool.capability\" or add \"tool\"")
        if "equals" not in self.model_fields_set and self.schema_ is None:
            raise ValueError("say what the output must be: \"equals\" (a value) and/or "
                             "\"schema\" (a JSON Schema)")
        parse_path(self.path)
        _check_schema(self.schema_, "schema")
        return self

    @property
    def checks_equality(self) -> bool:
        return "equals" in self.model_fields_set

    @property
    def parts(self) -> tuple[PathPart, ...]:
        return parse_path(self.path)

    def target(self) -> str:
        """``step forecast`` / ``weather.forecast``, and the path: what the check reads."""
        where = f"step {self.step}" if self.step is not None else f"{self.tool}.{self.capability}"
        return f"{where} {self.path}"


class JudgeCheck(BaseModel):
    """An answer graded by an LLM against ``rubric``: run only when the eval is given a judge
    (off by default), and counted apart from the pass rate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rubric: str = Field(min_length=1)


class AnswerCheck(BaseModel):
    """Checks on the run's answer: it ``contains`` each text (case-insensitive), it matches
    ``regex`` (Python syntax, searched anywhere), and the ``judge``'s verdict (apart)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contains: list[str] = Field(default_factory=list)
    regex: str | None = None
    judge: JudgeCheck | None = None

    @field_validator("contains", mode="before")
    @classmethod
    def _one_text(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"the regex {value!r} does not compile: {exc}") from None
        return value


class Expect(BaseModel):
    """What a case's run must show. ``status`` defaults to ``succeeded``: a case that
    expects another outcome (a refusal, a partial run) says so; a list allows several."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: RunStatus | list[RunStatus] = "succeeded"
    calls: list[CallExpectation] = Field(default_factory=list)
    not_calls: list[CallExpectation] = Field(default_factory=list)
    outputs: list[OutputCheck] = Field(default_factory=list)
    answer: AnswerCheck | None = None

    @field_validator("status", mode="before")
    @classmethod
    def _known(cls, value: Any) -> Any:
        known = get_args(RunStatus)
        for status in value if isinstance(value, list) else [value]:
            if status not in known:
                near = closest(str(status), known)
                raise ValueError(f"{status!r} is not a run status" + (
                    f" (did you mean {near!r}?)" if near else "") + f"; use one of "
                    f"{', '.join(known)}, or a list of them")
        return value

    @property
    def statuses(self) -> list[str]:
        return [self.status] if isinstance(self.status, str) else list(self.status)


class Case(BaseModel):
    """One query of a dataset and what its run must show. ``plan``, when given, is run as
    it is (no planning: the executor and the layers are measured alone); ``context`` is
    handed to the run as its context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=CASE_ID_PATTERN)
    query: str = Field(min_length=1)
    expect: Expect = Field(default_factory=Expect)
    plan: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    description: str | None = None

    @field_validator("context")
    @classmethod
    def _context_the_engine_takes(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """Checked with the dataset, as the engine will check it: a context it would refuse
        is a mistake in the file, found before any case runs (or any model is paid)."""
        try:
            return check_context(value)
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None


class Dataset(BaseModel):
    """The cases of one file (or given in code), in order."""

    model_config = ConfigDict(frozen=True)

    name: str
    cases: list[Case]
    path: str | None = None
    sha256: str | None = None
    """Of the file's bytes: a report says exactly which dataset it measured."""

    @model_validator(mode="after")
    def _unique(self) -> Dataset:
        seen: set[str] = set()
        for case in self.cases:
            if case.id in seen:
                raise ValueError(f"two cases have the id {case.id!r}; case ids must be unique")
            seen.add(case.id)
        if not self.cases:
            raise ValueError("the dataset has no cases")
        return self

    @classmethod
    def from_cases(cls, cases: Iterable[Case | dict[str, Any]], *, name: str = "dataset") -> Dataset:
        """A dataset made in code; dicts are read as a file's cases are."""
        read = [c if isinstance(c, Case) else _case(c, f"{name}: case {i + 1}")
                for i, c in enumerate(cases)]
        return _dataset(name=name, cases=read, path=None, sha256=None, where=name)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Dataset:
        """Read a ``.jsonl`` (one case a line) or ``.yaml``/``.yml``/``.json`` file (a list of
        cases, or ``{"cases": [...]}``); raises :class:`DatasetError` naming what is wrong."""
        file = Path(path)
        try:
            if file.suffix == ".jsonl":  # one case a line
                text, raw = read_text_file(file, "dataset")
                cases = _jsonl_cases(file, text)
            else:
                data, raw = read_data_file(file, "dataset")
                cases = _document_cases(file, data)
        except DataFileError as exc:
            raise DatasetError(str(exc)) from None
        return _dataset(name=file.stem, cases=cases, path=str(file),
                        sha256=hashlib.sha256(raw).hexdigest(), where=str(file))

    def case(self, case_id: str) -> Case:
        for case in self.cases:
            if case.id == case_id:
                return case
        near = closest(case_id, [c.id for c in self.cases])
        raise KeyError(f"no case {case_id!r}" + (f" (did you mean {near!r}?)" if near else ""))


def _dataset(*, name: str, cases: list[Case], path: str | None, sha256: str | None,
             where: str) -> Dataset:
    try:
        return Dataset(name=name, cases=cases, path=path, sha256=sha256)
    except ValidationError as exc:
        raise DatasetError(f"{where}: {_problems(exc)}") from None


def _case(data: Any, where: str) -> Case:
    if not isinstance(data, dict):
        raise DatasetError(f"{where}: a case is an object with \"id\", \"query\" and "
                           f"\"expect\", not {type(data).__name__}")
    known = Case.model_fields
    unknown = [k for k in data if k not in known]
    if unknown:
        hints = [f"{k!r}" + (f" (did you mean {near!r}?)" if (near := closest(str(k), known)) else "")
                 for k in unknown]
        raise DatasetError(f"{where}: unknown key(s) {', '.join(hints)}; a case has "
                           f"{', '.join(known)}")
    label = f" (case {data['id']!r})" if isinstance(data.get("id"), str) else ""
    try:
        return Case.model_validate(data)
    except ValidationError as exc:
        raise DatasetError(f"{where}{label}: {_problems(exc)}") from None


def _problems(exc: ValidationError) -> str:
    """``expect.calls[0].params: Input should be a valid dictionary``, one per problem."""
    parts = []
    for error in exc.errors()[:5]:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where.lstrip('.')}: {message}" if where else message)
    if len(exc.errors()) > 5:
        parts.append(f"… and {len(exc.errors()) - 5} more")
    return "; ".join(parts)


def _jsonl_cases(file: Path, text: str) -> list[Case]:
    cases = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"{file}:{number}: not a JSON object ({exc}); a .jsonl dataset "
                               "has one case a line") from None
        cases.append(_case(data, f"{file}:{number}"))
    return cases


def _document_cases(file: Path, data: Any) -> list[Case]:
    if isinstance(data, dict) and set(data) == {"cases"}:
        data = data["cases"]
    if not isinstance(data, list):
        raise DatasetError(f"{file}: expected a list of cases (or {{cases: [...]}}); use .jsonl "
                           "for one case a line")
    return [_case(entry, f"{file}: case {index + 1}") for index, entry in enumerate(data)]

