"""The error classifier (DESIGN §4): case-insensitive, first match wins, on "name: message"."""

from __future__ import annotations

import typing

import pytest

from statemachine.classifier import MAX_DETAIL, classify, error_text, truncate
from statemachine.events import AuditFailedData, WorkflowError
from statemachine.policy import Policy
from statemachine.rules import decide
from statemachine.vocabulary import ERROR_CODES
from tests.statemachine.sm_builders import at, observed, running

# --- each case of the design --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("exceeded memory limit", "oom"),
        ("Worker EXCEEDED Memory Limit", "oom"),
        ("exceeded cpu time limit", "cpu_limit"),
        ("Worker Exceeded CPU Time Limit", "cpu_limit"),
        ("WorkflowTimeoutError", "step_timeout"),
        ("workflowTIMEOUTerror: boom", "step_timeout"),
        ("Error: Execution timed out", "step_timeout"),
        ("EXECUTION TIMED OUT after 5s", "step_timeout"),
        ("Step output is too large", "step_output_too_large"),
        ("OUTPUT IS TOO LARGE", "step_output_too_large"),
        ("WorkflowInternalError", "workflow_internal"),
        ("workflowinternalerror: something", "workflow_internal"),
        ("Failed query: select 1", "db_error"),
        ("FAILED QUERY: x", "db_error"),
        ("D1_ERROR: no such table: audits", "db_error"),
        ("d1_error", "db_error"),
        ("Error: Postgres database accessed outside a request scope", "db_error"),
        ("Durable Object reset because its code was updated.", "deploy_reset"),
        ("DURABLE OBJECT RESET BECAUSE ITS CODE WAS UPDATED", "deploy_reset"),
    ],
)
def test_each_known_message_is_classified_case_insensitively(text: str, code: str) -> None:
    assert classify(text) == code


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("WorkflowTimeoutError: Execution timed out after 1000ms", "step_timeout"),
        (
            "WorkflowInternalError: Step x output is too large. Maximum allowed size is 1MiB.",
            "step_output_too_large",
        ),
        ("Worker exceeded CPU time limit.", "cpu_limit"),
        ("exceeded memory limit", "oom"),
        ("WorkflowFatalError: The limit of 1024 steps has been reached", None),
    ],
)
def test_the_platform_messages_of_the_reference_are_classified(text: str, code: str | None) -> None:
    assert classify(text) == code


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("exceeded cpu time limit after exceeded memory limit", "oom"),
        ("WorkflowInternalError: Step s output is too large", "step_output_too_large"),
        ("WorkflowInternalError: Execution timed out", "step_timeout"),
        ("WorkflowTimeoutError: output is too large", "step_timeout"),
        ("Exceeded CPU time limit: WorkflowTimeoutError", "cpu_limit"),
        ("WorkflowInternalError: D1_ERROR", "workflow_internal"),
        ("D1_ERROR: Durable Object reset because its code was updated", "db_error"),
    ],
)
def test_the_first_pattern_in_design_order_wins(text: str, code: str) -> None:
    assert classify(text) == code


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "TypeError: x is undefined",
        "failed query",  # the pattern includes the colon
        "memory limit",
        "timed out",
        "d1 error",
    ],
)
def test_no_match_is_none(text: str | None) -> None:
    assert classify(text) is None


# --- the text that is classified ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (None, None),
        ("", None),
        ("plain string", "plain string"),
        (
            {"name": "WorkflowTimeoutError", "message": "Execution timed out"},
            "WorkflowTimeoutError: Execution timed out",
        ),
        ({"name": "OnlyName", "message": None}, "OnlyName"),
        ({"name": None, "message": "only message"}, "only message"),
        ({"name": "", "message": ""}, None),
        (WorkflowError(name="E", message="m"), "E: m"),
        (WorkflowError(message="m"), "m"),
        (WorkflowError(name="E"), "E"),
        (WorkflowError(), None),
    ],
)
def test_error_text_joins_name_and_message(error: object, text: str | None) -> None:
    assert error_text(error) == text


def test_name_and_message_are_joined_before_matching() -> None:
    # "failed query:" only matches across the join
    error = WorkflowError(name="Failed query", message="select * from audits")

    assert error_text(error) == "Failed query: select * from audits"
    assert classify(error_text(error)) == "db_error"


@pytest.mark.parametrize(
    "error",
    [
        "WorkflowTimeoutError: Execution timed out after 1000ms",
        {"name": "WorkflowTimeoutError", "message": "Execution timed out after 1000ms"},
    ],
    ids=["string", "object"],
)
def test_string_and_object_errors_classify_the_same(error: object) -> None:
    _, decision = decide(running(), observed("errored", when=at(3), error=error), Policy())

    assert decision is not None
    assert decision.data.error_code == "step_timeout"
    assert decision.data.error_detail == "WorkflowTimeoutError: Execution timed out after 1000ms"


# --- what the rules make of "no match" ------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"), [("errored", "unknown"), ("terminated", "workflow_terminated")]
)
def test_an_unclassified_error_maps_to_the_rules_default(status: str, code: str) -> None:
    _, decision = decide(
        running(),
        observed(status, when=at(3), error={"name": "Error", "message": "nope"}),
        Policy(),
    )

    assert decision is not None
    assert decision.data.error_code == code
    assert decision.data.error_detail == "Error: nope"


@pytest.mark.parametrize("status", ["errored", "terminated"])
def test_a_classified_error_wins_over_the_rules_default(status: str) -> None:
    _, decision = decide(
        running(),
        observed(status, when=at(3), error="Durable Object reset because its code was updated"),
        Policy(),
    )

    assert decision is not None
    assert decision.data.error_code == "deploy_reset"


# --- codes and detail ---------------------------------------------------------------------------


def test_the_error_codes_are_the_design_list_and_the_contract_literal() -> None:
    # DESIGN §4, as written there.
    written = (
        "step_timeout, oom, cpu_limit, db_error, step_output_too_large, workflow_internal, "
        "deploy_reset, instance_lost, workflow_terminated, finalize_lost, stalled, unknown"
    )
    design = written.split(", ")
    literal = typing.get_args(AuditFailedData.model_fields["error_code"].annotation)

    assert list(ERROR_CODES) == design
    assert set(literal) == set(design)


def test_every_classifier_code_is_a_known_error_code() -> None:
    from statemachine.classifier import _PATTERNS

    assert {code for _, code in _PATTERNS} <= set(ERROR_CODES)
    assert all(needle == needle.lower() for needle, _ in _PATTERNS)


@pytest.mark.parametrize(
    ("length", "expected"), [(0, 0), (499, 499), (500, 500), (501, 500), (5000, 500)]
)
def test_detail_is_truncated_to_at_most_500_characters(length: int, expected: int) -> None:
    text = "y" * length

    out = truncate(text)

    assert MAX_DETAIL == 500
    assert len(out) == expected
    if length > 500:
        assert out == "y" * 499 + "…"
    else:
        assert out == text
