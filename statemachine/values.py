"""The values an event may carry, each bounded so that every store (PostgreSQL, SQLite) and
every JSON reader can hold it: timestamps in UTC between 1900 and 9000, counts up to 2^53 - 1,
strings with a length limit and without NUL or lone surrogates, a small flat policy map."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, Field, StringConstraints

from statemachine.vocabulary import AUDIT_ID_PATTERN

__all__ = [
    "MAX_COUNT",
    "AuditId",
    "Detail",
    "Id",
    "InstanceId",
    "Label",
    "Name",
    "NonNegative",
    "Phase",
    "Policy",
    "PolicyValue",
    "Producer",
    "ShortText",
    "Tag",
    "Timestamp",
    "Url",
    "WorkflowName",
]

AuditId = Annotated[str, StringConstraints(pattern=AUDIT_ID_PATTERN)]

_EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def _sane_time(value: datetime) -> datetime:
    """Timestamps are kept in UTC, between 1900 and 9000 (every store can hold those)."""
    if value.tzinfo is UTC:
        utc = value
    else:
        try:
            utc = value.astimezone(UTC)
        except OverflowError:
            raise ValueError("timestamp out of range") from None
    if not _EARLIEST <= utc < _LATEST:
        raise ValueError("timestamp out of range (1900-01-01 to 9000-01-01)")
    return utc


def _storable(value: str) -> str:
    """Text every store and every JSON reader can hold: no NUL, no lone surrogates."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    if value.isascii():  # O(1): no surrogate can be there
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


_Storable = AfterValidator(_storable)
# Strings, each bounded so that every store can hold it.
Id = Annotated[str, StringConstraints(min_length=1, max_length=200), _Storable]
Name = Annotated[str, StringConstraints(max_length=200), _Storable]
Url = Annotated[str, StringConstraints(max_length=2048), _Storable]
Phase = Annotated[str, StringConstraints(min_length=1, max_length=64), _Storable]
Label = Annotated[str, StringConstraints(max_length=64), _Storable]
# A Cloudflare workflow's name (Cloudflare allows 1-64 characters).
WorkflowName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$"), _Storable]
Producer = Annotated[str, StringConstraints(min_length=1, max_length=128), _Storable]
Tag = Annotated[str, StringConstraints(max_length=128), _Storable]
Detail = Annotated[str, StringConstraints(max_length=500), _Storable]
ShortText = Annotated[str, StringConstraints(max_length=2000), _Storable]


# Every number fits every store (PostgreSQL bigint, SQLite INTEGER) and every JSON reader.
MAX_COUNT = 2**53 - 1
Timestamp = Annotated[AwareDatetime, AfterValidator(_sane_time)]
NonNegative = Annotated[int, Field(ge=0, le=MAX_COUNT)]
InstanceId = Id
# The thresholds and evidence a decision carries: a small flat map of plain values.
PolicyValue = (
    ShortText
    | Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)]
    | Annotated[float, Field(allow_inf_nan=False)]
    | bool
    | None
)
Policy = Annotated[dict[Label, PolicyValue], Field(max_length=32)]
