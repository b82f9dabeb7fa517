"""A polled batch's partitions, next offsets and counts (``batches.py``): keyed by partition
alone for a batch of one topic, they equal the same figures keyed by (topic, partition) pairs,
for batches of one topic and of several."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.components.batches import counts_by_partition, next_offsets, partitions_of
from consumers.eventlog.port import Record

# Records of up to three topics sharing partition numbers, offsets in any order.
records = st.lists(
    st.builds(
        lambda topic, partition, offset: Record(topic, partition, offset, None, b""),
        st.sampled_from(["a.lifecycle.v1", "a.probes.v1", "b.lifecycle.v1"]),
        st.integers(0, 5),
        st.integers(0, 10_000),
    ),
    max_size=60,
)
one_topic = records.map(lambda rs: [r._replace(topic="a.lifecycle.v1") for r in rs])


@settings(max_examples=200, deadline=None)
@given(st.one_of(records, one_topic))
def test_a_batch_s_figures_are_those_of_its_topic_partition_pairs(batch: list[Record]) -> None:
    pairs = [(r.topic, r.partition) for r in batch]
    last: dict[tuple[str, int], int] = {}
    for r in batch:
        last[(r.topic, r.partition)] = r.offset + 1

    assert partitions_of(batch) == set(pairs)
    assert next_offsets(batch) == last
    assert list(next_offsets(batch)) == list(last)  # partitions in order of first appearance
    assert counts_by_partition(batch) == dict(Counter(pairs))


def test_the_same_partition_number_of_two_topics_is_two_partitions() -> None:
    batch = [
        Record("a.lifecycle.v1", 0, 7, None, b""),
        Record("a.probes.v1", 0, 3, None, b""),
        Record("a.lifecycle.v1", 0, 8, None, b""),
    ]
    assert next_offsets(batch) == {("a.lifecycle.v1", 0): 9, ("a.probes.v1", 0): 4}
    assert counts_by_partition(batch) == {("a.lifecycle.v1", 0): 2, ("a.probes.v1", 0): 1}
    assert partitions_of(batch) == {("a.lifecycle.v1", 0), ("a.probes.v1", 0)}
