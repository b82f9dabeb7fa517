"""A rule's verdict: the rule that fired, why (made only when read), and the failure to
record if any. :mod:`statemachine.rules` gives one per judged observation."""

from __future__ import annotations

from collections.abc import Callable

from statemachine.events import AuditFailedData

__all__ = ["Verdict"]


class Verdict:
    """``rule`` names what fired; ``failure`` is set when the audit must fail; ``reason`` says
    why, with its numbers.

    The reason is made when it is first read (``reason`` may be given as a function that makes
    it): most verdicts ("running, age 31m → healthy, no change") are only counted, and their
    one reader is a debug log line, off in production. Replay, explain and backtests read it;
    what they read is the same text either way."""

    __slots__ = ("_failure", "_reason", "_rule")

    def __init__(
        self,
        rule: str,
        reason: str | Callable[[], str],
        failure: AuditFailedData | None = None,
    ) -> None:
        self._rule = rule
        self._reason = reason
        self._failure = failure

    @property
    def rule(self) -> str:
        return self._rule

    @property
    def failure(self) -> AuditFailedData | None:
        return self._failure

    @property
    def reason(self) -> str:
        reason = self._reason
        if not isinstance(reason, str):
            reason = self._reason = reason()  # made once; the verdict is immutable
        return reason

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Verdict):
            return NotImplemented
        return (self.rule, self.reason, self.failure) == (other.rule, other.reason, other.failure)

    def __hash__(self) -> int:
        return hash((self.rule, self.reason, self.failure))

    def __repr__(self) -> str:
        return f"Verdict(rule={self.rule!r}, reason={self.reason!r}, failure={self.failure!r})"
