"""Grounded corrections: check where a corrected value comes from before it is sent.

A layer-4 answer that changes a parameter must say where the new value comes from (see
:class:`executors.recovery.Claim`). The step runner calls :func:`verify` after layer 2
has coerced the parameters and before anything is sent; a value whose claim does not
hold is not sent. The rules, with the ``reason`` each refusal is recorded under:

* ``query`` holds when the quote occurs in the user's request and the value sent is
  spelled in it: a string is a substring of the quote, a number one of the numbers the
  quote writes in digits (``1,000`` and ``2.5`` are read; "one hundred" is not a number),
  a list has every item in it; a boolean ``true`` needs a quote that names the parameter
  (a word of its name of four letters or more, or a longer word starting with it:
  ``gift_wrap`` in "gift-wrapped", ``urgent`` in "urgently") and no negation, ``false``
  one that names it with a negation ("no", "not", "without", "don't", "never"); an
  object or ``null`` cannot be read off a quote (``quote_not_found``,
  ``value_not_in_quote``, ``unsupported_type``).
* ``tool_hint``: the same, against the error the tool itself sent ("did you mean ...").
* ``upstream`` holds when the path (``geo.results[0].name``) names a step this one
  depends on, resolves in that step's output (the binder's own reader), and the value
  there — passed through layer 2 for this parameter — equals the value sent
  (``not_upstream``, ``path_unresolved``, ``value_mismatch``). A text *template* with
  ``{{step.path}}`` references inside (``"Order {{order.id}} placed"``) holds when every
  reference is upstream and resolves and the text sent is the template filled in: the
  references are checked, the words around them are the model's own composition.
* ``derived`` holds when the arithmetic parses in the safe grammar of
  :mod:`executors._arithmetic`, every reference is an upstream number, every literal is
  a number of the request or a unit constant (:data:`UNIT_CONSTANTS`, which alone prove
  nothing), and the result — through layer 2 — equals the value sent
  (``invalid_expression``, ``literal_not_grounded``, ``value_mismatch``).
* no claim, or an unusable one, never holds (``no_provenance``, ``invalid_claim``).

Text is compared after Unicode NFKC normalisation, case folding and collapsing
whitespace. Numbers are equal within ``rel_tol=1e-9, abs_tol=1e-9`` (float noise:
``100 * 468.285`` is ``46828.49999999999``), or when the value sent shows ``d >= 2``
decimals and is the computed value rounded to them (``33.33`` for ``100 / 3``) — never
rounding to whole units, so ``33`` is not ``33.33``.

A refused correction becomes a ``not_sent`` attempt whose error (``UNGROUNDED_CORRECTION``)
carries every verdict and ``needs_approval: true`` — the seam for approvals, which do not
exist yet: once they do, a run can pause on such an error for a person to confirm the
values instead of failing.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from executors._arithmetic import Expression, ExpressionError
from executors._binding import BindingFailure, bind_params, resolve_reference
from executors.recovery import Claim, Grounding
from orchestration.plan import Reference, parse_references, whole_reference
from orchestration.protocol import ErrorCategory, ErrorSource, StepError
from orchestration.result import Provenance, ProvenanceKind

UNGROUNDED_CODE = "UNGROUNDED_CORRECTION"
NEEDS_APPROVAL = "needs_approval"
"""Key set to true in an ungrounded correction's error details: where approvals will hook in."""

UNIT_CONSTANTS = frozenset({1.0, 12.0, 24.0, 60.0, 100.0, 1000.0, 3600.0})
"""Literals a derivation may use without the request writing them: unit conversions
(per cent, per mille and thousands, months, hours, minutes, seconds)."""

REL_TOL = 1e-9
ABS_TOL = 1e-9
MIN_ROUNDING_DECIMALS = 2

CLAIM_KINDS = frozenset({"query", "tool_hint", "upstream", "derived"})
_NEGATION_RE = re.compile(r"\b(?:no|not|without|never|don't|dont|non)\b")
_GENERIC_NAME_WORDS = frozenset({"include", "enable", "enabled", "show", "with", "allow", "flag",
                                 "use", "has", "is"})
