"""Who writes and who reads each topic: the components of ``auditrec serve``, the operator
commands, and the other services that publish. The AsyncAPI document's operations are drawn
from this table; the messages each role handles are derived from the models where a role
handles a whole topic (the lifecycle consumers read every lifecycle type, new ones included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from consumers.operations.contracts.catalog import PUBLIC_TYPES
from statemachine.events import LIFECYCLE_TYPES

__all__ = ["ROLES", "Channel", "Role", "Use"]

Channel = Literal["lifecycle", "probe-requests", "dead-letter", "ingest", "confirmations"]


@dataclass(frozen=True, slots=True)
class Use:
    """One role's sending or receiving on one topic: which messages, and why."""

    action: Literal["send", "receive"]
    channel: Channel
    messages: Callable[[], tuple[str, ...]]
    summary: str


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    description: str
    # The Kafka consumer group is `<group prefix>-<name>` (DESIGN §5) for a component.
    component: bool = True
    uses: tuple[Use, ...] = field(default=())


def _lifecycle() -> tuple[str, ...]:
    return tuple(LIFECYCLE_TYPES)


def _public() -> tuple[str, ...]:
    return PUBLIC_TYPES


def _only(*names: str) -> Callable[[], tuple[str, ...]]:
    return lambda: names


_DEAD = Use("send", "dead-letter", _only("DeadLetter"), "records it cannot decode or apply")

ROLES: Final[tuple[Role, ...]] = (
    Role(
        "publishers",
        "Other services (the crawler, its workflows, operators' tools): through POST /events, "
        "auditrec publish, or the ingest topic; never the lifecycle topic, which only "
        "auditrec's principal may write.",
        component=False,
        uses=(Use("send", "ingest", _public, "the audits' lifecycle"),),
    ),
    Role(
        "ingest",
        "Validates what Kafka publishers write (publisher types only; AuditFailed only by the "
        "workflow) onto the lifecycle topic; dead-letters the rest with the reason.",
        uses=(
            Use("receive", "ingest", _public, "what Kafka publishers write"),
            Use("send", "lifecycle", _public, "what may enter, validated"),
            _DEAD,
        ),
    ),
    Role(
        "projector",
        "Folds every lifecycle event into the audits table and its history.",
        uses=(Use("receive", "lifecycle", _lifecycle, "every lifecycle event"), _DEAD),
    ),
    Role(
        "reconciler",
        "Folds each audit's events and judges observations by the rules; the only writer of "
        "reconciler decisions.",
        uses=(
            Use("receive", "lifecycle", _lifecycle, "every lifecycle event"),
            Use(
                "send",
                "lifecycle",
                _only(
                    "AuditFailed",
                    "AuditFailureSimulated",
                    "AuditFailureHeld",
                    "WorkflowTerminationRequested",
                ),
                "its decisions (failures, shadow-mode failures and reported stalls, failures "
                "held by the brake, stalled instances to terminate)",
            ),
            Use(
                "send",
                "probe-requests",
                _only("ProbeRequested"),
                "a stalled instance's termination, for the probe to carry out",
            ),
            _DEAD,
        ),
    ),
    Role(
        "probe",
        "Asks the Workflows API about an instance for each probe request; decides nothing.",
        uses=(
            Use("receive", "probe-requests", _only("ProbeRequested"), "probe requests"),
            Use(
                "send",
                "lifecycle",
                _only("WorkflowStatusObserved", "WorkflowProbeFailed"),
                "what it observed, or why it could not",
            ),
            _DEAD,
        ),
    ),
    Role(
        "subscriber",
        "Pulls the Cloudflare Queue of the Workflows event subscription: an instance reported "
        "ended asks for a probe to confirm it; one reported queued, started or paused is "
        "observed from the message. Acknowledges a message once what it caused is in the log.",
        uses=(
            Use(
                "send",
                "confirmations",
                _only("ProbeRequested"),
                "probe requests confirming deaths the queue reported, in order of death",
            ),
            Use(
                "send",
                "lifecycle",
                _only("WorkflowStatusObserved"),
                "statuses the queue reported (queued, running, paused)",
            ),
            _DEAD,
        ),
    ),
    Role(
        "confirmer",
        "The probe for the event subscription's requests: one request each, in order, waiting "
        "for the budget (never dropped) with what the watchdog's floor and the status reads "
        "leave.",
        uses=(
            Use("receive", "confirmations", _only("ProbeRequested"), "confirmation requests"),
            Use(
                "send",
                "lifecycle",
                _only("WorkflowStatusObserved", "WorkflowProbeFailed"),
                "what it observed, or why it could not",
            ),
            _DEAD,
        ),
    ),
    Role(
        "telemetry",
        "Reports failures found by reconciliation to PostHog (site_audit:complete).",
        uses=(Use("receive", "lifecycle", _lifecycle, "every lifecycle event"), _DEAD),
    ),
    Role(
        "outcomes",
        "Delivers each change of an audit's status to the product (signed webhooks, a "
        "Cloudflare Queue), in each audit's order; one consumer group per endpoint.",
        uses=(Use("receive", "lifecycle", _lifecycle, "every lifecycle event"), _DEAD),
    ),
    Role(
        "watchdog",
        "Each tick, asks for probes of stale running audits; judges a sweep's held failures.",
        uses=(
            Use("send", "probe-requests", _only("ProbeRequested"), "the tick's probe requests"),
            Use(
                "send",
                "lifecycle",
                _only("AuditFailureReleased"),
                "held failures the sweep's verdict lets through",
            ),
        ),
    ),
    Role(
        "api",
        "The HTTP API and the CLI: on-demand status reads, and operators' actions (fail, restore, "
        "probe, brake commands).",
        uses=(
            Use("send", "probe-requests", _only("ProbeRequested"), "on-demand probe requests"),
            Use(
                "send",
                "lifecycle",
                _only(
                    "AuditFailed", "AuditRestored", "AuditFailureReleased", "AuditFailureDiscarded"
                ),
                "operators' actions: failures, restores, held failures released or discarded",
            ),
        ),
    ),
)
