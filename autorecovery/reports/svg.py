"""Horizontal bar charts as inline SVG for the report page (PURE: strings in, markup out).

Drawn by this module, not a plotting library: the page stays one self-contained file that needs no
script and fetches nothing (no CDN), and the chart's text (labels, values) is text a browser, a screen
reader and a test can read. Each panel has its own linear scale starting at 0 and every bar carries its
value as text, so a small value still reads beside a large one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

#: pixels: a row, the label column, a panel's bar area, the space for a bar's value text
ROW_H, LABEL_W, PANEL_W, VALUE_W, HEAD_H = 22, 190, 170, 90, 40


@dataclass(frozen=True)
class Panel:
    """One column of bars: its heading, its colour, and per row ``(value, text)`` — ``value`` sets the
    bar's length on the panel's own scale (None: no bar), ``text`` is written after the bar.
    ``cap``: values above it are drawn at full length and marked with an arrow (a long tail that would
    squash every other bar)."""

    heading: str
    colour: str
    cells: Sequence[tuple[float | None, str]]
    cap: float | None = None


def bars(title: str, labels: Sequence[str], panels: Sequence[Panel]) -> Markup:
    """An ``<svg>`` with one row per label and one panel per :class:`Panel` (same row order).

    Raises:
        ValueError: a panel's cell count differs from the number of labels (names the panel).
    """
    for p in panels:
        if len(p.cells) != len(labels):
            raise ValueError(f"chart {title!r}: panel {p.heading!r} has {len(p.cells)} cells for {len(labels)} rows")
    width = LABEL_W + len(panels) * (PANEL_W + VALUE_W)
    height = HEAD_H + ROW_H * len(labels) + 6
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="system-ui, sans-serif" font-size="12">',
           f"<title>{escape(title)}</title>"]
    for i, label in enumerate(labels):
        y = HEAD_H + i * ROW_H
        if i % 2 == 0:
            out.append(f'<rect x="0" y="{y}" width="{width}" height="{ROW_H}" fill="#f7f7f7"/>')
        out.append(f'<text x="{LABEL_W - 8}" y="{y + 15}" text-anchor="end">{escape(label)}</text>')
    for k, p in enumerate(panels):
        x0 = LABEL_W + k * (PANEL_W + VALUE_W)
        out.append(f'<text x="{x0}" y="16" font-weight="bold">{escape(p.heading)}</text>')
        out.append(f'<line x1="{x0}" y1="{HEAD_H - 4}" x2="{x0}" y2="{height - 4}" stroke="#999"/>')
        values = [v for v, _t in p.cells if v is not None and v > 0]
        top = min(max(values), p.cap) if values and p.cap else (max(values) if values else 0.0)
        for i, (v, text) in enumerate(p.cells):
            y = HEAD_H + i * ROW_H
            w = 0.0
            if v is not None and v > 0 and top > 0:
                w = max(1.5, PANEL_W * min(v, top) / top)
                out.append(f'<rect x="{x0}" y="{y + 4}" width="{w:.1f}" height="{ROW_H - 8}" fill="{p.colour}"/>')
                if p.cap and v > p.cap:
                    out.append(f'<text x="{x0 + w - 12:.1f}" y="{y + 15}" fill="#fff">&#x25B6;</text>')
            out.append(f'<text x="{x0 + w + 4:.1f}" y="{y + 15}">{escape(text)}</text>')
    out.append("</svg>")
    return Markup("".join(out))
