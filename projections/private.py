"""Files auditrec keeps are its own: directories it makes are ``0700`` and files ``0600``,
whatever the umask (the record, its history and its budget are nobody else's to read).

A directory that was there before is left as it was (it may be the user's home, or ``/var/lib``),
except auditrec's own data directory (:data:`DATA_DIR`, where the embedded backends keep their
files by default), which is made private too: a version before this one made it ``0755``.
Users: the SQLite connection (the embedded projection store and event log), the demo.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import structlog

__all__ = ["DATA_DIR", "DIR_MODE", "FILE_MODE", "private_dirs", "private_file"]

DIR_MODE = 0o700
FILE_MODE = 0o600
DATA_DIR = ".auditrec"

log = structlog.get_logger("auditrec")


def private_dirs(directory: Path) -> None:
    """Make ``directory`` and its missing parents, each ``0700``; tighten it to ``0700`` also
    when it is auditrec's own data directory and already there."""
    missing: list[Path] = []
    here = directory
    while not here.exists():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another process, which makes it private itself
        _chmod(path, DIR_MODE)  # mkdir's mode is cut by the umask; this is not
    if directory.name == DATA_DIR and directory not in missing:
        _chmod(directory, DIR_MODE)


def private_file(path: Path, *companions: str) -> None:
    """Create ``path`` ``0600`` if missing (before any library opens it with its own mode), and
    make it and its existing companions (``path`` with each suffix, e.g. SQLite's ``-wal``
    and ``-shm``) ``0600``."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    for each in (path, *(path.with_name(path.name + suffix) for suffix in companions)):
        if each.exists():
            _chmod(each, FILE_MODE)


def _chmod(path: Path, mode: int) -> None:
    if path.stat().st_mode & 0o777 == mode:
        return
    try:
        os.chmod(path, mode)
    except OSError as exc:  # not ours to change: say so, and go on
        log.warning("cannot make private", path=str(path), mode=oct(mode), error=str(exc))
