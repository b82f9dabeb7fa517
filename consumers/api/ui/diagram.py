"""The lifecycle's state diagram as inline SVG, laid out here and drawn from the transition
table (:data:`statemachine.machine.TRANSITIONS`), with the audit's current state marked.

Server-side and self-contained: no script, no CDN, readable without JavaScript. States sit at
fixed places (the lifecycle reads left to right: nothing yet → running → completed / failed);
a state the table gains later is placed on a row below, so the drawing never drops one. Each
pair of states gets one curved arrow per direction (bent to its right, so the two directions
of a pair never overlap), labelled with its triggers; running's own triggers are listed under
its self-loop.
"""

from __future__ import annotations

import math
from collections import defaultdict
from html import escape

from statemachine.machine import INITIAL, STATES, TRANSITIONS

__all__ = ["state_svg", "transition_rows"]

WIDTH, HEIGHT = 800, 350
BOX_W, BOX_H = 120, 40
_PLACES: dict[str, tuple[float, float]] = {
    INITIAL: (80, 170),
    "running": (320, 170),
    "completed": (620, 70),
    "failed": (620, 270),
}


def _places() -> dict[str, tuple[float, float]]:
    places = dict(_PLACES)
    extra = [s for s in STATES if s not in places]
    for i, state in enumerate(extra):
        places[state] = (80 + 160 * i, HEIGHT - 30)
    return places


def transition_rows(current: str | None) -> list[dict[str, object]]:
    """The table's rows for an HTML table, each marked when it leaves ``current``."""
    return [
        {
            "source": row["source"],
            "trigger": row["trigger"],
            "dest": row["dest"],
            "conditions": ", ".join(row.get("conditions", [])),
            "note": row["note"],
            "from_current": row["source"] == current,
        }
        for row in TRANSITIONS
    ]


def _edge_point(cx: float, cy: float, dx: float, dy: float) -> tuple[float, float]:
    """Where a ray from a box's centre in direction (dx, dy) leaves the box."""
    scale = min(
        (BOX_W / 2) / abs(dx) if dx else math.inf,
        (BOX_H / 2) / abs(dy) if dy else math.inf,
    )
    return cx + dx * scale, cy + dy * scale


def state_svg(current: str | None) -> str:
    """The diagram with ``current`` (a status, or ``None``) filled in."""
    places = _places()
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in TRANSITIONS:
        label = row["trigger"] + (
            f" [{', '.join(row['conditions'])}]" if row.get("conditions") else ""
        )
        if label not in edges[(row["source"], row["dest"])]:
            edges[(row["source"], row["dest"])].append(label)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="diagram" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="state diagram">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/>'
        "</marker></defs>",
    ]
    for (source, dest), labels in edges.items():
        sx, sy = places[source]
        tx, ty = places[dest]
        if source == dest:
            out.append(_self_loop(sx, sy, labels))
            continue
        dx, dy = tx - sx, ty - sy
        length = math.hypot(dx, dy)
        ux, uy = dx / length, dy / length
        nx, ny = uy, -ux  # the right-hand normal: each direction bends its own way
        x1, y1 = _edge_point(sx, sy, ux + nx * 0.15, uy + ny * 0.15)
        x2, y2 = _edge_point(tx, ty, -ux + nx * 0.15, -uy + ny * 0.15)
        mx, my = (x1 + x2) / 2 + nx * 28, (y1 + y2) / 2 + ny * 28
        out.append(
            f'<path class="edge" d="M{x1:.0f},{y1:.0f} Q{mx:.0f},{my:.0f} {x2:.0f},{y2:.0f}" '
            'marker-end="url(#arrow)"/>'
        )
        # Labels sit outside the bend, anchored away from the arrow so they never cross it;
        # a condition goes on a line of its own.
        lx, ly = (x1 + x2) / 2 + nx * 40, (y1 + y2) / 2 + ny * 40
        if abs(ux) < 0.2:  # a vertical arrow: its label on the side it does not bend to,
            lx = (x1 + x2) / 2 - nx * 12  # where the slanted arrows' labels never reach
            nx = -nx
        anchor = "start" if nx > 0.2 else "end" if nx < -0.2 else "middle"
        lines = [part for label in labels for part in label.replace(" [", "\n[").split("\n")]
        shift = -12 * (len(lines) - 1) if ny < 0 else 0  # grow away from the arrow
        for i, line in enumerate(lines):
            out.append(
                f'<text class="edge-label" x="{lx:.0f}" y="{ly + 4 + shift + 12 * i:.0f}" '
                f'text-anchor="{anchor}">{escape(line)}</text>'
            )
    for state in STATES:
        x, y = places[state]
        mark = " current" if state == current else ""
        out.append(
            f'<g class="state{mark}" data-state="{escape(state)}">'
            f'<rect x="{x - BOX_W / 2:.0f}" y="{y - BOX_H / 2:.0f}" width="{BOX_W}" '
            f'height="{BOX_H}" rx="8"/>'
            f'<text x="{x:.0f}" y="{y + 5:.0f}" text-anchor="middle">{escape(state)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def _self_loop(x: float, y: float, labels: list[str]) -> str:
    """A loop over the state's box; its triggers are listed in the free corner at the bottom
    left (under a heading naming the loop), clear of the arrows between states."""
    top = y - BOX_H / 2
    parts = [
        f'<path class="edge" d="M{x - 25:.0f},{top:.0f} C{x - 45:.0f},{top - 55:.0f} '
        f'{x + 45:.0f},{top - 55:.0f} {x + 25:.0f},{top:.0f}" marker-end="url(#arrow)"/>'
    ]
    base = HEIGHT - 12 * (len(labels) + 1) - 4
    parts.append(
        f'<text class="edge-label loop-heading" x="20" y="{base:.0f}">'
        f"{escape(_state_at(x, y))} → itself:</text>"
    )
    for i, label in enumerate(labels, 1):
        parts.append(
            f'<text class="edge-label loop" x="28" y="{base + 12 * i:.0f}">{escape(label)}</text>'
        )
    return "".join(parts)


def _state_at(x: float, y: float) -> str:
    return next(state for state, place in _places().items() if place == (x, y))
