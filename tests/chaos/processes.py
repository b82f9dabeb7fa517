"""The processes of a chaos run: ``auditrec serve`` slots and the test services.

A :class:`ServeSlot` is one ``auditrec serve`` (every component) with an identity of its own
(``AUDITREC_INSTANCE_ID=chaos-<n>``) and an API port of its own; :meth:`ServeSlot.kill`
SIGKILLs it and :meth:`ServeSlot.start` starts it again under the same identity. Its output
goes to ``serve-<n>.log``, one run after another.

:func:`restartable` and :func:`restart_service` restart the broker or the database with
``scripts/services.sh <service>-restart``, as ``tests/e2e/test_faults.py`` does: only a
service that script started can be restarted.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = [
    "AUDITREC",
    "ROOT",
    "ServeSlot",
    "ensure_services_up",
    "restart_service",
    "restartable",
    "run_cli",
]

AUDITREC = str(Path(sys.executable).with_name("auditrec"))
ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts/services.sh"


def run_cli(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    """Run ``auditrec ARGS``; its output, or an AssertionError with the end of it."""
    done = subprocess.run(
        [AUDITREC, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (
        f"auditrec {' '.join(args)}: exit {done.returncode}\n" + (done.stdout + done.stderr)[-3000:]
    )
    return done.stdout


class ServeSlot:
    def __init__(self, slot: int, env: dict[str, str], port: int, log_dir: Path) -> None:
        self.slot = slot
        self.identity = f"chaos-{slot}"
        self.port = port
        self.env = {
            **env,
            "AUDITREC_INSTANCE_ID": self.identity,
            "AUDITREC_API_HOST": "127.0.0.1",
            "AUDITREC_API_PORT": str(port),
        }
        self.log_path = log_dir / f"serve-{slot}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self.starts = 0
        self.exits: list[int] = []  # exit codes of runs that ended on their own

    def start(self) -> float:
        """Start ``auditrec serve``; the monotonic time it was started."""
        assert not self.running(), f"{self.identity} is already running"
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} of {self.identity}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [AUDITREC, "serve"], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        self.starts += 1
        return time.monotonic()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exited(self) -> int | None:
        """The exit code when the process ended without being told to (a crash)."""
        if self.process is None:
            return None
        return self.process.poll()

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.kills += 1

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit code (SIGKILL after ``timeout``: then an AssertionError)."""
        if self.process is None or self.process.poll() is not None:
            return 0 if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise AssertionError(
                f"{self.identity} did not stop within {timeout:g}s of SIGTERM"
            ) from None

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def restartable(service: str) -> bool:
    """Whether ``scripts/services.sh`` started ``service`` (so it may restart it)."""
    status = subprocess.run(
        ["bash", str(SERVICES), "status"], capture_output=True, text=True, timeout=60
    )
    line = next((ln for ln in status.stdout.splitlines() if ln.startswith(f"{service}:")), "")
    return "(ours" in line


def restart_service(service: str) -> float:
    """Stop ``service`` and start it again on the same data; how long it was down for us
    (seconds, until the script saw it ready)."""
    began = time.monotonic()
    done = subprocess.run(
        ["bash", str(SERVICES), f"{service}-restart"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{service}-restart failed:\n{done.stderr[-2000:]}"
    return time.monotonic() - began


def ensure_services_up() -> None:
    """Leave the services up, whatever happened (``scripts/services.sh up`` is idempotent)."""
    subprocess.run(["bash", str(SERVICES), "up"], capture_output=True, timeout=600)
