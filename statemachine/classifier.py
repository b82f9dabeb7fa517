"""The classifier: which error code (:data:`~statemachine.vocabulary.ERROR_CODES`) a workflow's
error message means.

Matching is case-insensitive on ``"{name}: {message}"`` (or whichever of the two exists), and
the first pattern that matches wins.
"""

from __future__ import annotations

from typing import Any, Final

from statemachine.vocabulary import ERROR_CODES

__all__ = ["ERROR_CODES", "MAX_DETAIL", "classify", "error_text", "truncate"]

MAX_DETAIL: Final = 500

_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    ("exceeded memory limit", "oom"),
    ("exceeded cpu time limit", "cpu_limit"),
    ("workflowtimeouterror", "step_timeout"),
    ("execution timed out", "step_timeout"),
    ("output is too large", "step_output_too_large"),
    ("workflowinternalerror", "workflow_internal"),
    ("failed query:", "db_error"),
    ("d1_error", "db_error"),
    ("postgres database accessed outside a request scope", "db_error"),
    ("durable object reset because its code was updated", "deploy_reset"),
)


def error_text(error: Any) -> str | None:
    """``"{name}: {message}"`` of an error payload (an object with name/message, or a string)."""
    if error is None:
        return None
    if isinstance(error, str):
        return error or None
    name = getattr(error, "name", None)
    message = getattr(error, "message", None)
    if isinstance(error, dict):
        name, message = error.get("name"), error.get("message")
    parts = [str(p) for p in (name, message) if p]
    return ": ".join(parts) or None


def classify(text: str | None) -> str | None:
    """The specific error code for a message, or ``None`` when no pattern matches."""
    if not text:
        return None
    lowered = text.lower()
    for needle, code in _PATTERNS:
        if needle in lowered:
            return code
    return None


def truncate(text: str, limit: int = MAX_DETAIL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
