"""The dead-letter record's schema: what :func:`consumers.eventlog.codec.dead_letter` writes to
``<prefix>.dead-letter.v1`` (the codec builds it as a plain dict; the tests keep the two
equal), for the AsyncAPI document and for whoever reads that topic."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["EXAMPLE", "DeadLetter"]


class DeadLetter(BaseModel):
    """A record a consumer could not decode or apply, with where it came from and why. The
    consumer moved on; the source position leads back to the whole record. Kept once per
    source record: a consumer that sets aside a record already set aside adds nothing when
    its reason is recorded, or else a reason note (header `reason-for`) after it in its
    partition, even in the words of another consumer's."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    source_topic: str
    """The topic the record was read from."""
    source_partition: int
    """Its partition."""
    source_offset: int
    """Its offset in that partition."""
    key: str | None
    """Its key (the audit id), when it had one."""
    consumer: str
    """The consumer group that set it aside (`<group prefix>-<component>`)."""
    error: str
    """Why: the decoding or validation problem, or the reason it could not be applied (at most
    2000 characters)."""
    reasons: list[dict[str, str]] = []
    """Every reason it was written with, as `{"consumer": …, "error": …}` (the first is
    `consumer`, `error`); a reason found later comes as a reason note."""
    original_size: int
    """The original record's size in bytes."""
    original_truncated: bool
    """Whether the original was cut (past 256 KiB) to fit the dead-letter topic."""
    original: str | None = None
    """The original bytes as text, when they are UTF-8."""
    original_base64: str | None = None
    """The original bytes in base64, when they are not UTF-8."""


EXAMPLE = {
    "source_topic": "audit.lifecycle.v1",
    "source_partition": 2,
    "source_offset": 1042,
    "key": "a-123",
    "consumer": "audit-projector",
    "error": "data.project_id: Field required",
    "reasons": [{"consumer": "audit-projector", "error": "data.project_id: Field required"}],
    "original_size": 58,
    "original_truncated": False,
    "original": '{"type": "AuditStarted", "audit_id": "a-123", "data": {}}',
}
