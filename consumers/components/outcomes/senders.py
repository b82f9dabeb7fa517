"""How an entry of the outcome feed leaves: a signed webhook, or a message on a Cloudflare Queue.

A sender takes a batch of entries and says, for each, ``None`` (delivered) or why not. A webhook
sends one entry a request, several audits at once; a queue sends up to 100 entries a request,
in order, all or none.

**Webhooks** follow the Standard Webhooks scheme, signed with the official ``standardwebhooks``
package: ``webhook-id`` is the entry's id, ``webhook-timestamp`` the time of this attempt, and
``webhook-signature`` ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``. The body is the entry's
JSON, the same bytes on every attempt. Any 2xx answer is a delivery; another status, no answer
within the timeout (the whole answer, however slowly it trickles), or a failed connection is
not. Redirects are not followed (a receiver that
moved answers 3xx: a failure an operator sees, never a delivery to somewhere else).
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

import httpx
from standardwebhooks.webhooks import Webhook

from consumers.workflows.queues import QueueClient, QueueFailure
from statemachine.longlived import LongLived

__all__ = ["QueueSender", "Sender", "Sent", "WebhookSender"]


class Sent(Protocol):
    """What a sender reads of an entry."""

    @property
    def outcome_id(self) -> str: ...

    @property
    def body(self) -> str: ...


class Sender(LongLived, ABC):
    batch: int
    """Entries one request carries."""
    concurrency: int
    """Requests in flight at once."""
    deadline: float
    """The longest one send takes (seconds)."""

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    @abstractmethod
    async def send(self, entries: Sequence[Sent]) -> list[str | None]:
        """For each of ``entries``, in order: ``None`` once delivered, else why not."""


class WebhookSender(Sender):
    batch = 1
    concurrency = 16

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self.signer = Webhook(secret)
        self.timeout = self.deadline = timeout
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:  # no secret, no query here
        return f"WebhookSender({self.url.split('?')[0]!r})"

    async def start(self) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                transport=self._transport,
                follow_redirects=False,
                limits=httpx.Limits(max_connections=self.concurrency),
                headers={"User-Agent": "auditrec", "Content-Type": "application/json"},
            )

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def headers(self, entry: Sent, at: datetime) -> dict[str, str]:
        return {
            "webhook-id": entry.outcome_id,
            "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": self.signer.sign(entry.outcome_id, at, entry.body),
        }

    async def send(self, entries: Sequence[Sent]) -> list[str | None]:
        return [await self._post(entry) for entry in entries]

    async def _post(self, entry: Sent) -> str | None:
        if self._client is None:
            return "the webhook sender is not started"
        headers = self.headers(entry, datetime.now(UTC))
        try:
            async with asyncio.timeout(self.timeout):  # the whole answer, not each read
                response = await self._client.post(
                    self.url, content=entry.body.encode(), headers=headers
                )
        except (httpx.TimeoutException, TimeoutError):
            return f"no answer within {self.timeout:g}s"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {str(exc)[:200]}"
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"


class QueueSender(Sender):
    batch = 100
    concurrency = 1

    def __init__(self, client: QueueClient, *, deadline: float = 10.0) -> None:
        self.client = client
        self.deadline = deadline  # the client's own timeout

    async def start(self) -> None:
        await self.client.start()

    async def stop(self) -> None:
        await self.client.stop()

    async def send(self, entries: Sequence[Sent]) -> list[str | None]:
        answer = await self.client.send([json.loads(e.body) for e in entries])
        if isinstance(answer, QueueFailure):
            status = f" (HTTP {answer.http_status})" if answer.http_status else ""
            why: str | None = f"{answer.reason}{status}: {answer.detail[:200]}"
            return [why] * len(entries)
        return [None] * len(entries)
