"""Inline SVG charts of the run report, built from numbers and escaped text only (no script, no network)."""

from __future__ import annotations

import math
from html import escape

from markupsafe import Markup
from tracehouse.warehouse.rules import CATEGORIES

# one colour per category of the vocabulary (warehouse.rules.CATEGORIES, its one definition), in its order:
# gemm, attention, moe, communication, norm, activation, rope, quantize, sampling, elementwise, reduction,
# memory, convolution, embedding, other
PALETTE = (
    "#3182bd",
    "#e6550d",
    "#31a354",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c7c7c7",
)
if len(PALETTE) != len(CATEGORIES):
    raise ImportError(f"reports.svg: {len(PALETTE)} colours for {len(CATEGORIES)} categories")
CATEGORY_COLORS = dict(zip(CATEGORIES, PALETTE))


def color(category: str | None) -> str:
    return CATEGORY_COLORS.get(category or "other", "#c7c7c7")


def share_bars(rows: list, width: int = 520) -> Markup:
    """Horizontal bars: one per (label, share) row (objects with .category and .share)."""
    bar_h, gap, label_w = 16, 4, 120
    height = len(rows) * (bar_h + gap) + gap
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart share-bars" width="{width}" height="{height}" '
            f'role="img" aria-label="category shares">'
        )
    ]
    for i, row in enumerate(rows):
        y = gap + i * (bar_h + gap)
        w = max(0.0, (width - label_w - 60) * (row.share or 0))
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end" font-size="12">{escape(row.category)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color(row.category)}">'
            f"<title>{escape(row.category)}: {100 * (row.share or 0):.1f} %</title></rect>"
            f'<text x="{label_w + w + 4:.1f}" y="{y + 12}" font-size="11">{100 * (row.share or 0):.1f} %</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


GAP_COLORS = {"host_bound": "#fdae6b", "sync_wait": "#fb6a4a", "other": "#c6dbef"}
GAP_MEANING = {
    "host_bound": "host-bound (the GPU waited for the launch)",
    "sync_wait": "sync wait (a blocking sync or event)",
    "other": "other (queued, dependency)",
}
# the critical path's own lane and palette: shades of grey, none of them a category's colour, so a path kind
# (the host's `cpu`) never reads as a category (attention); its GPU segments are `gpu` here, their category
# in the hover text
PATH_COLORS = {
    "gpu": "#1f1f1f",
    "cpu": "#5c5c5c",
    "launch_delay": "#8a8a8a",
    "sync_wait": "#ffffff",  # drawn outlined (PATH_OUTLINED): white on the path's dark grey
    "gpu_queued": "#b3b3b3",
    "kernel_gap": "#d6d6d6",
}
# a lane with no activity of the step: shaded on every lane, under the device's idle causes
LANE_IDLE = "#eeeeee"
PATH_OUTLINED = {"sync_wait"}
OTHER_STEPS = (
    "#a3a3c2"  # another step's activity inside this step's wall (the wall bar's "other steps' work")
)
# entries of the timeline's legend (categories, the idle causes); the critical path has its own
MAX_LEGEND = 8
OTHER_COLOR = CATEGORY_COLORS["other"]


def lane_categories(step) -> dict[str, str]:
    """The colour of each category drawn in the step's lanes: the ones with the most time their own, the rest
    grouped as `other` (so that the legend, with the idle causes, has at most MAX_LEGEND entries)."""
    time: dict[str, int] = {}
    for lane in step.timeline:
        for a in lane.activities:
            time[a.category] = time.get(a.category, 0) + (a.end_ns - a.start_ns)
    causes = len({g["class"] for g in step.gap_spans}) + any(lane.others for lane in step.timeline)
    room = max(1, MAX_LEGEND - causes)
    ranked = sorted(time, key=lambda c: (-time[c], c))
    if len(ranked) > room:
        ranked = [c for c in ranked if c != "other"][: room - 1]
    return {c: color(c) if c in ranked else OTHER_COLOR for c in time}


def _lane_idle(activities, origin: int, end: int) -> list[tuple[int, int]]:
    """The spans of [origin, end] in which a lane has none of its activities."""
    spans, at = [], origin
    for a in sorted(activities, key=lambda a: a.start_ns):
        if a.start_ns > at:
            spans.append((at, a.start_ns))
        at = max(at, a.end_ns)
    if end > at:
        spans.append((at, end))
    return spans


def _clip(a, origin: int, end: int):
    """The activity cut to [origin, end] (an activity of another step may begin before this step's wall)."""
    start, stop = max(a.start_ns, origin), min(a.end_ns, end)
    return None if stop <= start else type(a)(a.name, a.category, start, stop, a.critical)


