"""Where a ``sqlite://`` URL puts its file, as doctor shows it: the absolute path it resolves
to from this working directory, and, for a relative URL, how to write the absolute one (an
advice to run ``auditrec init`` elsewhere would create another, empty file)."""

from __future__ import annotations

from pathlib import Path

from projections.sqlite.connection import sqlite_file
from statemachine.errors import ConfigError

__all__ = ["absolute_advice", "resolved_path"]


def resolved_path(url: str) -> Path | None:
    """The absolute path of a ``sqlite://`` URL's file (``None`` for another scheme or a URL
    without a file)."""
    if not url.startswith("sqlite://"):
        return None
    try:
        return sqlite_file(url).absolute()
    except ConfigError:
        return None


def absolute_advice(url: str, variable: str) -> str | None:
    """For a relative ``sqlite:///path``: the path it resolved to from here, and the URL to
    write for the file at ``/path``; ``None`` for an absolute one (or another scheme)."""
    path = resolved_path(url)
    if path is None or sqlite_file(url).is_absolute():
        return None
    meant = "/" + str(sqlite_file(url))
    return (
        f"{variable}={url} is relative to the working directory ({Path.cwd()}), so it names "
        f"{path}; for the file at {meant} write sqlite:///{meant} (four slashes)"
    )
