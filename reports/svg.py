"""Inline SVG charts of the run report, built from numbers and escaped text only (no script, no network)."""

from __future__ import annotations

from html import escape

from markupsafe import Markup

CATEGORY_COLORS = {
    "gemm": "#3182bd", "attention": "#e6550d", "moe": "#31a354", "communication": "#d62728",
    "norm": "#9467bd", "activation": "#8c564b", "rope": "#e377c2", "quantize": "#7f7f7f",
    "sampling": "#bcbd22", "elementwise": "#17becf", "reduction": "#aec7e8", "memory": "#ffbb78",
    "convolution": "#98df8a", "embedding": "#ff9896", "other": "#c7c7c7",
}


def color(category: str | None) -> str:
    return CATEGORY_COLORS.get(category or "other", "#c7c7c7")


def share_bars(rows: list, width: int = 520) -> Markup:
    """Horizontal bars: one per (label, share) row (objects with .category and .share)."""
    bar_h, gap, label_w = 16, 4, 120
    height = len(rows) * (bar_h + gap) + gap
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="chart share-bars" width="{width}" height="{height}" '
             f'role="img" aria-label="category shares">')]
    for i, row in enumerate(rows):
        y = gap + i * (bar_h + gap)
        w = max(0.0, (width - label_w - 60) * (row.share or 0))
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end" font-size="12">{escape(row.category)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color(row.category)}">'
                     f'<title>{escape(row.category)}: {100 * (row.share or 0):.1f} %</title></rect>'
                     f'<text x="{label_w + w + 4:.1f}" y="{y + 12}" font-size="11">{100 * (row.share or 0):.1f} %</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def step_timeline(lanes: list, width: int = 900) -> Markup:
    """One lane per stream of one step; critical-path activities outlined in black."""
    if not lanes:
        return Markup("")
    start = min(a.start_ns for lane in lanes for a in lane.activities)
    end = max(a.end_ns for lane in lanes for a in lane.activities)
    span = max(1, end - start)
    lane_h, label_w = 22, 110
    height = len(lanes) * (lane_h + 6) + 24
    scale = (width - label_w - 10) / span
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="chart step-timeline" width="{width}" '
             f'height="{height}" role="img" aria-label="per-stream timeline of one step">')]
    for i, lane in enumerate(lanes):
        y = 6 + i * (lane_h + 6)
        label = escape(lane.label) + (" ★" if lane.critical else "")
        parts.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" font-size="12">{label}</text>')
        for a in lane.activities:
            x = label_w + (a.start_ns - start) * scale
            w = max(0.5, (a.end_ns - a.start_ns) * scale)
            stroke = ' stroke="#000" stroke-width="1.5"' if a.critical else ""
            parts.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{lane_h}" fill="{color(a.category)}"'
                         f'{stroke}><title>{escape(a.name)} ({escape(a.category)}, '
                         f'{(a.end_ns - a.start_ns) / 1e3:.1f} µs)</title></rect>')
    parts.append(f'<text x="{label_w}" y="{height - 6}" font-size="11">0</text>'
                 f'<text x="{width - 10}" y="{height - 6}" font-size="11" text-anchor="end">{span / 1e3:.1f} µs</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def layer_strip(positions: list, width: int = 900) -> Markup:
    """The kernels of one layer in order, as boxes sized by median time."""
    total = sum(p.median_ns or 0 for p in positions)
    if not positions or total <= 0:
        return Markup("")
    x, parts = 0.0, [(f'<svg xmlns="http://www.w3.org/2000/svg" class="chart layer-strip" width="{width}" height="30" '
                     f'role="img" aria-label="layer pattern">')]
    for p in positions:
        w = width * (p.median_ns or 0) / total
        parts.append(f'<rect x="{x:.2f}" y="2" width="{max(w, 0.5):.2f}" height="24" fill="{color(p.category)}" '
                     f'stroke="#fff"><title>{p.position}: {escape(p.name)} ({escape(p.category)}, '
                     f'{(p.median_ns or 0) / 1e3:.1f} µs)</title></rect>')
        x += w
    parts.append("</svg>")
    return Markup("".join(parts))
