"""Values made fast without the library's checks are the values the library makes: a derived id
is ``uuid.uuid5``'s, and a model built by ``copying.builder`` is the model validation gives (or
a ``TypeError`` for fields unknown or missing, and for a model it must not build)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from statemachine.copying import builder
from statemachine.events import _NAMESPACE, AuditFailedData, FailedBy, derived_id

_CAUSES = st.uuids() | st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


@given(_CAUSES, st.sampled_from(["reconciler-decision", "reconciler-hold"]) | st.text(max_size=8))
def test_a_derived_id_is_uuid5_of_the_cause_and_role(cause: uuid.UUID | str, role: str) -> None:
    made, expected = derived_id(cause, role), uuid.uuid5(_NAMESPACE, f"{cause}:{role}")
    assert made == expected and hash(made) == hash(expected)
    assert str(made) == str(expected) and made.version == 5 and made.variant == expected.variant
    assert made.is_safe == expected.is_safe


def test_a_built_model_is_the_model_validation_gives() -> None:
    given_values = {
        "error_code": "oom",
        "error_detail": "Worker exceeded memory limit",
        "failed_by": FailedBy.RECONCILER,
        "policy": {
            "mode": "enforce",
            "grace_s": 600.0,
            "at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        },
    }
    built = builder(AuditFailedData)(**given_values)
    validated = AuditFailedData(**given_values)
    assert built == validated
    assert built.model_dump_json() == validated.model_dump_json()
    assert built.model_fields_set == validated.model_fields_set
    assert built.failed_phase is None and built.actor is None  # the defaults, filled


def test_a_builder_names_fields_unknown_or_missing() -> None:
    build = builder(AuditFailedData)
    with pytest.raises(TypeError, match="colour"):
        build(error_code="oom", error_detail="d", failed_by=FailedBy.RECONCILER, colour="red")
    with pytest.raises(TypeError, match="failed_by"):
        build(error_code="oom", error_detail="d")


def test_a_builder_refuses_models_whose_defaults_or_extras_it_would_share() -> None:
    class Listed(BaseModel):
        items: list[str] = []

    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")

    for model in (Listed, Open):
        with pytest.raises(TypeError, match="by validation"):
            builder(model)
