"""``/metrics`` for a process that does not serve the API (``serve --only reconciler``): a
small HTTP server of its own on ``AUDITREC_METRICS_PORT``, in a background thread."""

from __future__ import annotations

import structlog
from prometheus_client import start_http_server

from consumers.runtime.metrics import REGISTRY

__all__ = ["serve_metrics"]

log = structlog.get_logger("auditrec")


def serve_metrics(host: str, port: int) -> bool:
    """Serve the registry at ``http://host:port/metrics``; a busy port is a warning (the
    components run all the same), port 0 serves nothing."""
    if port == 0:
        return False
    try:
        start_http_server(port, addr=host, registry=REGISTRY)
    except OSError as exc:
        log.warning(
            "metrics not served: the port is taken",
            port=port,
            error=str(exc),
            fix="set AUDITREC_METRICS_PORT to a free port (0: no metrics endpoint)",
        )
        return False
    log.info("metrics", url=f"http://{host}:{port}/metrics")
    return True