def _merged(activities, x, group: str | None = None) -> list[list]:
    """Boxes of a lane: neighbours of one category (or all, under `group`) less than a pixel apart as one box,
    [x0, x1, category, first name, count, last end ns, first start ns]."""
    merged: list[list] = []
    for a in sorted(activities, key=lambda a: a.start_ns):
        ax, ae, cat = x(a.start_ns), x(a.end_ns), group or a.category
        if merged and merged[-1][2] == cat and ax - merged[-1][1] < 1.0:
            merged[-1][1] = max(merged[-1][1], ae)
            merged[-1][4] += 1
            merged[-1][5] = max(merged[-1][5], a.end_ns)
            continue
        merged.append([ax, ae, cat, a.name, 1, a.end_ns, a.start_ns])
    return merged


def nice_ticks(span: float, target: int = 10) -> list[float]:
    """Round tick values (1, 2, 5 × 10^k) from 0 to span, about `target` of them."""
    if span <= 0:
        return [0.0]
    raw = span / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(span / step) + 1)]


def _tick_label(ms: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{ms:.{decimals}f}"


def step_timeline(step, width: int = 1340) -> Markup:
    """The chosen step, every stream a lane, on one ms axis with ticks from the step's start; idle gaps of
    the device shaded by cause behind the lanes; the critical path as its own lane under them, by
    segment kind (GPU segments in their category's colour). Legends for categories, causes and kinds."""
    lanes = step.timeline
    acts = [a for lane in lanes for a in lane.activities]
    if not acts:
        return Markup("")
    origin = min([a.start_ns for a in acts] + [step.wall_start_ns])
    end = max([a.end_ns for a in acts] + [step.wall_end_ns])
    span = max(1, end - origin)
    label_w, lane_h, pad = 150, 20, 5
    plot_w = width - label_w - 12
    scale = plot_w / span
    lanes_h = (len(lanes) + (1 if step.path_segments else 0)) * (lane_h + pad)
    axis_y = 8 + lanes_h + 4
    height = axis_y + 34

    def x(ns: int) -> float:
        return label_w + (ns - origin) * scale

    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart step-timeline" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="per-stream timeline of rank {step.rank}, step {step.step}">'
        )
    ]
    fills = lane_categories(step)
    for i, lane in enumerate(lanes):  # behind everything: each lane's own idle time
        y = 8 + i * (lane_h + pad)
        for a, b in _lane_idle(lane.activities, origin, end):
            if (b - a) * scale >= 0.5:
                parts.append(
                    f'<rect class="lane-idle" x="{x(a):.2f}" y="{y}" width="{(b - a) * scale:.2f}" '
                    f'height="{lane_h}" fill="{LANE_IDLE}"><title>{escape(lane.label)} idle: '
                    f"{(b - a) / 1e6:.3f} ms</title></rect>"
                )
    for g in step.gap_spans:  # behind everything: the device idle, by cause
        gx, gw = x(g["start_ns"]), max(0.6, (g["end_ns"] - g["start_ns"]) * scale)
        parts.append(
            f'<rect class="gap" x="{gx:.2f}" y="4" width="{gw:.2f}" height="{lanes_h:.0f}" '
            f'fill="{GAP_COLORS.get(g["class"], "#ddd")}" fill-opacity="0.45"><title>idle '
            f"{escape(g['class'])}: {(g['end_ns'] - g['start_ns']) / 1e6:.3f} ms before "
            f"{escape(g['next_name'] or '')}</title></rect>"
        )
    for i, lane in enumerate(lanes):
        y = 8 + i * (lane_h + pad)
        label = escape(lane.label) + (" ★" if lane.critical else "")
        parts.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" font-size="12">{label}</text>')
        clipped = [_clip(a, origin, end) for a in lane.others]
        for ax, ae, cat, name, n, last_end, first_start in _merged(
            [a for a in clipped if a], x, "other steps"
        ):
            more = f" and {n - 1} more" if n > 1 else ""
            parts.append(
                f'<rect class="other-steps" x="{ax:.2f}" y="{y + 4}" width="{max(0.6, ae - ax):.2f}" '
                f'height="{lane_h - 8}" fill="{OTHER_STEPS}"><title>{escape(name)}{more} (another step\'s work, '
                f"{(last_end - first_start) / 1e3:.1f} µs)</title></rect>"
            )
        for ax, ae, cat, name, n, last_end, first_start in _merged(lane.activities, x):
            more = f" and {n - 1} more {escape(cat)}" if n > 1 else ""
            parts.append(
                f'<rect x="{ax:.2f}" y="{y}" width="{max(0.6, ae - ax):.2f}" height="{lane_h}" '
                f'fill="{fills.get(cat, OTHER_COLOR)}"><title>{escape(name)}{more} ({escape(cat)}, '
                f"{(last_end - first_start) / 1e3:.1f} µs)</title></rect>"
            )
    if step.path_segments:
        y = 8 + len(lanes) * (lane_h + pad)
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" font-size="12" '
            f'font-weight="bold">critical path</text>'
        )
        for seg in step.path_segments:
            fill = PATH_COLORS.get(seg["kind"], "#444")
            outline = ' stroke="#000" stroke-width="0.8"' if seg["kind"] in PATH_OUTLINED else ""
            sx, sw = x(seg["start_ns"]), max(0.6, (seg["end_ns"] - seg["start_ns"]) * scale)
            parts.append(
                f'<rect x="{sx:.2f}" y="{y + 3}" width="{sw:.2f}" height="{lane_h - 6}" fill="{fill}"{outline}>'
                f"<title>{escape(seg['kind'])}{' (' + escape(seg['category']) + ')' if seg.get('category') else ''}: "
                f"{escape(seg['name'] or '')} "
                f"({(seg['end_ns'] - seg['start_ns']) / 1e3:.1f} µs)</title></rect>"
            )
    ticks = nice_ticks(span / 1e6)
    tick_step = ticks[1] if len(ticks) > 1 else 1.0
    parts.append(f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + plot_w}" y2="{axis_y}" stroke="#555"/>')
    for t in ticks:
        tx = label_w + t * 1e6 * scale
        parts.append(
            f'<line x1="{tx:.1f}" y1="{axis_y}" x2="{tx:.1f}" y2="{axis_y + 5}" stroke="#555"/>'
            f'<text x="{tx:.1f}" y="{axis_y + 17}" font-size="11" text-anchor="middle">'
            f"{_tick_label(t, tick_step)}</text>"
        )
    parts.append(
        f'<text x="{label_w - 8}" y="{axis_y + 17}" font-size="11" text-anchor="end">ms from step start'
        f"</text></svg>"
    )
    return Markup("".join(parts))