_NUMBER_RE = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])")
_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a claim may point at: the user's request, the error the tool sent (its text),
    and the outputs of the steps the corrected step depends on."""

    query: str
    tool_error: str
    upstream: Mapping[str, Any]


AsSent = Callable[[str, Any], Any]
"""``(parameter, value) -> the value layer 2 would send`` for that parameter."""


def normalise(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed: how quotes and values are compared."""
    return _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def numbers_in(text: str) -> list[float]:
    """Every number written in digits in ``text`` (``1,000`` is 1000; words are not read)."""
    return [float(m.group(0).replace(",", "")) for m in _NUMBER_RE.finditer(text)]


def close(computed: float, sent: float) -> bool:
    """Equal within float noise, or ``sent`` is ``computed`` rounded to the (at least two)
    decimals ``sent`` shows."""
    if math.isclose(computed, sent, rel_tol=REL_TOL, abs_tol=ABS_TOL):
        return True
    decimals = _decimals(sent)
    return decimals >= MIN_ROUNDING_DECIMALS and \
        abs(computed - sent) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9)


def _decimals(value: float) -> int:
    if isinstance(value, int):
        return 0
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 0
    fraction = text.split(".", 1)[1].rstrip("0")
    return len(fraction)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def same_value(computed: Any, sent: Any) -> bool:
    """JSON equality with numbers compared by :func:`close`."""
    if _is_number(computed) and _is_number(sent):
        return close(float(computed), float(sent))
    if isinstance(computed, list) and isinstance(sent, list):
        return len(computed) == len(sent) and all(map(same_value, computed, sent))
    if isinstance(computed, dict) and isinstance(sent, dict):
        return computed.keys() == sent.keys() and all(same_value(computed[k], sent[k]) for k in sent)
    return type(computed) is type(sent) and bool(computed == sent)


# --- verification ---------------------------------------------------------------------


def verify(
    grounding: Grounding, sent: Mapping[str, Any], evidence: Evidence, as_sent: AsSent
) -> dict[str, Provenance]:
    """A verdict per claimed parameter: does its claim hold for the value to be sent?"""
    verdicts: dict[str, Provenance] = {}
    for param, claim in grounding.claims.items():
        if param not in sent:
            verdicts[param] = Provenance(kind="removed", grounded=True,
                                         detail="the parameter is removed; no value is sent")
            continue
        verdicts[param] = _verify_one(param, claim, sent[param], evidence, as_sent)
    return verdicts


def _verify_one(param: str, claim: Claim, value: Any, evidence: Evidence, as_sent: AsSent) -> Provenance:
    kind = claim.kind
    text = claim.text
    if kind not in CLAIM_KINDS or not isinstance(text, str) or not text.strip():
        if kind == "none" and text is None:
            return _refused("none", None, "no_provenance",
                            f"the answer gives no source for {param!r}")
        detail = text if kind == "none" and text else (
            f"an unusable source for {param!r}: kind {kind!r} with {text!r}")
        return _refused("none", text, "invalid_claim", detail)
    if kind in ("query", "tool_hint"):
        haystack = evidence.query if kind == "query" else evidence.tool_error
        return _verify_quote(kind, text, haystack, value, param)  # type: ignore[arg-type]
    if kind == "upstream":
        return _verify_path(param, text, value, evidence, as_sent)
    return _verify_expression(param, text, value, evidence, as_sent)


def _refused(kind: ProvenanceKind, source: str | None, reason: str, detail: str,
             value: Any = None) -> Provenance:
    return Provenance(kind=kind, source=source, value=value, grounded=False, reason=reason,
                      detail=detail)


