"""What an operator action is given, checked before anything is read or published: the error
code (one of the vocabulary's), a reason (the failure's detail, the restore's why), and the
failure a restore undoes, found in the audit's history."""

from __future__ import annotations

from collections.abc import Sequence

from statemachine.errors import InvalidInput
from statemachine.events import AuditEvent, AuditFailed
from statemachine.machine import FAILED, next_status
from statemachine.state import AuditState, evolve
from statemachine.vocabulary import ERROR_CODES

__all__ = ["REASON_LIMIT", "check_code", "check_reason", "last_failure"]

REASON_LIMIT = 500  # an operator's reason becomes a failure's error_detail (500 at most)


def check_code(code: str) -> str:
    if code not in ERROR_CODES:
        raise InvalidInput(
            f"unknown error code {code!r}",
            [f"code: unknown error code {code!r}; expected one of {', '.join(ERROR_CODES)}"],
        )
    return code


def check_reason(text: str | None, what: str = "reason", limit: int = REASON_LIMIT) -> str:
    value = (text or "").strip()
    if not value:
        raise InvalidInput(f"{what} is empty", [f"{what}: required (say why)"])
    if len(value) > limit:
        raise InvalidInput(
            f"{what} is too long", [f"{what}: {len(value)} characters; at most {limit}"]
        )
    if "\x00" in value:
        raise InvalidInput(f"{what} holds a NUL character", [f"{what}: no NUL characters"])
    return value


def last_failure(events: Sequence[AuditEvent]) -> AuditFailed | None:
    """The ``AuditFailed`` that made the audit failed as it is now (the latest one the
    transition table applied), or ``None`` when the audit is not failed."""
    state: AuditState | None = None
    failure: AuditFailed | None = None
    for event in events:
        current = state if state is not None else AuditState(audit_id=event.audit_id)
        applies = next_status(current.status, event.type, current) is not None
        state = evolve(current, event)
        if isinstance(event, AuditFailed) and applies:
            failure = event
    return failure if state is not None and state.status == FAILED else None
