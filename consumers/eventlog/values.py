"""The values the event log's ports take and give: where a record sits (a topic and partition,
an offset), a record as consumed (:class:`Record`) and as appended (:class:`OutRecord`), and the
names of auditrec's topics and consumer groups (:class:`Topics`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["OutRecord", "Record", "TopicPartition", "Topics"]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Topics:
    prefix: str = "audit"
    group_prefix: str | None = None
    ingest_name: str | None = None  # the ingest topic's own name, if not the prefix's

    @property
    def lifecycle(self) -> str:
        return f"{self.prefix}.lifecycle.v1"

    @property
    def probe_requests(self) -> str:
        return f"{self.prefix}.probe-requests.v1"

    @property
    def confirmations(self) -> str:
        """The probe requests of the event subscription: deaths its queue reported, confirmed
        in order as the probe budget allows (a backlog here never holds back the watchdog's)."""
        return f"{self.prefix}.confirmations.v1"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}.dead-letter.v1"

    @property
    def ingest(self) -> str:
        """Where Kafka publishers write; the ingest component validates each record onto
        the lifecycle topic (publishers never write that one)."""
        return self.ingest_name or f"{self.prefix}.ingest.v1"

    def all(self) -> tuple[str, ...]:
        return (
            self.lifecycle,
            self.probe_requests,
            self.dead_letter,
            self.ingest,
            self.confirmations,
        )

    def group(self, component: str) -> str:
        """The consumer group of ``component``: ``<group prefix>-<component>``, the group
        prefix being the topic prefix unless set apart, so environments sharing a cluster
        never join each other's groups."""
        return f"{self.group_prefix or self.prefix}-{component}"


class Record(NamedTuple):
    """A record as consumed: where it sits, and its bytes."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record to append. ``key`` picks the partition (the audit id), unless ``partition``
    is given: the partition of the record it was derived from, in the same topic (a decision
    stays with the events it was made from, whichever partitioner their publisher used). A log
    with one partition per topic has no choice to make."""

    topic: str
    key: str
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = field(default=())
    partition: int | None = None
