"""auditrec's functional core: events, the lifecycle table, evolve/fold, rules, classifier.

No I/O, no asyncio, no clock, no randomness: time and ids come in as arguments.
"""

from statemachine.classifier import classify, error_text
from statemachine.events import (
    EVENT_ADAPTER,
    PROBE_ADAPTER,
    AuditEvent,
    ProbeRequested,
    derived_id,
)
from statemachine.explain import Step, explain, explain_one
from statemachine.machine import STATES, TERMINAL, TRANSITIONS, mermaid, next_status
from statemachine.policy import Policy, format_duration, parse_duration
from statemachine.rules import Verdict, decide, judge
from statemachine.state import AuditState, evolve, fold
from statemachine.upcasting import upcast
from statemachine.vocabulary import ERROR_CODES

__all__ = [
    "ERROR_CODES",
    "EVENT_ADAPTER",
    "PROBE_ADAPTER",
    "STATES",
    "TERMINAL",
    "TRANSITIONS",
    "AuditEvent",
    "AuditState",
    "Policy",
    "ProbeRequested",
    "Step",
    "Verdict",
    "classify",
    "decide",
    "derived_id",
    "error_text",
    "evolve",
    "explain",
    "explain_one",
    "fold",
    "format_duration",
    "judge",
    "mermaid",
    "next_status",
    "parse_duration",
    "upcast",
]
