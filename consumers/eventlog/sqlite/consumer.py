"""A member of a consumer group on the embedded log: it holds the group's lease
(``leases.py``) on all the group's topics or none, polls them round-robin from its positions,
and commits offsets (with any output records) only while it still holds the lease.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from consumers.eventlog.port import AssignCallback, Consumer, OutRecord, Record, TopicPartition
from consumers.eventlog.sqlite.leases import LEASE_SECONDS, claim, holds, new_owner, release
from consumers.eventlog.sqlite.records import (
    AppendSignal,
    append_records,
    end_offset,
    fetch_records,
)
from projections.sqlite.connection import SQLiteDB
from statemachine.errors import EventLogError

__all__ = ["SQLiteConsumer"]


class SQLiteConsumer(Consumer):
    def __init__(
        self,
        db: SQLiteDB,
        appended: AppendSignal,
        group: str,
        topics: list[str],
        on_assign: AssignCallback | None,
        on_revoke: AssignCallback | None,
    ) -> None:
        self.db = db
        self.appended = appended
        self.group = group
        self.topics = topics
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.owner = new_owner()
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._positions: dict[TopicPartition, int] = {}
        self._renewed = 0.0
        self._started = False
        self._rr = 0

    async def start(self) -> None:
        self._started = True

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._assigned and self.db.started:
            if self.on_revoke is not None:
                await self.on_revoke(self, sorted(self._assigned))
            await self.db.run(lambda: release(self.db.conn, self.group, self.owner))
        self._assigned = frozenset()

    def _claim(self) -> bool:
        """Take or renew the group's lease on all its topics; True while we hold it."""
        now = time.time()
        with self.db.transaction() as conn:
            return claim(conn, self.group, self.topics, self.owner, now)

    def _load_offsets(self) -> dict[TopicPartition, int]:
        out = {}
        for topic in self.topics:
            row = self.db.conn.execute(
                "SELECT next_offset FROM group_offsets WHERE group_id = ? AND topic = ?",
                (self.group, topic),
            ).fetchone()
            out[(topic, 0)] = row[0] if row else 0
        return out

    async def _ensure_lease(self) -> None:
        now = time.monotonic()
        if self._assigned and now - self._renewed < LEASE_SECONDS / 5:
            return
        held = await self.db.run(self._claim)
        self._renewed = now
        if held and not self._assigned:
            self._positions = await self.db.run(self._load_offsets)
            self._assigned = frozenset(self._positions)
            if self.on_assign is not None:
                await self.on_assign(self, sorted(self._assigned))
        elif not held and self._assigned:
            lost = sorted(self._assigned)
            self._assigned = frozenset()
            if self.on_revoke is not None:
                await self.on_revoke(self, lost)

    def _fetch(self, topic: str, start: int, limit: int) -> list[Record]:
        return fetch_records(self.db.conn, topic, start, None, limit)

    async def poll(self, max_records: int = 1000, timeout: float = 1.0) -> list[Record]:
        deadline = time.monotonic() + timeout
        while True:
            await self._ensure_lease()
            if self._assigned:
                tps = sorted(self._assigned)
                self._rr += 1
                for i in range(len(tps)):
                    tp = tps[(self._rr + i) % len(tps)]
                    batch = await self.db.run(self._fetch, tp[0], self._positions[tp], max_records)
                    if batch:
                        self._positions[tp] = batch[-1].offset + 1
                        return batch
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            await self.appended.wait(min(left, 0.05))

    async def commit(
        self, offsets: Mapping[TopicPartition, int], outputs: Sequence[OutRecord] = ()
    ) -> None:
        def work() -> None:
            with self.db.transaction() as conn:
                for topic, _ in offsets:
                    if not holds(conn, self.group, topic, self.owner):
                        raise EventLogError(
                            f"group {self.group!r} lost its lease on {topic}: not committed"
                        )
                if outputs:
                    append_records(conn, outputs)
                conn.executemany(
                    "INSERT INTO group_offsets VALUES (?, ?, ?) ON CONFLICT (group_id, topic) "
                    "DO UPDATE SET next_offset = excluded.next_offset",
                    [(self.group, topic, nxt) for (topic, _), nxt in offsets.items()],
                )

        await self.db.run(work)
        if outputs:
            self.appended.set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def assignment(self) -> frozenset[TopicPartition]:
        return self._assigned

    async def committed(self) -> dict[TopicPartition, int]:
        return await self.db.run(self._load_offsets)

    async def lags(self) -> dict[TopicPartition, int]:
        out = {}
        for tp in self._assigned:
            end = await self.db.run(lambda topic=tp[0]: end_offset(self.db.conn, topic))
            out[tp] = max(0, end - self._positions.get(tp, 0))
        return out
