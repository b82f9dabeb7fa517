"""Structured logs on stderr: one JSON object a line when not on a terminal (or with
``AUDITREC_LOG_FORMAT=json``), readable columns on a terminal. Libraries' own log records
(aiokafka, asyncpg, uvicorn …) go through the same renderer, and a repeated library message
is logged at most once per :data:`REPEAT_WINDOW` seconds, with the count it stood for — a
broker outage must not flood the log with one line per reconnect attempt."""

from __future__ import annotations

import logging
import sys
import time

import structlog

__all__ = ["REPEAT_WINDOW", "configure_logging"]

REPEAT_WINDOW = 30.0
_NOISY = (
    "aiokafka",
    "kafka",
    "httpx",
    "httpcore",
    "uvicorn.access",
    "asyncio",
    "posthog",
    "backoff",
)


class _RepeatFilter(logging.Filter):
    """Let a library message through once per window; count the ones held back."""

    def __init__(self, window: float = REPEAT_WINDOW) -> None:
        super().__init__()
        self.window = window
        self.seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("auditrec"):
            return True
        key = (record.name, str(record.msg))
        now = time.monotonic()
        last, held = self.seen.get(key, (0.0, 0))
        if now - last < self.window:
            self.seen[key] = (last, held + 1)
            return False
        if held:
            record.msg = f"{record.msg} (repeated {held} more times in the last {self.window:g}s)"
        self.seen[key] = (now, 0)
        if len(self.seen) > 10_000:
            self.seen.clear()
        return True


def configure_logging(level: str = "INFO", fmt: str = "auto") -> None:
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    handler.addFilter(_RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for noisy in _NOISY:  # the libraries' chatter below WARNING only when DEBUG is asked for
        quiet = numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
        logging.getLogger(noisy).setLevel(quiet)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
