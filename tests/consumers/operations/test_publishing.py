"""What ``POST /events`` and ``auditrec publish`` accept, by the idempotency key
``(audit_id, event_id)``: a repeated item is published once, a key given other content is an
:class:`EventIdConflict` naming it (in the submission, or against the history), the same
event id under another audit is another event."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from consumers.operations.publishing import parse_json_lines, refuse_conflicts, validate_items
from projections.factory import open_store
from statemachine.errors import EventIdConflict, InvalidInput, Refused
from tests.contracts.projection_store import positioned


def item(kind: str, audit_id: str, event_id: str, **data: Any) -> dict[str, Any]:
    return {"type": kind, "audit_id": audit_id, "event_id": event_id, "data": data}


def step(audit_id: str, event_id: str, pages: int, at: str) -> dict[str, Any]:
    return {**item("AuditProgressed", audit_id, event_id, pages_crawled=pages), "occurred_at": at}


def test_an_item_repeating_a_key_and_content_is_published_once_whatever_its_envelope() -> None:
    same = str(uuid.uuid4())
    items = [
        step("a-1", same, 3, "2026-12-01T08:00:00Z"),
        {**step("a-1", same, 3, "2026-12-01T08:05:00+01:00"), "producer": "retry"},
        {**step("a-1", same, 3, "2026-12-01T08:06:00Z"), "schema_version": 1},
    ]

    events = validate_items(items)

    assert [str(e.event_id) for e in events] == [same]
    assert events[0].occurred_at.isoformat() == "2026-12-01T08:00:00+00:00"


def test_the_same_event_id_under_two_audits_is_two_events() -> None:
    same = str(uuid.uuid4())

    events = validate_items(
        [step("a-1", same, 3, "2026-12-01T08:00:00Z"), step("a-2", same, 3, "2026-12-01T08:00:00Z")]
    )

    assert [(e.audit_id, str(e.event_id)) for e in events] == [("a-1", same), ("a-2", same)]


@pytest.mark.parametrize(
    ("second", "named"),
    [
        (lambda same: step("a-1", same, 4, "2026-12-01T08:00:00Z"), "other data"),
        (lambda same: item("AuditCompleted", "a-1", same), "other type (AuditProgressed)"),
    ],
)
def test_a_key_given_other_content_is_a_conflict_naming_both_items(second: Any, named: str) -> None:
    same = str(uuid.uuid4())

    with pytest.raises(EventIdConflict) as err:
        validate_items([step("a-1", same, 3, "2026-12-01T08:00:00Z"), second(same)])

    (problem,) = err.value.problems
    assert problem.startswith("item 1: event_id " + same + " of audit a-1")
    assert named in problem and "(item 0)" in problem


def test_a_conflict_beside_an_invalid_item_is_invalid_input_listing_both() -> None:
    same = str(uuid.uuid4())
    items = [
        step("a-1", same, 3, "2026-12-01T08:00:00Z"),
        step("a-1", same, 4, "2026-12-01T08:00:00Z"),
        {"type": "AuditProgressed", "audit_id": "bad id!", "data": {}},
    ]

    with pytest.raises(InvalidInput) as err:
        validate_items(items)

    assert not isinstance(err.value, EventIdConflict)
    assert [p.split(":")[0] for p in err.value.problems] == ["item 1", "item 2"]


def test_publish_lines_repeating_an_event_publish_it_once_and_name_a_conflict_by_line() -> None:
    same = str(uuid.uuid4())
    line = '{"type": "AuditProgressed", "audit_id": "a-1", "event_id": "%s", "data": %s}'
    once = parse_json_lines([line % (same, '{"pages_crawled": 1}')] * 2)
    assert len(once) == 1

    with pytest.raises(EventIdConflict) as err:
        parse_json_lines([line % (same, '{"pages_crawled": 1}'), "", line % (same, "{}")])
    assert err.value.problems[0].startswith("line 3: ") and "(line 1)" in err.value.problems[0]
    assert err.value.exit_code == 2


async def test_a_key_the_history_holds_with_other_content_is_refused_a_repeat_is_not(
    tmp_path: Path,
) -> None:
    # given a store whose history holds an audit's step
    (recorded,) = validate_items([step("a-1", str(uuid.uuid4()), 3, "2026-12-01T08:00:00Z")])
    async with open_store(f"sqlite:///{tmp_path / 'p.db'}") as store:
        await store.init()
        await store.writer.apply(positioned([recorded]), {}, "projector")
        same = str(recorded.event_id)

        # when a repeat (a new time), the id under another audit, and the id with other data
        # are checked against it
        repeat, elsewhere, clash = validate_items(
            [
                step("a-1", same, 3, "2026-12-01T09:00:00Z"),
                step("a-2", same, 9, "2026-12-01T09:00:00Z"),
                step("a-3", str(uuid.uuid4()), 1, "2026-12-01T09:00:00Z"),
            ]
        )
        clash = clash.model_copy(update={"audit_id": "a-1", "event_id": recorded.event_id})
        await refuse_conflicts(store.audits, [repeat, elsewhere])

        # then only the other data is refused, naming the id and audit
        with pytest.raises(EventIdConflict) as err:
            await refuse_conflicts(store.audits, [repeat, clash])
        (problem,) = err.value.problems
        assert problem.startswith(f"event_id {same} of audit a-1 already names")
        assert "(in the history)" in problem


def test_a_line_names_only_the_cli_user_who_publishes_it() -> None:
    line = (
        '{"type": "AuditFailed", "audit_id": "a-1", "data": {"actor": "%s", '
        '"error_code": "oom", "error_detail": "x", "failed_by": "workflow"}}'
    )

    (own,) = parse_json_lines([line % "cli:alice"], actor="cli:alice")
    assert own.data.actor == "cli:alice"  # type: ignore[union-attr]
    with pytest.raises(Refused) as refused:
        parse_json_lines([line % "token:ops"], actor="cli:alice")
    assert refused.value.problems == [
        "line 1: data.actor: 'token:ops' is not who authenticated ('cli:alice'); the actor is "
        "the token's (or the CLI user's), never the body's (name a person you act for in "
        "on_behalf_of)"
    ]