def _verify_quote(kind: ProvenanceKind, quote: str, haystack: str, value: Any,
                  param: str) -> Provenance:
    where = "the user's request" if kind == "query" else "the tool's error"
    wanted = normalise(quote)
    if wanted not in normalise(haystack):
        return _refused(kind, quote, "quote_not_found", f"{quote!r} does not occur in {where}")
    problem = _flag_in(param, value, wanted) if isinstance(value, bool) else _spelled_in(value, wanted)
    if problem is not None:
        reason, detail = problem
        return _refused(kind, quote, reason, detail)
    return Provenance(kind=kind, source=quote, value=value, grounded=True,
                      detail=f"the value is written in {where}")


def _flag_in(param: str, value: bool, quote: str) -> tuple[str, str] | None:
    """None when the (normalised) quote names the flag ``param`` and says ``value``:
    without a negation for true, with one for false."""
    names = [w for w in re.split(r"[_\W]+", param.casefold())
             if len(w) >= 4 and w not in _GENERIC_NAME_WORDS]
    words = re.findall(r"[a-z0-9]+", quote)
    if not names or not any(word.startswith(name) for name in names for word in words):
        return ("value_not_in_quote", f"the quote does not name {param!r}")
    negated = _NEGATION_RE.search(quote) is not None
    if negated != (not value):
        return ("value_not_in_quote",
                f"the quote {'negates' if negated else 'does not negate'} {param!r}, so it does "
                f"not say {str(value).lower()}")
    return None


def _spelled_in(value: Any, quote: str) -> tuple[str, str] | None:
    """None when ``value`` is written in the (normalised) quote, else (reason, detail)."""
    if value is None or isinstance(value, dict | bool):
        return ("unsupported_type",
                f"a quote cannot show a {type(value).__name__} value inside a list or as an "
                "object; point at an upstream output instead")
    if _is_number(value):
        if any(close(n, float(value)) for n in numbers_in(quote)):
            return None
        return ("value_not_in_quote", f"{value!r} is not among the numbers the quote writes in digits")
    if isinstance(value, str):
        spelled = normalise(value)
        if not spelled:
            return ("value_not_in_quote", "an empty value is not a quoted one")
        return None if spelled in quote else (
            "value_not_in_quote", f"{value!r} is not written in the quote")
    if isinstance(value, list):
        if not value:
            return ("value_not_in_quote", "an empty list is not a quoted one")
        for item in value:
            problem = _spelled_in(item, quote)
            if problem is not None:
                return problem
        return None
    return ("unsupported_type", f"a quote cannot show a {type(value).__name__} value")


def _reference(path: str) -> Reference | None:
    """``geo.results[0].name`` or ``{{geo.results[0].name}}`` as a reference, read by the
    plan's own parser (one way to read a path)."""
    text = path.strip()
    return whole_reference(text if text.startswith("{{") else "{{" + text + "}}")


def _resolve(ref: Reference, evidence: Evidence, param: str) -> tuple[Any, tuple[str, str] | None]:
    if ref.step_id not in evidence.upstream:
        return None, ("not_upstream", f"step {ref.step_id!r} is not a step this one depends on "
                      "(or it has no output)")
    try:
        return resolve_reference(ref, evidence.upstream, param), None
    except BindingFailure as exc:
        return None, ("path_unresolved", exc.reason)


def _verify_path(param: str, path: str, value: Any, evidence: Evidence, as_sent: AsSent) -> Provenance:
    ref = _reference(path)
    if ref is None and parse_references(path):
        return _verify_template(param, path, value, evidence)
    if ref is None:
        return _refused("upstream", path, "invalid_claim",
                        f"{path!r} is not a path such as step.field[0].name")
    found, problem = _resolve(ref, evidence, param)
    if problem is not None:
        return _refused("upstream", path, problem[0], problem[1])
    expected = as_sent(param, found)
    if not same_value(expected, value):
        return _refused("upstream", path, "value_mismatch",
                        f"{ref.dotted} is {found!r}, not the value sent", found)
    return Provenance(kind="upstream", source=path, value=found, grounded=True,
                      detail=f"{ref.dotted} holds the value sent")


