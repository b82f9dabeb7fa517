"""The exception tree. Every error auditrec raises is an :class:`AuditrecError`::

    AuditrecError
    ├── ConfigError            a setting is missing or invalid (names the variable)
    ├── InvalidInput           an event, file or request failed validation (exit code 2)
    │   ├── DecodeError        a record read from the log is not a valid event
    │   ├── EventIdConflict    an event id already names other content in its audit (HTTP 409)
    │   └── Refused            not the sender's to send: an event type only auditrec writes, an
    │                          actor other than who authenticated (HTTP 403)
    ├── NotFound               an audit id the projection does not know
    ├── WrongState             an action the audit's state does not allow (HTTP 409)
    ├── NoServer               no `auditrec serve` is running the needed components
    └── InfrastructureError    the event log, the database or an API failed (``retriable``)
        ├── EventLogError
        ├── StoreError
        └── WorkflowsApiError  the Workflows client cannot send (not started, stopped)

``retriable`` tells a caller whether trying again may help; adapters translate their driver's
errors into these (``raise ... from exc``) and add the context (topic, partition, audit id).
"""

from __future__ import annotations

__all__ = [
    "AuditrecError",
    "ConfigError",
    "DecodeError",
    "EventIdConflict",
    "EventLogError",
    "InfrastructureError",
    "InvalidInput",
    "NoServer",
    "NotFound",
    "Refused",
    "StoreError",
    "WorkflowsApiError",
    "WrongState",
]


class AuditrecError(Exception):
    retriable: bool = False
    exit_code: int = 1


class ConfigError(AuditrecError):
    exit_code = 2


class InvalidInput(AuditrecError):
    exit_code = 2

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class DecodeError(InvalidInput):
    """A record is not a valid event; the message says why."""


class EventIdConflict(InvalidInput):
    """Events whose ``(audit_id, event_id)`` already names other content (a ``type`` or
    ``data`` of its own), earlier in the submission or in the history
    (:mod:`statemachine.idempotency`); each problem names the event id and audit."""


class Refused(InvalidInput):
    """Well-formed, but not the sender's to send (HTTP 403, exit code 2): an event only
    auditrec writes (:func:`statemachine.admission.refusal`), or a body naming an actor other
    than the one who authenticated. The message names what was refused."""


class NotFound(AuditrecError):
    pass


class WrongState(AuditrecError):
    """The audit is not in a state the action applies to (failing an audit that is not
    running, restoring a workflow's failure); the message says which state and why."""


class NoServer(AuditrecError):
    pass


class InfrastructureError(AuditrecError):
    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class EventLogError(InfrastructureError):
    pass


class StoreError(InfrastructureError):
    pass


class WorkflowsApiError(InfrastructureError):
    pass
