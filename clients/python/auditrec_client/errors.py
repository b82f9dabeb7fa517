"""What the client raises. One root, and ``retriable`` says whether trying again later may help::

AuditrecClientError            retriable: bool
├── Unreachable                no answer after every attempt (connection refused or cut,
│                              timeout); retriable
└── ApiError                   auditrec answered with an error: status, detail
    ├── InvalidEvents          422: problems, one line per invalid item or field;
    │                          nothing of the submission was published
    ├── Unauthorized           401 / 403: a missing, wrong or read-only token
    ├── NotFound               404: no such audit
    └── Unavailable            429 / 5xx still answered after every attempt; retriable
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "AuditrecClientError",
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
    pass


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
    if status in (401, 403):
        return Unauthorized(status, detail)
    if status == 404:
        return NotFound(status, detail)
    if status == 429 or status >= 500:
        return Unavailable(status, detail)
    return ApiError(status, detail)
