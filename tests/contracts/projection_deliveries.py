"""The contract of :class:`~projections.deliveries.OutcomeDeliveries`, the outcome feed's
endpoints and parked entries: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC

from projections.store import ProjectionStore
from projections.values import ParkedEntry
from tests.contracts.projection_store import CONSUMER, StoreFixtures, at

__all__ = ["OutcomeDeliveriesContract"]

HOOK = "webhook:0"
QUEUE = "queue"


def entry(
    outcome_id: str, audit_id: str, *, endpoint: str = HOOK, partition: int = 0, minute: int = 1
) -> ParkedEntry:
    return ParkedEntry(
        endpoint=endpoint,
        outcome_id=outcome_id,
        audit_id=audit_id,
        partition=partition,
        body=f'{{"id": "{outcome_id}", "audit_id": "{audit_id}", "status": "failed"}}',
        attempts=7,
        error="HTTP 503 from the endpoint",
        parked_at=at(minute),
    )


def ids(entries: list[ParkedEntry]) -> list[str]:
    return [e.outcome_id for e in entries]


def asked(entries: list[ParkedEntry]) -> dict[str, tuple[object, object]]:
    return {e.outcome_id: (e.retry_requested_at, e.retry_requested_by) for e in entries}


class OutcomeDeliveriesContract(StoreFixtures):
    async def test_register_is_idempotent_and_gives_the_first_registration(
        self, store: ProjectionStore
    ) -> None:
        first = await store.deliveries.register(HOOK, "https://a.example/hook", at(1))
        assert first == at(1) and first.tzinfo is not None
        # again, later, with another target: still first registered then
        assert await store.deliveries.register(HOOK, "https://b.example/hook", at(5)) == at(1)
        assert await store.deliveries.register(QUEUE, "queue q-1", at(6)) == at(6)

    async def test_park_numbers_entries_in_the_order_given_and_keeps_every_field(
        self, store: ProjectionStore
    ) -> None:
        given = [entry("o-2", "a-1"), entry("o-1", "a-1", partition=3), entry("o-3", "a-2")]
        # a seq or retry request given is not the store's: it numbers and decides them
        given[0] = replace(given[0], seq=99, retry_requested_at=at(9), retry_requested_by="x")
        await store.deliveries.park(given)
        parked = await store.deliveries.parked()
        assert ids(parked) == ["o-2", "o-1", "o-3"]
        seqs = [e.seq for e in parked]
        assert seqs == sorted(seqs) and len(set(seqs)) == 3 and seqs[0] >= 1
        assert parked[1] == replace(given[1], seq=seqs[1])
        assert parked[0].retry_requested_at is None and parked[0].retry_requested_by is None
        assert parked[0].parked_at.tzinfo is not None
        assert parked[0].parked_at.astimezone(UTC) == at(1)

        # later entries come after every entry parked before
        await store.deliveries.park([entry("o-0", "a-3")])
        assert ids(await store.deliveries.parked()) == ["o-2", "o-1", "o-3", "o-0"]
        await store.deliveries.park([])

    async def test_park_is_idempotent_by_endpoint_and_outcome_id(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.park([entry("o-1", "a-1"), entry("o-2", "a-1")])
        before = await store.deliveries.parked()
        # the same entry again (other attempts, error, body) keeps its row and place
        again = replace(entry("o-1", "a-1", minute=9), attempts=1, error="other", body="{}")
        await store.deliveries.park([again, entry("o-3", "a-1")])
        after = await store.deliveries.parked()
        assert after[:2] == before
        assert ids(after) == ["o-1", "o-2", "o-3"]
        # the same outcome on another endpoint is another entry
        await store.deliveries.park([entry("o-1", "a-1", endpoint=QUEUE)])
        assert await store.deliveries.parked_counts() == {HOOK: 3, QUEUE: 1}

    async def test_parked_lists_an_endpoint_or_all_after_a_seq_at_most_limit(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.park(
            [
                entry("o-1", "a-1"),
                entry("o-2", "a-2", endpoint=QUEUE),
                entry("o-3", "a-1"),
                entry("o-4", "a-3"),
            ]
        )
        everything = await store.deliveries.parked()
        assert ids(everything) == ["o-1", "o-2", "o-3", "o-4"]
        assert ids(await store.deliveries.parked(HOOK)) == ["o-1", "o-3", "o-4"]
        assert ids(await store.deliveries.parked(QUEUE)) == ["o-2"]
        assert await store.deliveries.parked("nowhere") == []
        first = await store.deliveries.parked(HOOK, limit=2)
        assert ids(first) == ["o-1", "o-3"]
        rest = await store.deliveries.parked(HOOK, limit=2, after=first[-1].seq)
        assert ids(rest) == ["o-4"]
        assert ids(await store.deliveries.parked(after=everything[1].seq)) == ["o-3", "o-4"]

    async def test_parked_counts_and_audits_per_endpoint_and_partition(
        self, store: ProjectionStore
    ) -> None:
        assert await store.deliveries.parked_counts() == {}
        await store.deliveries.park(
            [
                entry("o-1", "a-1", partition=0),
                entry("o-2", "a-1", partition=0),
                entry("o-3", "a-2", partition=1),
                entry("o-4", "a-3", partition=2),
                entry("o-5", "a-4", partition=1, endpoint=QUEUE),
            ]
        )
        assert await store.deliveries.parked_counts() == {HOOK: 4, QUEUE: 1}
        assert await store.deliveries.parked_audits(HOOK, [0, 1]) == {"a-1", "a-2"}
        assert await store.deliveries.parked_audits(HOOK, iter([2])) == {"a-3"}
        assert await store.deliveries.parked_audits(QUEUE, [0, 1, 2]) == {"a-4"}
        assert await store.deliveries.parked_audits(HOOK, []) == set()
        assert await store.deliveries.parked_audits("nowhere", [0, 1, 2]) == set()

    async def test_a_retry_asked_for_one_entry_asks_for_its_audit_on_its_endpoint(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.park(
            [
                entry("x-1", "a-x"),
                entry("y-1", "a-y"),
                entry("x-2", "a-x"),
                entry("x-1", "a-x", endpoint=QUEUE),
            ]
        )
        # the later entry named: its audit's earlier one is asked for too, on HOOK alone
        assert await store.deliveries.request_retry(HOOK, ["x-2"], "ops", at(5)) == 2
        shown = asked(await store.deliveries.parked(HOOK))
        assert shown == {"x-1": (at(5), "ops"), "x-2": (at(5), "ops"), "y-1": (None, None)}
        assert asked(await store.deliveries.parked(QUEUE)) == {"x-1": (None, None)}
        # asked again, or for nothing parked: nothing more asked for, the first ask kept
        assert await store.deliveries.request_retry(HOOK, ["x-1", "x-2"], "other", at(6)) == 0
        assert await store.deliveries.request_retry(HOOK, ["nope"], "ops", at(6)) == 0
        assert await store.deliveries.request_retry(QUEUE, ["y-1"], "ops", at(6)) == 0
        assert await store.deliveries.request_retry(HOOK, [], "ops", at(6)) == 0
        assert asked(await store.deliveries.parked(HOOK))["x-1"] == (at(5), "ops")
        # every parked entry of an endpoint
        assert await store.deliveries.request_retry(HOOK, None, "all", at(7)) == 1
        assert asked(await store.deliveries.parked(HOOK))["y-1"] == (at(7), "all")
        assert asked(await store.deliveries.parked(QUEUE)) == {"x-1": (None, None)}

    async def test_a_retry_asked_on_every_endpoint_finds_the_entry_on_each(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.park(
            [
                entry("x-1", "a-x"),
                entry("x-2", "a-x", endpoint=QUEUE),
                entry("x-1", "a-x", endpoint=QUEUE),
                entry("y-1", "a-y", endpoint=QUEUE),
            ]
        )
        # x-1 is parked on both endpoints: its audit is asked for on each
        assert await store.deliveries.request_retry(None, ["x-1"], "ops", at(5)) == 3
        assert asked(await store.deliveries.parked()) == {
            "x-1": (at(5), "ops"),
            "x-2": (at(5), "ops"),
            "y-1": (None, None),
        }
        assert await store.deliveries.request_retry(None, None, "all", at(6)) == 1
        assert asked(await store.deliveries.parked(QUEUE))["y-1"] == (at(6), "all")
        assert await store.deliveries.request_retry(None, None, "all", at(7)) == 0

    async def test_retry_requested_lists_the_asked_entries_of_partitions_in_seq_order(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.park(
            [
                entry("x-1", "a-x", partition=0),
                entry("y-1", "a-y", partition=1),
                entry("x-2", "a-x", partition=0),
                entry("z-1", "a-z", partition=2),
                entry("w-1", "a-w", partition=0),
                entry("y-1", "a-y", partition=1, endpoint=QUEUE),
            ]
        )
        assert await store.deliveries.retry_requested(HOOK, [0, 1, 2]) == []
        await store.deliveries.request_retry(HOOK, ["x-1", "y-1", "z-1"], "ops", at(5))
        wanted = await store.deliveries.retry_requested(HOOK, [0, 1])
        assert ids(wanted) == ["x-1", "y-1", "x-2"]
        assert all(e.retry_requested_at == at(5) and e.endpoint == HOOK for e in wanted)
        assert ids(await store.deliveries.retry_requested(HOOK, [0, 1], limit=2)) == ["x-1", "y-1"]
        assert ids(await store.deliveries.retry_requested(HOOK, iter([2]))) == ["z-1"]
        assert await store.deliveries.retry_requested(HOOK, []) == []
        assert await store.deliveries.retry_requested(QUEUE, [0, 1, 2]) == []

    async def test_an_entry_parked_behind_its_audit_takes_the_latest_retry_request(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.park([entry("x-1", "a-x"), entry("y-1", "a-y")])
        await store.deliveries.request_retry(HOOK, ["x-1"], "ops", at(5))
        # parked behind a-x's asked-for entry (one batch, with an entry of a new audit): asked
        # for as it is; another audit's, and the same audit's on another endpoint, are not
        await store.deliveries.park(
            [
                entry("x-2", "a-x"),
                entry("z-1", "a-z"),
                entry("x-3", "a-x", endpoint=QUEUE),
                entry("y-2", "a-y"),
            ]
        )
        assert asked(await store.deliveries.parked()) == {
            "x-1": (at(5), "ops"),
            "y-1": (None, None),
            "x-2": (at(5), "ops"),
            "z-1": (None, None),
            "x-3": (None, None),
            "y-2": (None, None),
        }
        assert ids(await store.deliveries.retry_requested(HOOK, [0])) == ["x-1", "x-2"]

        # once the retry failed again, an entry parked behind is not asked for
        await store.deliveries.park_again(HOOK, "x-1", 9, "HTTP 500", at(8))
        await store.deliveries.park([entry("x-4", "a-x")])
        assert asked(await store.deliveries.parked(HOOK))["x-4"] == (None, None)
        # and once its audit has nothing parked, a new entry starts afresh
        await store.deliveries.request_retry(HOOK, ["y-1"], "ops", at(9))
        assert await store.deliveries.delivered(HOOK, ["y-1", "y-2"]) == {"a-y"}
        await store.deliveries.park([entry("y-3", "a-y")])
        assert asked(await store.deliveries.parked(HOOK))["y-3"] == (None, None)

    async def test_delivered_removes_entries_and_names_the_audits_left_with_none(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.park(
            [
                entry("x-1", "a-x"),
                entry("x-2", "a-x"),
                entry("y-1", "a-y"),
                entry("x-1", "a-x", endpoint=QUEUE),
            ]
        )
        # a-x keeps x-2 on HOOK; a-y has nothing left
        assert await store.deliveries.delivered(HOOK, ["x-1", "y-1"]) == {"a-y"}
        assert ids(await store.deliveries.parked(HOOK)) == ["x-2"]
        assert ids(await store.deliveries.parked(QUEUE)) == ["x-1"]  # another endpoint's
        # delivered again, or never parked: nothing removed, no audit named
        assert await store.deliveries.delivered(HOOK, ["x-1", "nope"]) == set()
        assert await store.deliveries.delivered(HOOK, []) == set()
        assert await store.deliveries.delivered(HOOK, ["x-2"]) == {"a-x"}
        assert await store.deliveries.parked_counts() == {QUEUE: 1}

    async def test_park_again_records_the_failure_and_clears_the_audits_request(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.park(
            [
                entry("x-1", "a-x"),
                entry("x-2", "a-x", minute=2),
                entry("y-1", "a-y"),
                entry("x-1", "a-x", endpoint=QUEUE),
            ]
        )
        await store.deliveries.request_retry(None, None, "ops", at(5))
        before = {e.outcome_id: e for e in await store.deliveries.parked(HOOK)}

        await store.deliveries.park_again(HOOK, "x-1", 12, "HTTP 410 from the endpoint", at(6))

        # its failure recorded, its seq and parked_at (when first parked) kept
        after = {e.outcome_id: e for e in await store.deliveries.parked(HOOK)}
        assert after["x-1"] == replace(
            before["x-1"],
            attempts=12,
            error="HTTP 410 from the endpoint",
            retry_requested_at=None,
            retry_requested_by=None,
        )
        assert after["x-2"] == replace(
            before["x-2"], retry_requested_at=None, retry_requested_by=None
        )
        assert after["y-1"] == before["y-1"]  # another audit's request stands
        assert asked(await store.deliveries.parked(QUEUE)) == {"x-1": (at(5), "ops")}
        assert ids(await store.deliveries.retry_requested(HOOK, [0])) == ["y-1"]
        # asked for again: the whole audit, in its order
        assert await store.deliveries.request_retry(HOOK, ["x-2"], "ops", at(7)) == 2
        assert ids(await store.deliveries.retry_requested(HOOK, [0])) == ["x-1", "x-2", "y-1"]
        # an entry parked nowhere changes nothing
        await store.deliveries.park_again(HOOK, "nope", 1, "x", at(8))
        assert {e.outcome_id: e for e in await store.deliveries.parked(HOOK)}["x-1"].attempts == 12

    async def test_a_rebuild_forgets_no_endpoint_and_no_parked_entry(
        self, store: ProjectionStore
    ) -> None:
        await store.deliveries.register(HOOK, "https://a.example/hook", at(1))
        await store.deliveries.park([entry("x-1", "a-x"), entry("y-1", "a-y")])
        await store.deliveries.request_retry(HOOK, ["y-1"], "ops", at(5))
        before = await store.deliveries.parked()

        await store.writer.reset(CONSUMER)

        assert await store.deliveries.register(HOOK, "https://a.example/hook", at(9)) == at(1)
        assert await store.deliveries.parked() == before
        assert ids(await store.deliveries.retry_requested(HOOK, [0])) == ["y-1"]
