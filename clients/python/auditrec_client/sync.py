"""The synchronous client: one ``httpx.Client`` (a connection pool) for its lifetime."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

from auditrec_client import calls
from auditrec_client.calls import RETRIED_ERRORS, AuditPage, Call
from auditrec_client.errors import Unreachable
from auditrec_client.events import Event
from auditrec_client.retry import RETRIED_STATUSES, Retry

__all__ = ["AuditrecClient"]

log = logging.getLogger("auditrec_client")
USER_AGENT = "auditrec-client-python/0.1"


class AuditrecClient:
    """auditrec's HTTP API. ``token`` is sent as ``Authorization: Bearer`` (needed when the
    server sets ``AUDITREC_API_TOKENS``); ``producer`` names this service in envelopes that do
    not name one. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        producer: str | None = None,
        retry: Retry | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.producer = producer
        self.retry = retry or Retry()
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=calls.headers(token, USER_AGENT),
            timeout=timeout,
            transport=transport,
        )

    def publish(self, *events: Event | Mapping[str, Any]) -> list[str]:
        """Publish ``events`` in one request (all or nothing); their event ids, as accepted."""
        call = calls.publish(events, self.producer)
        return calls.published_ids(self._send(call), call.json)

    def status(self, audit_id: str, *, probe: bool = True) -> dict[str, Any]:
        """The reconciled audit row; a running audit is probed on demand unless ``probe`` is
        false. Raises :class:`~auditrec_client.errors.NotFound` for an unknown audit."""
        body: dict[str, Any] = self._send(calls.status(audit_id, probe))
        return body

    def audits(
        self,
        *,
        status: str | None = None,
        project_id: str | None = None,
        error_code: str | None = None,
        older_than: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        running_longer_than: str | None = None,
        held: bool | None = None,
        q: str | None = None,
        sort: str = "started",
        order: str = "desc",
        workflow: str | None = None,
        stalled: bool | None = None,
    ) -> AuditPage:
        """One page of audits, newest first or by ``sort`` (``started``, ``ended``, ``status``,
        ``age``) and ``order``; ``q`` searches an audit id, an instance id, a project id or a
        start URL's beginning; ``running_longer_than`` selects running audits started longer
        ago (``older_than``: started longer ago, any status); ``held`` the audits the brake
        holds (or not); ``workflow`` the audits of a workflow (of the default one, those
        naming none too); ``stalled`` those with a stall verdict recorded (or not). The page
        has ``total``, ``next_cursor`` and ``prev_cursor``."""
        call = calls.audits(
            status=status,
            project_id=project_id,
            error_code=error_code,
            older_than=older_than,
            limit=limit,
            cursor=cursor,
            running_longer_than=running_longer_than,
            held=held,
            q=q,
            sort=sort,
            order=order,
            workflow=workflow,
            stalled=stalled,
        )
        return calls.page(self._send(call))

    def replay(self, audit_id: str) -> dict[str, Any]:
        """The audit's history: each event, the state before and after, the rule that fired."""
        body: dict[str, Any] = self._send(calls.replay(audit_id))
        return body

    def _send(self, call: Call) -> Any:
        attempts = self.retry.attempts
        for attempt in range(1, attempts + 1):
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, json=call.json
                )
            except RETRIED_ERRORS as exc:
                if attempt == attempts:
                    raise Unreachable(
                        f"{call.method} {call.path}: no answer after {attempts} attempt(s): "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                wait = self.retry.delay(attempt)
                log.info("retrying %s %s in %.2fs: %r", call.method, call.path, wait, exc)
                time.sleep(wait)
                continue
            if response.status_code in RETRIED_STATUSES and attempt < attempts:
                wait = self.retry.delay(attempt, response.headers.get("retry-after"))
                log.info(
                    "retrying %s %s in %.2fs: %d",
                    call.method,
                    call.path,
                    wait,
                    response.status_code,
                )
                time.sleep(wait)
                continue
            return calls.read(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AuditrecClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
