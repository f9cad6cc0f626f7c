"""JSON from untrusted text — LLM answers and tool bodies — read within bounds.

The one JSON decoding path of the engine. Everything the engine decodes comes from
something it does not control (a model, a tool, a provider), so every decode is bounded:

* **nesting depth** — Python's decoder recurses, so ``"[" * 1000`` raises
  ``RecursionError`` (not a ``ValueError``), and a value a few hundred levels deep
  decodes fine but cannot be serialised again (pydantic stops at ~255 levels, so
  ``RunResult.to_dict()`` would fail after the run did its work). A value deeper than
  ``max_depth`` (``ORCH_MAX_JSON_DEPTH``) is refused where it enters;
* **numbers and text JSON cannot carry on** — ``NaN``/``Infinity`` literals and numbers
  that overflow to infinity, strings with a lone surrogate (``"\\ud800"``): a value
  holding them cannot be sent to an HTTP tool or written as UTF-8; they are refused;
* **size** — the caller bounds the text (``ORCH_MAX_RESPONSE_BYTES`` for tool bodies); the
  search for JSON inside prose tries a bounded number of candidates.

Every refusal is an :class:`UnreadableJSON` (a ``ValueError``) whose message says what is
wrong and which setting bounds it. (This module imports nothing of the engine, so the
protocol module can use it without an import cycle through ``errors``.)
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

DEFAULT_MAX_DEPTH = 64
"""Default of ``ORCH_MAX_JSON_DEPTH``: far deeper than any sane tool or plan value."""
MAX_DEPTH_CEILING = 200
"""The most ``ORCH_MAX_JSON_DEPTH`` may be (results must stay serialisable): what a reader
that does not know the configured bound decodes within (the configured one is checked
where the value enters the run)."""
MAX_CANDIDATES = 256
"""How many ``{``/``[`` positions :func:`extract_json` tries before giving up."""

_CONTAINERS = (dict, list)


class UnreadableJSON(ValueError):
    """Text that is not JSON the engine accepts: invalid, too deep, non-finite numbers."""


def depth_problem(max_depth: int) -> str:
    """The wording of a depth refusal, naming the setting that bounds it."""
    return f"JSON nested deeper than {max_depth} levels (ORCH_MAX_JSON_DEPTH={max_depth})"


def _refuse_constant(name: str) -> Any:
    raise UnreadableJSON(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise UnreadableJSON(f"{text[:40]} does not fit a float (not a finite JSON number)")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
_FINITE_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
"""``decode``'s decoders for text, made once (``json.loads`` with arguments makes one per
call); the second where a float may overflow to infinity."""

# Only a literal with a 3-digit exponent or 309+ digits can overflow to infinity; checking
# every float with a Python hook costs more than the decode itself, so the hook is used
# only on text where these find a candidate. Three searches, not one alternation: each
# starts with a character class the regex engine scans for quickly (one pattern with
# both alternatives and a look-behind cost 3x the decode of a 100 KB plan), and the
# costly search for 309 digits runs only on text that has 8 in a row.
_EXPONENT = re.compile(r"[0-9][eE]\+?[0-9]{3}")
_EXPONENT_BYTES = re.compile(rb"[0-9][eE]\+?[0-9]{3}")
_EIGHT_DIGITS = re.compile(r"[0-9]{8}")
_EIGHT_DIGITS_BYTES = re.compile(rb"[0-9]{8}")
_LONG_DIGITS = re.compile(r"(?<![0-9])[0-9]{309}")
_LONG_DIGITS_BYTES = re.compile(rb"(?<![0-9])[0-9]{309}")


def _may_overflow(text: str | bytes) -> bool:
    """Whether ``text`` holds a number literal that could overflow a float."""
    if isinstance(text, bytes):
        return (_EXPONENT_BYTES.search(text) is not None
                or (_EIGHT_DIGITS_BYTES.search(text) is not None
                    and _LONG_DIGITS_BYTES.search(text) is not None))
    return (_EXPONENT.search(text) is not None
            or (_EIGHT_DIGITS.search(text) is not None and _LONG_DIGITS.search(text) is not None))
# Likewise a lone surrogate can only come from a \uD800-\uDFFF escape (or, in text handed
# over as a Python str, a surrogate character): only then are the strings walked.
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def nesting_exceeds(value: Any, max_depth: int) -> bool:
    """Whether ``value`` holds containers nested deeper than ``max_depth`` levels
    (``[]`` is one level). Iterative, level by level: it cannot itself recurse too deep."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        below: list[Any] = []
        extend = below.extend
        for item in level:
            children = item.values() if type(item) is dict else item
            extend([c for c in children if type(c) in _CONTAINERS])
        level = below
    return False


def decode(text: str | bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The JSON value of ``text`` (the whole text), or :class:`UnreadableJSON`."""
    overflow = _may_overflow(text)
    try:
        if isinstance(text, str):  # the decoders made once, not one per call as json.loads
            value = (_FINITE_DECODER if overflow else _DECODER).decode(text)
        else:  # bytes: json.loads detects their encoding
            value = json.loads(text, parse_constant=_refuse_constant,
                               parse_float=_finite_float if overflow else None)
    except RecursionError:
        raise UnreadableJSON(depth_problem(max_depth)) from None
    except UnreadableJSON:
        raise
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes
        raise UnreadableJSON(f"not valid JSON: {exc}") from None
    _check_depth(text, value, max_depth)
    _check_text(text, value, max_depth)
    return value


def decode_at(text: str, start: int, *, max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[Any, int]:
    """The JSON value that begins at ``start`` in ``text``, and the index just past it:
    read exactly as :func:`decode` reads that value's text alone (same decoders, same
    bounds), without first finding where it ends. Raises :class:`UnreadableJSON` (or
    ``RecursionError`` far past any bound) when no whole, acceptable value begins there
    — which includes a value the text has not finished yet."""
    value, end = _DECODER.raw_decode(text, start)
    piece = text[start:end]
    if _may_overflow(piece):
        value = _FINITE_DECODER.decode(piece)
    _check_depth(piece, value, max_depth)
    _check_text(piece, value, max_depth)
    return value, end


def _check_text(text: str | bytes, value: Any, max_depth: int) -> None:
    if isinstance(text, bytes):
        found = _SURROGATE_BYTES.search(text) is not None
    elif text.isascii():  # no surrogate characters: only an escape could make one
        found = "\\u" in text and _SURROGATE.search(text) is not None
    else:
        found = _SURROGATE.search(text) is not None
    if found:
        problem = unencodable(value, max_depth)
        if problem is not None:
            raise UnreadableJSON(f"{problem[0]}: {problem[1]}")


def _check_depth(text: str | bytes, value: Any, max_depth: int) -> None:
    # fewer brackets than the limit cannot nest deeper than it: most text stops here
    opened = (text.count(b"[") + text.count(b"{") if isinstance(text, bytes)
              else text.count("[") + text.count("{"))
    if opened > max_depth and nesting_exceeds(value, max_depth):
        raise UnreadableJSON(depth_problem(max_depth))


_FLAT_ITEMS = 32
"""Objects with more members than this are encoded to be checked (the fast path would
no longer be faster)."""
_INT_BOUND = 1 << 63
_NUMBER_CHARS = 24  # an int below 2**63 or a finite float's repr needs at most this many


def flat_size_bound(value: Any) -> int | None:
    """An upper bound on the encoded size of ``value`` when it is a small flat JSON object
    that is certainly encodable — string keys; ASCII strings, bools, None, ints below
    2**63 and finite floats as values — else None (the caller encodes to find out).

    Most tool parameters and outputs are such objects; reading their types costs a
    fraction of an encoder pass, and an ASCII string cannot hold a lone surrogate.
    """
    if type(value) is not dict or len(value) > _FLAT_ITEMS:
        return None
    size = 2
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            return None
        kind = type(item)
        if kind is str:
            if not item.isascii():
                return None
            size += len(key) + 6 * len(item) + 6  # an escaped control char is 6 (\\u0000)
        elif kind is int:
            if not -_INT_BOUND < item < _INT_BOUND:
                return None
            size += len(key) + _NUMBER_CHARS + 4
        elif kind is float:
            if not math.isfinite(item):
                return None
            size += len(key) + _NUMBER_CHARS + 4
        elif item is None or kind is bool:
            size += len(key) + 9
        else:
            return None
    return size


def unencodable(value: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[str, str] | None:
    """Why ``value`` cannot be sent as JSON — a non-finite number, a string that is not
    valid Unicode (a lone surrogate), a type JSON lacks, or nesting deeper than
    ``max_depth`` — as ``(JSON path, problem)`` of the first offending value; None when
    it can be sent."""
    if max_depth >= 1 and flat_size_bound(value) is not None:
        return None
    try:
        encode(value, max_depth)
    except UnreadableJSON as exc:
        return exc.args[1] if len(exc.args) > 1 else ("$", str(exc))
    return None


def encode(value: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> bytes:
    """``value`` as compact UTF-8 JSON, or :class:`UnreadableJSON` naming the first value
    JSON cannot carry and its path (``exc.args[1]`` is ``(path, problem)``).

    The encoding is the C encoder's; only when it refuses is the value walked (iteratively,
    bounded by ``max_depth`` — a circular value included) to say where.
    """
    if not nesting_exceeds(value, max_depth):
        try:
            return json.dumps(value, allow_nan=False, ensure_ascii=False,
                              separators=(",", ":")).encode("utf-8")
        except (ValueError, TypeError, UnicodeEncodeError, RecursionError):
            pass
    problem = _first_problem(value, max_depth) or ("$", "not a JSON value")
    raise UnreadableJSON(f"{problem[0]}: {problem[1]}", problem)


def _first_problem(value: Any, max_depth: int) -> tuple[str, str] | None:
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return path, "the text is not valid Unicode (it holds a lone surrogate)"
        elif item is None or isinstance(item, bool | int):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, f"{item!r} is not a JSON number (finite numbers only)"
        elif isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                return path, depth_problem(max_depth)
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        return path, f"key {key!r} is not a string"
                    stack.append((child, f"{path}.{key}", depth + 1))
            else:
                stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
        else:
            return path, f"type {type(item).__name__!r} is not a JSON type"
    return None


def json_safe(value: Any, max_depth: int) -> Any:
    """A copy of ``value`` that is strict JSON whatever ``value`` holds: what a record
    keeps of parameters refused for not being JSON, so the record (``RunResult.to_dict()``)
    stays JSON. Containers below ``max_depth`` levels become a marker, non-finite numbers
    their name, lone surrogates an escape, other types their ``repr``. (Recursion here is
    bounded by ``max_depth``.)"""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict | list | tuple):
        if max_depth <= 0:
            return "[cut: nested deeper than the limit]"
        if isinstance(value, dict):
            return {json_safe(k if isinstance(k, str) else repr(k), 1): json_safe(v, max_depth - 1)
                    for k, v in value.items()}
        return [json_safe(v, max_depth - 1) for v in value]
    return repr(value)


def extract_json(text: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The first JSON object or array in ``text``; code fences and prose around it are
    tolerated.

    Raises :class:`UnreadableJSON` with the decoder's message and position when no
    candidate parses, or naming the limit a candidate broke (depth, non-finite number).
    At most :data:`MAX_CANDIDATES` start positions are tried, so prose full of brackets
    costs a bounded number of decoder runs.
    """
    if not text or not text.strip():
        raise UnreadableJSON("the answer is empty")
    try:
        return decode(text.strip(), max_depth=max_depth)
    except UnreadableJSON as exc:
        if is_limit(exc):
            raise UnreadableJSON(f"the answer holds {exc}") from None
    decoder = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
    first_error: ValueError | None = None
    tried = 0
    for index, char in enumerate(text):
        if char not in "{[":
            continue
        tried += 1
        if tried > MAX_CANDIDATES:
            break
        try:
            value, end = decoder.raw_decode(text, index)
        except RecursionError:
            raise UnreadableJSON(f"the answer holds {depth_problem(max_depth)}") from None
        except UnreadableJSON as exc:
            raise UnreadableJSON(f"the answer holds {exc}") from None
        except ValueError as exc:
            first_error = first_error or exc
            continue
        if isinstance(value, dict | list):
            try:
                _check_depth(text[index:end], value, max_depth)
                _check_text(text[index:end], value, max_depth)
            except UnreadableJSON as exc:
                raise UnreadableJSON(f"the answer holds {exc}") from None
            return value
    if first_error is not None:
        raise UnreadableJSON(f"the answer is not valid JSON: {first_error}")
    raise UnreadableJSON("the answer contains no JSON object")


def is_limit(exc: UnreadableJSON) -> bool:
    """A refusal for a bound (depth, non-finite number), not for invalid syntax: searching
    the text for another candidate would only find a piece of the same value."""
    return not str(exc).startswith("not valid JSON")


def extract_object(text: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """The first JSON object in ``text``; :class:`UnreadableJSON` (a ``ValueError``)
    saying what is wrong when there is none or the JSON is another type."""
    value = extract_json(text, max_depth=max_depth)
    if not isinstance(value, dict):
        raise UnreadableJSON(f"expected a JSON object, got {type(value).__name__}")
    return value