def timeline_legend(step) -> Markup:
    """What the colours of step_timeline mean, in two legends: the lanes' (the categories drawn, minor ones
    grouped as `other`, and the device's idle causes: at most MAX_LEGEND entries; a lane's own idle time is
    the light grey the page's caption names), and the
    critical path's kinds in their own palette."""
    fills = lane_categories(step)
    own = sorted((c for c in fills if fills[c] != OTHER_COLOR), key=list(CATEGORY_COLORS).index)
    grouped = sorted(c for c in fills if fills[c] == OTHER_COLOR)
    items = [(fills[c], escape(c)) for c in own]
    if grouped:
        label = "other" if grouped == ["other"] else f"other ({len(grouped)}: {', '.join(grouped)})"
        items.append((OTHER_COLOR, escape(label)))
    if any(lane.others for lane in step.timeline):
        items.append((OTHER_STEPS, "other steps' work"))
    causes = sorted({g["class"] for g in step.gap_spans})
    items += [(GAP_COLORS.get(c, "#ddd"), "idle: " + escape(GAP_MEANING.get(c, c))) for c in causes]
    kinds = sorted({seg["kind"] for seg in step.path_segments})
    path = [(PATH_COLORS.get(k, "#444"), escape(k.replace("_", " "))) for k in kinds]

    def keys(entries):
        return "".join(
            f'<span class="key"><i style="background:{c};outline:1px solid #999"></i>{label}</span>'
            for c, label in entries
        )

    html = f'<div class="legend lanes">{keys(items)}</div>'
    if path:
        html += f'<div class="legend path"><b>critical path:</b>{keys(path)}</div>'
    return Markup(html)


