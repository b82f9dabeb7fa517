"""How errors become HTTP answers: 422 naming each problem, 403 for what is not the sender's
to send, 404, 409 (wrong state, an event id that already names other content), 503 for what
may pass (the event log, the database, no serve running), 413, and never a credential in a
message. :data:`STATUS_OF` is the one map from the core's errors to HTTP statuses: the JSON
API answers with it, the console's pages too (:func:`http_status`)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

import re
from typing import Final

import structlog
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from consumers.api.guards import BodyTooLarge, too_large
from statemachine.errors import (
    AuditrecError,
    EventIdConflict,
    InfrastructureError,
    InvalidInput,
    NoServer,
    NotFound,
    Refused,
    StoreError,
    WrongState,
)

__all__ = ["STATUS_OF", "http_status", "install_error_handlers", "safe"]

log = structlog.get_logger("auditrec.api")

_CREDENTIALS_IN_URL = re.compile(r"(\w+://)[^/\s@]+@")

# The HTTP status of each of the core's errors (the first kind it is an instance of); any
# other error is a 500.
STATUS_OF: Final[dict[type[AuditrecError], int]] = {
    EventIdConflict: 409,
    Refused: 403,
    InvalidInput: 422,
    NotFound: 404,
    WrongState: 409,
    NoServer: 503,
    InfrastructureError: 503,
}


def http_status(exc: AuditrecError) -> int:
    """The HTTP status that answers ``exc`` (:data:`STATUS_OF`)."""
    return next((code for kind, code in STATUS_OF.items() if isinstance(exc, kind)), 500)


def safe(exc: BaseException) -> str:
    """An error for a client: its kind and message, minus any credentials in URLs."""
    text = _CREDENTIALS_IN_URL.sub(r"\1***@", str(exc))[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def install_error_handlers(app: FastAPI, max_body: int) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err.get("loc", ())) or "request"
            problems.append(f"{loc}: {err.get('msg', 'invalid')}")
        return JSONResponse({"detail": problems}, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        # A JSON body that does not parse is bad input like any other (422, not 400).
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            problems = ["body: not valid JSON"]
            return JSONResponse({"detail": problems, "message": "invalid body"}, 422)
        return await http_exception_handler(request, exc)

    @app.exception_handler(BodyTooLarge)
    async def _body_too_large(request: Request, exc: BodyTooLarge) -> JSONResponse:
        return too_large(max_body)

    @app.exception_handler(AuditrecError)
    async def _refused(request: Request, exc: AuditrecError) -> JSONResponse:
        status = http_status(exc)
        if isinstance(exc, InvalidInput):
            return JSONResponse({"detail": exc.problems, "message": str(exc)}, status)
        if isinstance(exc, InfrastructureError):
            what = "database" if isinstance(exc, StoreError) else "event log or API"
            log.warning("request failed", path=request.url.path, error=safe(exc))
            return JSONResponse(
                {
                    "detail": f"{what} unavailable, try again: {safe(exc)}",
                    "retriable": exc.retriable,
                },
                status_code=status,
                headers={"Retry-After": "1"} if exc.retriable else None,
            )
        if status == 500:
            log.error("request failed", path=request.url.path, error=safe(exc))
            return JSONResponse({"detail": "internal error"}, status_code=status)
        return JSONResponse({"detail": str(exc)}, status_code=status)
