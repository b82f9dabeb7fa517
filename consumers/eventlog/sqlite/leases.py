"""A consumer group's lease on its topics in the embedded log: one member holds it at a time,
renews it while it polls, and releases it when it stops. Another member takes it over when it
expires, or at once when its owner's process is gone from this host.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import uuid
from collections.abc import Sequence

__all__ = ["LEASE_SECONDS", "claim", "holds", "new_owner", "release"]

LEASE_SECONDS = 15.0
_HOST = socket.gethostname()


def new_owner() -> str:
    """``host:pid:random``: the process part lets a member on the same host see it is gone."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != _HOST or not pid_text.isdigit():
        return True  # cannot tell: trust the lease's expiry
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(
    conn: sqlite3.Connection, group: str, topics: Sequence[str], owner: str, now: float
) -> bool:
    """Take or renew ``group``'s lease on all ``topics`` for ``owner`` at ``now`` (epoch
    seconds); True while it holds it. Runs inside the caller's write transaction."""
    rows = conn.execute(
        "SELECT topic, owner, expires_at FROM leases WHERE group_id = ?", (group,)
    ).fetchall()
    held = {t: (o, e) for t, o, e in rows}
    for topic in topics:
        holder, expires = held.get(topic, (None, 0.0))
        if holder not in (None, owner) and expires > now and _owner_alive(holder):
            return False
    for topic in topics:
        conn.execute(
            "INSERT INTO leases VALUES (?, ?, ?, ?) ON CONFLICT (group_id, topic) "
            "DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at",
            (group, topic, owner, now + LEASE_SECONDS),
        )
    return True


def holds(conn: sqlite3.Connection, group: str, topic: str, owner: str) -> bool:
    row = conn.execute(
        "SELECT owner FROM leases WHERE group_id = ? AND topic = ?", (group, topic)
    ).fetchone()
    return row is not None and row[0] == owner


def release(conn: sqlite3.Connection, group: str, owner: str) -> None:
    conn.execute("DELETE FROM leases WHERE group_id = ? AND owner = ?", (group, owner))
