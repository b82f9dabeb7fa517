"""Setting records aside on the embedded log (the dead-letter port, documented in
``eventlog/letters.py``): one write transaction looks at what the dead-letter topic holds under
each letter's key and appends what :func:`~consumers.eventlog.dead_letters.settle` decides
(``records.append_records``); SQLite's write lock makes it one step with every other writer of
the file, in this process or another."""

from __future__ import annotations

from collections.abc import Sequence

from consumers.eventlog.letters import DeadLetterBox
from consumers.eventlog.sqlite.records import AppendSignal, append_records
from consumers.eventlog.values import OutRecord
from projections.sqlite.connection import SQLiteDB

__all__ = ["SQLiteDeadLetters"]


class SQLiteDeadLetters(DeadLetterBox):
    def __init__(self, db: SQLiteDB, appended: AppendSignal) -> None:
        self.db = db
        self.appended = appended

    async def set_aside(self, letters: Sequence[OutRecord]) -> int:
        if not letters:
            return 0

        def work() -> int:
            with self.db.transaction() as conn:
                return append_records(conn, letters)

        written = await self.db.run(work)
        if written:
            self.appended.set()
        return written
