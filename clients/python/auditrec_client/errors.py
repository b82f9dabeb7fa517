"""What the client raises. One root, and ``retriable`` says whether trying again later may help::

AuditrecClientError            retriable: bool
├── Unreachable                no answer after every attempt (connection refused or cut,
│                              timeout); retriable
└── ApiError                   auditrec answered with an error: status, detail
    ├── InvalidEvents          422: problems, one line per invalid item or field;
    │                          nothing of the submission was published
    ├── Unauthorized           401: a missing or wrong token
    ├── Forbidden              403: the token lacks the scope the call needs
    │                          (``needed_scope``), or the body is not the sender's to send
    ├── NotFound               404: no such audit
    └── Unavailable            429 / 5xx still answered after every attempt; retriable
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ApiError",
    "AuditrecClientError",
    "Forbidden",
    "InvalidEvents",
    "NotFound",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
]


class AuditrecClientError(Exception):
    retriable: bool = False


class Unreachable(AuditrecClientError):
    retriable = True


class ApiError(AuditrecClientError):
    def __init__(self, status: int, detail: Any) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"auditrec answered {status}: {_sentence(detail)}")


class InvalidEvents(ApiError):
    @property
    def problems(self) -> list[str]:
        return (
            [str(p) for p in self.detail] if isinstance(self.detail, list) else [str(self.detail)]
        )


class Unauthorized(ApiError):
    """401: no token, or one auditrec does not know."""


_NEEDS = re.compile(r"\bneeds scope (\w+)")


class Forbidden(ApiError):
    """403: the token is known but may not do this: it lacks :attr:`needed_scope` (a
    ``read`` token publishing, a ``publish`` token acting on audits), or the body is not the
    sender's to send (another actor, an event type only auditrec writes)."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(status, detail)
        found = _NEEDS.search(_sentence(detail))
        self.needed_scope: str | None = found.group(1) if found else None
        why = f"the token lacks scope {self.needed_scope}" if self.needed_scope else "refused"
        self.args = (f"auditrec answered {status} forbidden ({why}): {_sentence(detail)}",)


class NotFound(ApiError):
    pass


class Unavailable(ApiError):
    retriable = True


def _sentence(detail: Any) -> str:
    if isinstance(detail, list):
        return "; ".join(str(d) for d in detail)
    return str(detail)


def error_for(status: int, body: Any) -> ApiError:
    """The error for an answer of ``status`` whose JSON body is ``body`` (``{"detail": ...}``)."""
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if status == 422:
        return InvalidEvents(status, detail)
    if status == 401:
        return Unauthorized(status, detail)
    if status == 403:
        return Forbidden(status, detail)
    if status == 404:
        return NotFound(status, detail)
    if status == 429 or status >= 500:
        return Unavailable(status, detail)
    return ApiError(status, detail)
