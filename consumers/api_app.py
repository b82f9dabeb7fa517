"""Placeholder wiring for the HTTP API."""

from __future__ import annotations

from typing import Any


def build_app(runtime: Any) -> Any:
    from fastapi import FastAPI

    app = FastAPI(title="auditrec")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
