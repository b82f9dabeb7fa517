"""The event log's dead-letter port: setting records aside on the dead-letter topic, each bad
source record once.

Several consumers read one topic (the projector, the reconciler and telemetry all read the
lifecycle topic), and each sets aside a record it cannot decode or handle, usually within
milliseconds of the others. The dead-letter topic nevertheless keeps one dead letter per
source record (its topic, partition and offset), carrying every consumer's reason:

- a dead letter is keyed by its source position, so every record about one source record sits
  in one partition of the dead-letter topic, in order;
- :meth:`DeadLetterBox.set_aside` looks at what that partition holds under the key and
  appends, as :func:`~consumers.eventlog.dead_letters.settle` decides, the dead letter when
  there is none yet, nothing when there is one holding this consumer's reason, or a small
  reason note (no second copy of the original) when the consumer's reason is new;
- the look and the append are one exclusive step per source partition across every process:
  on SQLite one write transaction (the file's write lock serialises writers); on Kafka a
  transaction of a producer whose ``transactional_id`` names the source partition, so that
  starting it fences any other process's and lets the broker finish that one's transaction
  first; the look reads (``read_committed``) once the transactions open on the dead-letter
  partition have ended, and so sees everything appended before.

Nothing is lost on a crash: the log's :meth:`~consumers.eventlog.port.EventLog.append` and a
consumer's :meth:`~consumers.eventlog.port.Consumer.commit` set aside the dead letters among
their records *before* anything else (a consumer's offsets move only after its dead letters
are kept), so a crash in between leaves the record to be handled again, and setting it aside
again finds it kept and adds nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from consumers.eventlog.dead_letters import LETTER_HEADER
from consumers.eventlog.values import OutRecord

__all__ = ["DeadLetterBox", "is_dead_letter"]


def is_dead_letter(record: OutRecord) -> bool:
    """Whether ``record`` is a dead letter to set aside (made by
    :func:`~consumers.eventlog.codec.dead_letter`), not an ordinary record."""
    return any(name == LETTER_HEADER for name, _ in record.headers)


class DeadLetterBox(ABC):
    @abstractmethod
    async def set_aside(self, letters: Sequence[OutRecord]) -> int:
        """Keep each of ``letters`` (dead letters, :func:`is_dead_letter`) once per source
        record, merging reasons as the module says; returns the records appended (letters and
        reason notes). Returns once they are durable and readable (``log.inspection`` reads
        them)."""
