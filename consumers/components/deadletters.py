"""How many dead letters the dead-letter topic holds, per partition, for
``auditrec_dead_letters_kept`` (refreshed by the watchdog with its other gauges).

Counted, not estimated from offsets (reason notes, replay and purge marks, and on Kafka
transaction markers occupy offsets too), and incrementally: each refresh reads only what was
appended since the last, and forgets what a purge trimmed.
"""

from __future__ import annotations

from consumers.eventlog.dead_letters import read_dead_letter
from consumers.eventlog.port import EventLog
from consumers.runtime.metrics import DEAD_LETTERS_KEPT

__all__ = ["DeadLetterCount"]


class DeadLetterCount:
    def __init__(self, log: EventLog) -> None:
        self.log = log
        self._read_to: dict[int, int] = {}  # partition -> next offset to read
        self._letters: dict[int, list[int]] = {}  # partition -> offsets of its dead letters

    async def refresh(self) -> dict[int, int]:
        """The dead letters per partition now, also set on the gauge."""
        topic = self.log.topics.dead_letter
        starts = await self.log.inspection.start_offsets(topic)
        ends = await self.log.inspection.end_offsets(topic)
        counts: dict[int, int] = {}
        for partition, end in sorted(ends.items()):
            start = starts.get(partition, 0)
            letters = [o for o in self._letters.get(partition, []) if o >= start]
            begin = max(self._read_to.get(partition, 0), start)
            if begin < end:
                async for batch in self.log.inspection.read(topic, partition, begin, end):
                    letters.extend(r.offset for r in batch if read_dead_letter(r) is not None)
            self._letters[partition], self._read_to[partition] = letters, max(begin, end)
            counts[partition] = len(letters)
            DEAD_LETTERS_KEPT.labels(topic, str(partition)).set(len(letters))
        return counts
