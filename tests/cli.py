"""The command line as the tests run it: through its entry function in this process
(:func:`run`), or as a real process (:func:`run_process`) where the process boundary is what is
tested — signals, exit codes at start-up, a serve another command talks to.

Both take the environment a real process would get and give a
:class:`subprocess.CompletedProcess`, so a test can switch between them freely. In-process
runs save an interpreter start each; they leave this process's logging as it was.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import structlog
from click.testing import CliRunner

__all__ = ["AUDITREC", "run", "run_process"]

AUDITREC = str(Path(sys.executable).with_name("auditrec"))


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """The CLI configures logging for itself; put this process's back afterwards."""
    loggers = [
        logging.getLogger(),
        *(logging.getLogger(n) for n in logging.root.manager.loggerDict),
    ]
    kept = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    config = structlog.get_config()
    try:
        yield
    finally:
        for lg, handlers, level, propagate in kept:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate
        structlog.configure(**config)


def run(
    *args: str, env: Mapping[str, str], input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``auditrec ARGS`` through :func:`consumers.cli.main.main`, in this process, with the
    environment ``env`` (as a process started with it would see: ``AUDITREC_*`` variables not
    in ``env`` are unset for the run)."""
    from consumers.cli.main import main

    overlay: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith("AUDITREC_") and k not in env
    }
    overlay.update({k: v for k, v in env.items() if os.environ.get(k) != v})
    runner = CliRunner()
    with _logging_kept():
        result = runner.invoke(main, list(args), input=input, env=overlay, catch_exceptions=True)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["auditrec", *args], result.exit_code, result.stdout, stderr)


def run_process(
    *args: str, env: Mapping[str, str], input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``auditrec ARGS`` as a real process."""
    return subprocess.run(
        [AUDITREC, *args],
        env=dict(env),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
