"""The words auditrec speaks, each defined once: audit ids, workflow statuses, error codes,
the rules that can fail an audit. Everything else (models, stores, the API, the simulator)
derives from these.
"""

from __future__ import annotations

import re
from typing import Final, Literal, get_args

__all__ = [
    "AUDIT_ID_PATTERN",
    "AUDIT_ID_RULE",
    "ERROR_CODES",
    "FAILURE_RULES",
    "HEALTHY_STATUSES",
    "HELD_ERROR_CODES",
    "LISTED_ALIVE_STATUSES",
    "OBSERVED_STATUSES",
    "STALL_STATUSES",
    "WORKFLOW_STATUSES",
    "WORKFLOW_TERMINAL_STATUSES",
    "ErrorCode",
    "FailureRule",
    "ListedAliveStatus",
    "ObservedStatus",
    "WorkflowStatus",
    "is_audit_id",
]

AUDIT_ID_PATTERN: Final = r"^[A-Za-z0-9._:-]{1,128}$"
AUDIT_ID_RULE: Final = "must be 1-128 characters of [A-Za-z0-9._:-]"
_AUDIT_ID: Final = re.compile(AUDIT_ID_PATTERN)


def is_audit_id(value: str) -> bool:
    return _AUDIT_ID.match(value) is not None


# What the Workflows API answers for an instance (REST values plus the binding's `unknown`).
WorkflowStatus = Literal[
    "queued",
    "running",
    "paused",
    "errored",
    "terminated",
    "complete",
    "waiting",
    "waitingForPause",
    "rollingBack",
    "unknown",
]
WORKFLOW_STATUSES: Final[tuple[str, ...]] = get_args(WorkflowStatus)
WORKFLOW_TERMINAL_STATUSES: Final = frozenset({"complete", "errored", "terminated"})
# Rule 7: the workflow is alive (or cannot tell); the audit keeps running.
HEALTHY_STATUSES: Final = frozenset(WORKFLOW_STATUSES) - WORKFLOW_TERMINAL_STATUSES

# The statuses a workflow's instance listing is paged through for (bulk discovery): an instance
# listed in one of them is alive, observed from the listing without a request of its own.
ListedAliveStatus = Literal["running", "queued", "waiting", "paused", "waitingForPause"]
LISTED_ALIVE_STATUSES: Final[tuple[str, ...]] = get_args(ListedAliveStatus)

# What an observation can say: an API status, or that there is no instance to ask about.
ObservedStatus = Literal[WorkflowStatus, "not_found", "not_attached"]
OBSERVED_STATUSES: Final[tuple[str, ...]] = get_args(ObservedStatus)

ErrorCode = Literal[
    "step_timeout",
    "oom",
    "cpu_limit",
    "db_error",
    "step_output_too_large",
    "workflow_internal",
    "deploy_reset",
    "instance_lost",
    "workflow_terminated",
    "finalize_lost",
    "stalled",
    "unknown",
]
ERROR_CODES: Final[tuple[str, ...]] = get_args(ErrorCode)

# The rules (DESIGN §4) that fail an audit; a reconciler decision records which one fired.
FailureRule = Literal[
    "errored", "terminated", "instance_lost", "never_attached", "finalize_lost", "stalled"
]
FAILURE_RULES: Final[tuple[str, ...]] = get_args(FailureRule)

# Decisions made from the absence of evidence, which the mass-failure brake may hold: a
# provider-side blip that answers "not found" for live instances looks like this, and so does
# a publisher that stopped publishing for all its audits at once (stalls).
HELD_ERROR_CODES: Final = frozenset({"instance_lost", "stalled"})

# Statuses of a live instance that may be stalled; a paused or sleeping instance
# (`step.sleep`, `waitForEvent`) makes no progress by design and never is.
STALL_STATUSES: Final = frozenset({"running", "queued"})
