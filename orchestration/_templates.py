"""Answer templates: text made from step outputs without an LLM (synthesis strategy
``template``).

Templates are Jinja, rendered in Jinja's *immutable sandbox*:

* **why Jinja rather than ``str.format``**: an answer is built from nested tool output —
  a field of a step's output, each item of a list, a line only when a value is there —
  which needs paths, loops, conditions and filters; ``str.format`` has paths only, in a
  third syntax beside the ``{{step.path}}`` references of plans and workflows. Jinja
  writes a value as ``{{ stats.summary }}``, the way a reference reads.
* **why sandboxed**: templates come from catalog and workflow files, which are shared
  and copied around; the sandbox refuses access to Python internals (``__class__``,
  ``__globals__``...) and to methods that change values, so a template can only read
  the data it is given. ``str.format`` on user-supplied format strings reads any
  attribute of any argument (``{0.__init__.__globals__}``).
* **strict**: a name or field that is not there fails the rendering (``StrictUndefined``)
  instead of leaving a silent blank in an answer someone will read; the run keeps its
  results and a warning says which value was missing.

What a template sees is plain JSON data (the run's outputs and inputs), and what it
writes is bounded (:data:`MAX_RENDERED_CHARS`), checked as it is produced. A template's
syntax is checked where it is loaded (catalog, workflow file), so a typo is reported at
start-up with its line.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["MAX_RENDERED_CHARS", "MAX_TEMPLATE_CHARS", "TemplateFailed", "render",
           "template_problem"]

MAX_TEMPLATE_CHARS = 50_000
"""The longest template accepted."""
MAX_RENDERED_CHARS = 200_000
"""The longest answer a template may write; rendering stops with an error past it."""


def _json_filter(value: Any, indent: int | None = None) -> str:
    """``{{ value | json }}``: the value as JSON text (not HTML-escaped, unlike ``tojson``)."""
    return json.dumps(value, ensure_ascii=False, indent=indent, default=str)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False,
                                        keep_trailing_newline=False)
    env.filters["json"] = _json_filter
    return env


_ENV = _environment()


class TemplateFailed(Exception):
    """A template could not be rendered: a missing value, a refused operation, too long."""


@functools.lru_cache(maxsize=256)
def _compiled(source: str) -> Template:
    return _ENV.from_string(source)


def template_problem(source: Any) -> str | None:
    """What is wrong with ``source`` as a template (its syntax, with the line), or None."""
    if not isinstance(source, str):
        return f"a template must be text, not {type(source).__name__}"
    if len(source) > MAX_TEMPLATE_CHARS:
        return f"the template is {len(source)} characters long; the limit is {MAX_TEMPLATE_CHARS}"
    try:
        _compiled(source)
    except TemplateError as exc:
        line = getattr(exc, "lineno", None)
        return f"line {line}: {exc.message}" if line else str(exc.message or exc)
    return None


def render(source: str, context: Mapping[str, Any]) -> str:
    """``source`` rendered over ``context`` (stripped of surrounding whitespace).

    Raises :class:`TemplateFailed` naming what went wrong: a value the template uses that
    is not there, an operation the sandbox refuses, an answer longer than
    :data:`MAX_RENDERED_CHARS`.
    """
    problem = template_problem(source)
    if problem is not None:
        raise TemplateFailed(problem)
    pieces: list[str] = []
    size = 0
    try:
        for piece in _compiled(source).generate(**context):
            size += len(piece)
            if size > MAX_RENDERED_CHARS:
                raise TemplateFailed(f"the answer would be longer than {MAX_RENDERED_CHARS} "
                                     "characters; rendering stopped")
            pieces.append(piece)
    except TemplateFailed:
        raise
    except TemplateError as exc:
        raise TemplateFailed(str(exc.message or exc)) from None
    except Exception as exc:  # a filter or operation that fails on the data it got
        raise TemplateFailed(f"{type(exc).__name__}: {exc}") from None
    return "".join(pieces).strip()
