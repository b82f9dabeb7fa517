"""The check of who may reach the HTTP API: the refusals ``serve`` makes before running it
(:meth:`~consumers.runtime.settings.Settings.api_refusal`), and what an API without tokens
lets in."""

from __future__ import annotations

from consumers.operations.doctor.report import Check
from consumers.runtime.settings import Settings

__all__ = ["check_api"]


async def check_api(settings: Settings) -> Check:
    name = "api"
    refusal = settings.api_refusal()
    if refusal is not None:
        return Check(name, False, "`serve` refuses to run the API", refusal, refused=True)
    tokens = settings.api_token_specs()
    if tokens:
        return Check(name, True, f"{len(tokens)} token(s) on {settings.api_host}")
    hosts = ", ".join(sorted(settings.allowed_hosts()))
    return Check(
        name, True, f"open (no tokens) on {settings.api_host}; Host must be one of {hosts}"
    )
