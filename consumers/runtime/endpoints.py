"""Where the outcome feed goes: ``AUDITREC_WEBHOOK_URLS`` and ``AUDITREC_OUTCOME_QUEUE_ID``.

``AUDITREC_WEBHOOK_URLS`` lists webhook endpoints separated by commas or whitespace, each a
``http://`` or ``https://`` URL, optionally followed by ``#TYPE|TYPE…`` to receive only those
outcome types (the fragment is never sent). Each endpoint has a stable name, ``webhook-`` and the
first 8 hex digits of the SHA-256 of its URL (without the fragment): the name of its consumer
group and of its parked deliveries, so changing an endpoint's filter keeps its place in the feed
and changing its URL makes a new endpoint. An outcome queue is named ``queue-<queue id>``.

A malformed entry is refused naming its position and what is wrong; a URL is never shown with
its query or credentials (:attr:`Endpoint.target`), which may hold a receiver's token.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from statemachine.errors import ConfigError
from statemachine.outcomes import OUTCOME_TYPES

__all__ = ["Endpoint", "parse_webhook_urls", "queue_endpoint"]

_SEPARATORS: Final = re.compile(r"[,\s]+")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One destination of the outcome feed."""

    name: str
    kind: Literal["webhook", "queue"]
    address: str
    """The webhook's URL as sent to (without the fragment), or the queue's id."""
    types: frozenset[str] | None = None
    """The outcome types it receives (``None``: all)."""

    @property
    def target(self) -> str:
        """The destination as shown to operators: scheme, host and path only."""
        if self.kind == "queue":
            return f"queue {self.address}"
        parts = urlsplit(self.address)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    def wants(self, kind: str) -> bool:
        return self.types is None or kind in self.types


def parse_webhook_urls(text: str) -> tuple[Endpoint, ...]:
    """``AUDITREC_WEBHOOK_URLS`` read; a malformed entry is a :class:`ConfigError`."""
    endpoints: dict[str, Endpoint] = {}
    for n, entry in enumerate((e for e in _SEPARATORS.split(text) if e), start=1):
        url, _, fragment = entry.partition("#")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"AUDITREC_WEBHOOK_URLS: entry {n} is not an http:// or https:// URL with a host"
            )
        types: frozenset[str] | None = None
        if fragment:
            wanted = [t for t in fragment.split("|") if t]
            unknown = [t for t in wanted if t not in OUTCOME_TYPES]
            if unknown or not wanted:
                raise ConfigError(
                    f"AUDITREC_WEBHOOK_URLS: entry {n} filters by unknown outcome type(s) "
                    f"{', '.join(repr(t[:40]) for t in unknown) or '(none)'}; "
                    f"choose from {', '.join(OUTCOME_TYPES)}"
                )
            types = frozenset(wanted)
        name = "webhook-" + hashlib.sha256(url.encode()).hexdigest()[:8]
        if name in endpoints:
            raise ConfigError(f"AUDITREC_WEBHOOK_URLS: entry {n} repeats an earlier URL")
        endpoints[name] = Endpoint(name, "webhook", url, types)
    return tuple(endpoints.values())


def queue_endpoint(queue_id: str) -> Endpoint:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", queue_id):
        raise ConfigError("AUDITREC_OUTCOME_QUEUE_ID: not a queue id (letters, digits, - and _)")
    return Endpoint(f"queue-{queue_id}", "queue", queue_id)
