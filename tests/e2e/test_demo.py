"""``auditrec demo`` (``make demo``) as a user runs it: the sweep's story, then a death the
event subscription's queue reports, detected in seconds."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.e2e.serving import AUDITREC


def test_the_demo_tells_its_story_and_detects_a_death_from_the_queue_in_seconds(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}

    done = subprocess.run(
        [AUDITREC, "demo", "--dir", str(tmp_path / "demo")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())  # the console wraps long lines at its width
    assert "demo-finalize is now completed, overturned=True" in text
    detected = re.search(
        r"demo-live killed by OOM: detected from the event subscription in (\d+\.\d) s "
        r"\(failed, oom, reconciled_by subscription; Workflows API requests to confirm it: 1\)",
        text,
    )
    assert detected, done.stdout[-3000:]
    assert 0 < float(detected.group(1)) < 10
    pushed = re.search(
        r"the product's webhook received (\d+) signed outcomes \((.*?)\), every signature "
        r"valid; the last: demo-live failed oom",
        text,
    )
    assert pushed, done.stdout[-3000:]
    # every failure the demo made, and the overturn of demo-finalize's
    assert "audit.overturned 1" in pushed.group(2) and "audit.failed" in pushed.group(2)
    assert int(pushed.group(1)) >= 3