def _verify_template(param: str, template: str, value: Any, evidence: Evidence) -> Provenance:
    """A text with references inside: each reference upstream and resolved, and the
    value sent the template filled in (as the binder fills it)."""
    for ref in parse_references(template):
        _, problem = _resolve(ref, evidence, param)
        if problem is not None:
            return _refused("upstream", template, problem[0], problem[1])
    try:
        filled = bind_params({param: template}, evidence.upstream)[param]
    except BindingFailure as exc:
        return _refused("upstream", template, "path_unresolved", exc.reason)
    if not same_value(filled, value):
        return _refused("upstream", template, "value_mismatch",
                        "the text sent is not the template filled in", filled)
    return Provenance(kind="upstream", source=template, value=filled, grounded=True,
                      detail="every reference of the template is an upstream value")


def _verify_expression(param: str, text: str, value: Any, evidence: Evidence,
                       as_sent: AsSent) -> Provenance:
    try:
        expression = Expression(text)
    except ExpressionError as exc:
        return _refused("derived", text, "invalid_expression", str(exc))
    allowed = numbers_in(evidence.query)
    if not expression.references and not any(
            any(close(n, literal) for n in allowed) for literal in expression.literals):
        return _refused("derived", text, "literal_not_grounded",
                        "a derivation needs an upstream reference or a number of the user's "
                        "request; unit constants alone prove nothing")
    for literal in expression.literals:
        if literal not in UNIT_CONSTANTS and not any(close(n, literal) for n in allowed):
            return _refused("derived", text, "literal_not_grounded",
                            f"{literal:g} is neither written in the user's request nor a unit "
                            "constant")
    inputs: dict[str, float] = {}
    for ref in expression.references:
        found, problem = _resolve(ref, evidence, param)
        if problem is not None:
            return _refused("derived", text, problem[0], problem[1])
        number = _as_number(found)
        if number is None:
            return _refused("derived", text, "invalid_expression",
                            f"{ref.dotted} is {found!r}, not a number")
        inputs[ref.text] = number
    try:
        computed = expression.evaluate(lambda ref: inputs[ref.text])
    except ExpressionError as exc:
        return _refused("derived", text, "invalid_expression", str(exc))
    expected = as_sent(param, computed)
    if not same_value(expected, value):
        return _refused("derived", text, "value_mismatch",
                        f"{text} evaluates to {computed!r}, not {value!r}", computed)
    return Provenance(kind="derived", source=text, value=computed, grounded=True,
                      detail=f"{text} evaluates to the value sent")


def _as_number(value: Any) -> float | None:
    """A number, or numeric text as layer 2 would read it; None otherwise."""
    if _is_number(value):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", value):
        return float(value)
    return None


# --- the outcome ------------------------------------------------------------------------


def ungrounded(verdicts: Mapping[str, Provenance]) -> dict[str, Provenance]:
    """The verdicts whose claim did not hold."""
    return {param: p for param, p in verdicts.items() if not p.grounded}


def refusal(verdicts: Mapping[str, Provenance], layer: str) -> StepError:
    """The error of a correction that is not sent: which values, and why each."""
    failed = ungrounded(verdicts)
    reasons = "; ".join(f"{param}: {p.reason} ({p.detail})" for param, p in failed.items())
    causes = ", ".join(sorted({p.reason or "" for p in failed.values()}))
    return StepError(
        category=ErrorCategory.INTERNAL_ERROR,
        code=UNGROUNDED_CODE,
        message=f"not sent: the {layer} correction of {', '.join(map(repr, failed))} cannot be "
                f"traced to the request or the upstream outputs — {reasons}",
        source=ErrorSource.ENGINE,
        retryable=False,
        request_sent=False,
        details={
            "ungrounded": {param: p.model_dump(mode="json") for param, p in failed.items()},
            NEEDS_APPROVAL: True,
            "gave_up": f"ungrounded correction ({causes}): an unverifiable value is never sent",
        },
    )
