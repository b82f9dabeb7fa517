"""aiokafka's errors translated at the Kafka adapters' boundary.

Every driver error (:class:`~aiokafka.errors.KafkaError`, ``OSError``, ``TimeoutError``)
becomes an :class:`~statemachine.errors.EventLogError` that says what was being done (topic,
partition, group) and keeps the driver's ``retriable`` verdict; errors that are not Kafka's
own (the network, timeouts) count as retriable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aiokafka.errors import KafkaError

from statemachine.errors import EventLogError

__all__ = ["event_log_error", "translate"]


def event_log_error(
    exc: BaseException, what: str, *, retriable: bool | None = None
) -> EventLogError:
    """``exc`` as an :class:`EventLogError` about ``what``; ``retriable`` overrides the verdict."""
    if retriable is None:
        retriable = bool(getattr(exc, "retriable", not isinstance(exc, KafkaError)))
    name = type(exc).__name__
    detail = str(exc).removeprefix(f"{name}: ")  # aiokafka's errors start with their name
    return EventLogError(
        f"Kafka: {what}: {name}: {detail}" if detail else f"Kafka: {what}: {name}",
        retriable=retriable,
    )


@contextlib.contextmanager
def translate(what: str) -> Iterator[None]:
    """Driver errors → :class:`EventLogError` with ``what`` (topic, partition, group)."""
    try:
        yield
    except EventLogError:
        raise
    except (KafkaError, OSError, TimeoutError) as exc:
        raise event_log_error(exc, what) from exc
