"""What the planner tells the LLM after a rejected answer: one interface, one default.

Every retry of the planner (a plan that is not JSON, is cut off, or fails validation)
goes through a :class:`FeedbackFormatter`, so a deployment can change the wording for
its model in one place (``Planner(feedback=MyFormatter())``) without touching the loop
that decides *whether* to retry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = ["DefaultFeedbackFormatter", "FeedbackFormatter", "FeedbackKind", "PlanFeedback"]

FeedbackKind = Literal["malformed", "length", "validation"]


@dataclass(frozen=True)
class PlanFeedback:
    """Why the previous answer was rejected.

    ``kind``: ``malformed`` (no readable JSON plan, or the provider's answer could not be
    read), ``length`` (cut off at the output limit), ``validation`` (a readable plan with
    problems; ``issues`` lists each one). ``error`` is the full message; ``attempt`` the
    number of the rejected attempt; ``purpose`` is ``plan`` or ``replan``.
    """

    kind: FeedbackKind
    error: str
    attempt: int
    purpose: str = "plan"
    issues: list[str] = field(default_factory=list)


class FeedbackFormatter(Protocol):
    """Turns a rejection into the text of the next user message."""

    def format(self, feedback: PlanFeedback) -> str: ...


class DefaultFeedbackFormatter:
    """Plain instructions naming exactly what was wrong and what to send instead."""

    def __init__(self, *, max_issues: int = 20, max_error_chars: int = 2000) -> None:
        self.max_issues = max_issues
        self.max_error_chars = max_error_chars

    def format(self, feedback: PlanFeedback) -> str:
        what = "repair plan" if feedback.purpose == "replan" else "plan"
        if feedback.kind == "length":
            return (
                f"Your previous answer was cut off because it reached the output length limit, "
                f"so it is not a complete {what}. Write a more concise {what}: no reasoning "
                "text, short step ids, only the parameters that are needed, and no more steps "
                "than the request requires. Answer with the complete JSON only."
            )
        if feedback.kind == "validation" and feedback.issues:
            shown = feedback.issues[: self.max_issues]
            lines = "\n".join(f"- {issue}" for issue in shown)
            more = len(feedback.issues) - len(shown)
            if more > 0:
                lines += f"\n- … and {more} more"
            return (
                f"Your previous {what} was rejected. Fix every problem below:\n{lines}\n"
                f"Answer again with the complete corrected JSON {what} only."
            )
        error = feedback.error[: self.max_error_chars]
        if feedback.kind == "malformed":
            return (
                f"Your previous answer could not be read as a JSON {what}: {error}\n"
                f'Answer with one JSON object of the form {{"steps": [...]}} and nothing else.'
            )
        return (
            f"Your previous {what} was rejected: {error}\n"
            f"Answer again with the complete corrected JSON {what} only."
        )
