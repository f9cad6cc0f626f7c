"""Finding the steps of a plan in JSON text that is still arriving.

A streamed plan answer comes in pieces of a few characters. :class:`StepScanner` is fed
those pieces in order and hands back the text of every element of the plan's step array
that a piece completed — ``{"id": "geo", ...}`` as soon as its closing brace arrives —
so the planner can look at a step long before the answer ends.

It tracks structure only: strings (with their escapes, across piece boundaries),
brackets, and the keys of the objects on the way to the step array. It does not decode
anything but a few short keys; the elements it returns are decoded by the caller with
the engine's one bounded decoder (:func:`orchestration._json.decode`), the decoder the
whole answer goes through at the end, so a step read early is read exactly as the final
parse will read it (duplicate keys, numbers, escapes alike).

Why not a library: an incremental parser such as ``ijson`` would be a new core
dependency whose numbers (``Decimal``) and duplicate keys differ from ``json.loads``, so
a step could be read one way early and another way at the end; pydantic-core's
``from_json(..., allow_partial=True)`` (already installed) must re-parse the whole prefix
on every piece (quadratic in the answer) and returns a cut object ``{"id": "a"`` exactly
as it returns a closed one, so it cannot tell when a step is complete.

Where the step array is: the shapes :func:`planners.parsing.parse_plan` accepts — a bare
list, ``{"steps": [...]}``, ``{"plan": [...]}`` or ``{"plan": {"steps": [...]}}``. Text
before the first ``{`` or ``[`` (a code fence, a sentence) is skipped.

Bounds (the answer is untrusted): nesting deeper than ``max_depth`` (the
``ORCH_MAX_JSON_DEPTH`` the final parse applies), more than ``max_steps`` elements, an
element longer than ``max_element_chars``, an element that is not an object, or brackets
that do not match stop the scanner; :attr:`StepScanner.failed` says why. Memory is the
element being read, not the answer: nothing before it is kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from orchestration._json import decode_at

__all__ = ["ScannedStep", "StepScanner"]

_OPENING = re.compile(r"[{\[]")
_STRUCTURE = re.compile(r'["{}\[\]:,]')
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*'  # a string's opening quote and text (escapes whole)
_TO_BRACKET = re.compile(
    r'(?:[^"{}\[\]]+|' + _STRING + r'")*'
    r'(?:([{}\[\]])|' + _STRING + r'(\\?)\Z|\Z)', re.DOTALL)
"""Inside a step only brackets matter: everything up to the next one — text, and whole
strings, whatever they hold — in one match. Group 1 is the bracket; without one before
the end of the piece, group 2 is set when a string is cut by that end (to the lone
backslash the piece may end on: an escape the next piece completes)."""
_STRING_STOP = re.compile(r'["\\]')
_NOT_SPACE = re.compile(r"\S")
_STEP_ARRAY_PATHS = frozenset({(), ("steps",), ("plan",), ("plan", "steps")})
"""Where the step array may sit: the keys from the top of the answer to it."""
_KEY_PATHS = frozenset({(), ("plan",)})
"""Objects whose keys lead to the step array: only their keys are read."""
_MAX_KEY_CHARS = 64


@dataclass(frozen=True, slots=True)
class ScannedStep:
    """One complete element of the step array: its JSON text, its position (0-based) and
    how many containers enclose it (the depth budget its own nesting must leave); and,
    when the scanner read it whole at once, its value (``decoded``), read as
    :func:`~orchestration._json.decode` reads the text within that budget."""

    index: int
    text: str
    enclosing: int
    value: Any = None
    decoded: bool = False


_FEW_CHARS = 24
"""An element cannot fit in fewer characters than this (``{"id":"a","tool":"t",...``):
with no more left in the piece, it is not tried whole (a model's stream of a few
characters a piece would only pay for a failed decode per element)."""


@dataclass(slots=True)
class _Frame:
    opener: str  # "{" or "["
    path: tuple[str, ...]  # the keys from the top of the answer to this container
    key: str | None = None  # an object's latest key
    expect_key: bool = True  # an object: the next string is a key


@dataclass
class StepScanner:
    """Feed it the pieces of a plan answer; it returns each step's text as it completes.

    ``finished`` turns true when the step array (or the whole answer) has closed;
    ``failed`` holds the reason the scanner stopped early. Either way later pieces are
    ignored: the whole answer is still parsed and validated at the end, which is what
    decides whether the plan is accepted.
    """

    max_depth: int
    max_steps: int
    max_element_chars: int = 1_000_000
    finished: bool = False
    failed: str | None = None
    _stack: list[_Frame] = field(default_factory=list)
    _steps_level: int | None = None  # len(stack) with the step array on top
    _in_string: bool = False
    _escape: bool = False
    _expect_element: bool = False
    _element: list[str] | None = None  # the pieces of the element being read
    _element_chars: int = 0
    _key: list[str] | None = None  # the pieces of the key being read
    _count: int = 0

    @property
    def stopped(self) -> bool:
        return self.finished or self.failed is not None

    def feed(self, piece: str) -> list[ScannedStep]:
        """The steps completed by ``piece`` (the next text of the answer), in order."""
        out: list[ScannedStep] = []
        if self.stopped or not piece:
            return out
        i, end = 0, len(piece)
        element_from: int | None = 0 if self._element is not None else None
        key_from: int | None = 0 if self._key is not None else None
        while i < end and not self.stopped:
            if self._in_string:
                if self._escape:
                    self._escape, i = False, i + 1
                    continue
                stop = _STRING_STOP.search(piece, i)
                if stop is None:
                    break
                i = stop.end()
                if stop.group() == "\\":
                    if i < end:
                        i += 1
                    else:
                        self._escape = True
                    continue
                self._in_string = False
                if key_from is not None:
                    self._end_key(piece[key_from:i])
                    key_from = None
                continue
            if not self._stack:
                opening = _OPENING.search(piece, i)
                if opening is None:
                    break
                i = opening.start()
            elif self._expect_element:
                found = _NOT_SPACE.search(piece, i)
                if found is None:
                    break
                self._expect_element = False
                if found.group() not in "{]":
                    self.failed = (f"element {self._count + 1} of the step array is not a "
                                   "JSON object")
                    break
                i = found.start()
            inside = self._steps_level is not None and len(self._stack) > self._steps_level
            if inside:
                token = _TO_BRACKET.match(piece, i)  # matches at every position
                assert token is not None
                bracket = token.group(1)
                if bracket is None:  # none before the end of the piece
                    cut = token.group(2)
                    if cut is not None:  # a string goes on in the next piece
                        self._in_string, self._escape = True, cut == "\\"
                    break
                i = token.end()
                at, char = i - 1, bracket
            else:
                token = _STRUCTURE.search(piece, i)
                if token is None:
                    break
                at, i = token.start(), token.end()
                char = piece[at]
            top = self._stack[-1] if self._stack else None
            if char == '"':
                self._in_string = True
                if (top is not None and top.opener == "{" and top.expect_key
                        and top.path in _KEY_PATHS):
                    self._key, key_from = [], at
            elif char == ":":
                if top is not None and top.opener == "{":
                    top.expect_key = False
            elif char == ",":
                if top is not None and top.opener == "{":
                    top.expect_key = True
                elif len(self._stack) == self._steps_level:
                    self._expect_element = True
            elif char in "{[":
                if len(self._stack) == self._steps_level and char == "{":
                    end_of_whole = self._whole_element(piece, at, out)
                    if end_of_whole is not None:
                        i = end_of_whole
                        continue
                    self._element, self._element_chars, element_from = [], 0, at
                self._open(char, top)
            else:  # } or ]
                if top is None or (top.opener == "{") != (char == "}"):
                    self.failed = "the brackets of the answer do not match"
                    break
                self._stack.pop()
                depth = len(self._stack)
                if self._element is not None and depth == self._steps_level:
                    assert element_from is not None
                    self._element.append(piece[element_from:i])
                    text = "".join(self._element)
                    self._element, element_from = None, None
                    if self._count >= self.max_steps:
                        self.failed = f"the plan has more than {self.max_steps} steps"
                        break
                    out.append(ScannedStep(self._count, text, depth))
                    self._count += 1
                elif self._steps_level is not None and depth == self._steps_level - 1:
                    self.finished = True  # the step array closed
                elif not self._stack:
                    self.finished = True  # the whole answer closed without a step array
        if self._element is not None and element_from is not None:
            self._element.append(piece[element_from:])
            self._element_chars += end - element_from
            if self._element_chars > self.max_element_chars:
                self.failed = (f"step {self._count + 1} is longer than "
                               f"{self.max_element_chars} characters")
        if self._key is not None and key_from is not None:
            self._key.append(piece[key_from:])
            if sum(map(len, self._key)) > _MAX_KEY_CHARS:
                self._key = [""]  # too long to be a key that matters; keep skipping it
        return out

    def _whole_element(self, piece: str, at: int, out: list[ScannedStep]) -> int | None:
        """Where the element that begins at ``at`` ends, when the piece holds all of it:
        decoded in one C pass (its end and its value at once) and added to ``out``
        (unless a bound stops the scanner at it), instead of walked bracket by bracket
        and decoded again. None when it is not whole in this piece or is not acceptable
        JSON: it is then walked as any element is (a cut element's next pieces, and the
        bounds and errors of a bad one, stay the walker's)."""
        if len(piece) - at < _FEW_CHARS:
            return None
        assert self._steps_level is not None
        try:
            value, end = decode_at(piece, at, max_depth=max(1, self.max_depth - self._steps_level))
        except (ValueError, RecursionError):
            return None
        if end - at > self.max_element_chars:
            self.failed = (f"step {self._count + 1} is longer than "
                           f"{self.max_element_chars} characters")
        elif self._count >= self.max_steps:
            self.failed = f"the plan has more than {self.max_steps} steps"
        else:
            out.append(ScannedStep(self._count, piece[at:end], self._steps_level, value, True))
            self._count += 1
        return end

    def _open(self, char: str, parent: _Frame | None) -> None:
        path: tuple[str, ...] = ()
        if parent is not None:
            # a container inside an array has no key: "[]" can match no path that matters
            step = (parent.key or "") if parent.opener == "{" else "[]"
            path = (*parent.path, step)
        if len(self._stack) >= self.max_depth:
            self.failed = f"the answer is nested deeper than {self.max_depth} levels"
            return
        self._stack.append(_Frame(char, path))
        if char == "[" and self._steps_level is None and path in _STEP_ARRAY_PATHS:
            self._steps_level = len(self._stack)
            self._expect_element = True

    def _end_key(self, last: str) -> None:
        """A key of an object on the way to the step array was read whole."""
        assert self._key is not None
        text = "".join(self._key) + last
        self._key = None
        try:
            key = json.loads(text) if len(text) <= _MAX_KEY_CHARS + 2 else None
        except ValueError:
            key = None
        top = self._stack[-1]
        top.key = key if isinstance(key, str) else None