def wall_bar(step, width: int = 640) -> Markup:
    """The step's wall clock as one stacked bar: host setup, queued, compute, exposed comm and memory,
    other steps' work, GPU idle, host tail (step_breakdown; the parts add up to the wall)."""
    parts_ns = [
        ("host setup", step.host_setup_ns, "#fdd0a2"),
        ("queued on GPU", step.gpu_queued_ns, "#9e9ac8"),
        ("compute", step.compute_ns, "#3182bd"),
        ("exposed comm", step.exposed_comm_ns, "#d62728"),
        ("exposed memory", step.exposed_memory_ns, "#ffbb78"),
        ("other steps' work", step.other_steps_ns, "#9ecae1"),
        ("GPU idle", step.gpu_idle_ns, "#bdbdbd"),
        ("host tail", step.host_tail_ns, "#fee6ce"),
    ]
    total = sum(max(0, v or 0) for _, v, _ in parts_ns) or 1
    out, xpos = (
        [
            (
                f'<svg xmlns="http://www.w3.org/2000/svg" class="chart wall-bar" width="{width}" height="26" '
                f'role="img" aria-label="step wall clock">'
            )
        ],
        0.0,
    )
    for label, value, fill in parts_ns:
        w = width * max(0, value or 0) / total
        if w <= 0:
            continue
        out.append(
            f'<rect x="{xpos:.2f}" y="2" width="{w:.2f}" height="22" fill="{fill}"><title>{label}: '
            f"{(value or 0) / 1e6:.3f} ms ({100 * (value or 0) / total:.1f} %)</title></rect>"
        )
        text = f"{label} {100 * (value or 0) / total:.0f}%"
        if w > 6.5 * len(text) + 8:  # a label only where it fits (the title always has it)
            out.append(f'<text x="{xpos + 4:.1f}" y="17" font-size="11">{text}</text>')
        xpos += w
    out.append("</svg>")
    return Markup("".join(out))


def skew_chart(rows: list, width: int = 560) -> Markup:
    """Per rank: mean lateness at collectives (how late it arrived) and time it waited for others; the
    rank that arrived last most often is the straggler, drawn darker."""
    if not rows:
        return Markup("")
    label_w, bar_h, gap = 70, 14, 10
    worst = max(rows, key=lambda r: (r.times_last, r.mean_start_lateness_ns or 0)).rank
    top = max([r.mean_start_lateness_ns or 0 for r in rows] + [r.wait_ns or 0 for r in rows] + [1])
    plot = width - label_w - 110
    height = len(rows) * (2 * bar_h + gap) + 24
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart skew" width="{width}" height="{height}" '
            f'role="img" aria-label="rank skew">'
        )
    ]
    for i, r in enumerate(rows):
        y = 4 + i * (2 * bar_h + gap)
        late, wait = r.mean_start_lateness_ns or 0, r.wait_ns or 0
        out.append(
            f'<text x="{label_w - 6}" y="{y + bar_h + 4}" text-anchor="end" font-size="12"'
            f"{' font-weight=' + chr(34) + 'bold' + chr(34) if r.rank == worst else ''}>rank {r.rank}</text>"
        )
        for j, (value, fill, what) in enumerate(
            (
                (late, "#d62728" if r.rank == worst else "#fc9272", "mean lateness"),
                (wait, "#6baed6", "waited"),
            )
        ):
            w = plot * value / top
            out.append(
                f'<rect x="{label_w}" y="{y + j * bar_h}" width="{max(w, 0.6):.1f}" height="{bar_h - 2}" '
                f'fill="{fill}"><title>rank {r.rank} {what}: {value / 1e6:.3f} ms</title></rect>'
                f'<text x="{label_w + w + 4:.1f}" y="{y + j * bar_h + 10}" font-size="10">{what} '
                f"{value / 1e6:.3f} ms</text>"
            )
    out.append(
        f'<text x="{label_w}" y="{height - 6}" font-size="11" fill="#555">{len(rows)} ranks; '
        f"darker: arrived last most often (rank {worst})</text></svg>"
    )
    return Markup("".join(out))


def layer_strip(positions: list, width: int = 900) -> Markup:
    """The kernels of one layer in order, as boxes sized by median time."""
    total = sum(p.median_ns or 0 for p in positions)
    if not positions or total <= 0:
        return Markup("")
    x, parts = (
        0.0,
        [
            (
                f'<svg xmlns="http://www.w3.org/2000/svg" class="chart layer-strip" width="{width}" height="30" '
                f'role="img" aria-label="layer pattern">'
            )
        ],
    )
    for p in positions:
        w = width * (p.median_ns or 0) / total
        parts.append(
            f'<rect x="{x:.2f}" y="2" width="{max(w, 0.5):.2f}" height="24" fill="{color(p.category)}" '
            f'stroke="#fff"><title>{p.position}: {escape(p.name)} ({escape(p.category)}, '
            f"{(p.median_ns or 0) / 1e3:.1f} µs)</title></rect>"
        )
        x += w
    parts.append("</svg>")
    return Markup("".join(parts))
