"""Small chart helpers shared by the reports: text sparklines for Markdown, inline SVG for HTML.

Every SVG is built here from numbers and escaped text only, so a report stays self-contained (no network,
no script) and no trace-derived string reaches the markup unescaped.
"""

from __future__ import annotations

import math
import statistics
from html import escape
from pathlib import Path

from markupsafe import Markup

TEMPLATES = Path(__file__).resolve().parent / "templates"
SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None]) -> str:
    """One block character per value, scaled between the series' min and max; a gap for None."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return ""
    lo, hi = min(present), max(present)
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(" ")
        elif hi == lo:
            out.append(SPARK[3])
        else:
            out.append(SPARK[min(len(SPARK) - 1, int((v - lo) / (hi - lo) * len(SPARK)))])
    return "".join(out)


def md_cell(value) -> str:
    """Text safe inside a Markdown table cell: no pipes, backticks or line breaks from a trace."""
    text = "" if value is None else str(value)
    return (
        text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("\n", " ").replace("\r", " ")
    )


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "–"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if a >= 1e6:
        return f"{ns / 1e6:.4g} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.4g} µs"
    return f"{ns:.4g} ns"


def fmt_value(value: float | None, metric: str = "") -> str:
    if value is None:
        return "–"
    if metric.endswith(("_ns", "_ns_per_step")):
        return fmt_ns(value)
    if metric.endswith("_share"):
        return f"{100 * value:.1f} %"
    if metric.endswith("_pct"):
        return f"{value:.2f} %"
    return f"{value:.4g}"


def unit_for(metric: str, values: list[float]) -> tuple[float, str]:
    """(divisor, unit) that shows a metric's values in the unit its title says: ns metrics in ns, µs or ms
    by their size, shares in %, percentages as they are, counts bare."""
    if metric.endswith(("_ns", "_ns_per_step")):
        top = max((abs(v) for v in values), default=0)
        return (1e6, "ms") if top >= 1e6 else (1e3, "µs") if top >= 1e3 else (1.0, "ns")
    if metric.endswith("_share"):
        return 0.01, "%"
    if metric.endswith("_pct"):
        return 1.0, "%"
    return 1.0, ""


#: The y axis of a trend chart spans at least this share of the metric's median value, so a change well
#: under the regression rule's threshold (3 %) fills at most a third of it instead of looking like a cliff.
MIN_RELATIVE_SPAN = 0.10


def line_chart(
    points: list[dict],
    *,
    width: int = 430,
    height: int = 150,
    title: str = "",
    metric: str = "",
    unit: tuple[float, str] | None = None,
) -> Markup:
    """An SVG line chart of points [{x_label, value, baseline, band, flagged}], with the band each point
    was judged against (baseline ± band, regression.band, clipped at 0: no metric is negative) shaded and
    flagged points drawn in red. Values in the metric's unit (unit_for), y ticks labelled with it, and
    each run's commit under its point (every k-th when they do not fit). The y axis spans at least
    MIN_RELATIVE_SPAN of the values' median (two runs 0.2 % apart sit close together, not at the top and
    bottom of the chart)."""
    pad_l, pad_r, pad_t, pad_b = 58, 10, 10, 30
    raw = [p["value"] for p in points if p.get("value") is not None]
    div, unit_name = unit or unit_for(metric, raw)
    judged = [
        (i, p) for i, p in enumerate(points) if p.get("baseline") is not None and p.get("band") is not None
    ]
    band = []
    for _, p in judged:
        band += [max(0.0, p["baseline"] - p["band"]), p["baseline"] + p["band"]]
    allv = raw + band
    if not allv:
        return Markup("")
    lo, hi = min(allv), max(allv)
    floor = MIN_RELATIVE_SPAN * abs(statistics.median(raw or allv))
    if hi - lo < floor:  # a +0.2 % change must not fill the chart: the axis spans >= 10 % of the value
        mid = (lo + hi) / 2
        lo, hi = mid - floor / 2, mid + floor / 2
    if hi == lo:
        lo, hi = lo - max(1.0, abs(lo) * 0.05), hi + max(1.0, abs(hi) * 0.05)
    span = hi - lo
    lo, hi = max(0.0, lo - 0.08 * span) if lo >= 0 else lo - 0.08 * span, hi + 0.08 * span
    n = max(1, len(points) - 1)
    iw, ih = width - pad_l - pad_r, height - pad_t - pad_b

    def x(i: int) -> float:
        return pad_l + (iw * i / n if len(points) > 1 else iw / 2)

    def y(v: float) -> float:
        return pad_t + ih * (1 - (v - lo) / (hi - lo))

    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart trend-chart" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img"><title>{escape(title)}</title>'
        ),
        f'<rect x="{pad_l}" y="{pad_t}" width="{iw}" height="{ih}" fill="#fafafa" stroke="#ddd"/>',
    ]
    ticks = _ticks(lo, hi, 4)
    step = (ticks[1] - ticks[0]) / div if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 0  # distinct labels for close ticks
    for t in ticks:
        ty = y(t)
        text = f"{t / div:,.{decimals}f}" + (f" {unit_name}" if unit_name else "")
        parts.append(
            f'<line x1="{pad_l}" y1="{ty:.1f}" x2="{pad_l + iw}" y2="{ty:.1f}" stroke="#eee"/>'
            f'<text x="{pad_l - 4}" y="{ty + 3:.1f}" font-size="10" text-anchor="end">'
            f"{escape(text)}</text>"
        )
    upper = [(x(i), y(p["baseline"] + p["band"])) for i, p in judged]
    lower = [(x(i), y(max(0.0, p["baseline"] - p["band"]))) for i, p in judged]
    if len(upper) >= 2:
        poly = " ".join(f"{a:.1f},{b:.1f}" for a, b in upper + lower[::-1])
        parts.append(
            f'<polygon points="{poly}" fill="#9ecae1" fill-opacity="0.45" stroke="none">'
            f"<title>baseline ± band (the flag threshold)</title></polygon>"
        )
        base = " ".join(
            f"{x(i):.1f},{y(p['baseline']):.1f}"
            for i, p in enumerate(points)
            if p.get("baseline") is not None
        )
        parts.append(f'<polyline points="{base}" fill="none" stroke="#6baed6" stroke-dasharray="4 3"/>')
    line = " ".join(
        f"{x(i):.1f},{y(p['value']):.1f}" for i, p in enumerate(points) if p.get("value") is not None
    )
    parts.append(f'<polyline points="{line}" fill="none" stroke="#333" stroke-width="1.5"/>')
    for i, p in enumerate(points):
        if p.get("value") is None:
            continue
        color = "#d62728" if p.get("flagged") else "#333"
        r = 4 if p.get("flagged") else 2.5
        label = f"{p.get('x_label', '')}: {_short_number(p['value'] / div)} {unit_name}".rstrip()
        parts.append(
            f'<circle cx="{x(i):.1f}" cy="{y(p["value"]):.1f}" r="{r}" fill="{color}">'
            f"<title>{escape(label)}</title></circle>"
        )
    every = max(1, math.ceil(len(points) * 48 / iw))  # a commit label needs about 48 px
    for i, p in enumerate(points):
        if i % every == 0 or i == len(points) - 1 and (len(points) - 1) % every >= every / 2:
            text = str(p.get("x_label", ""))[:8]
            parts.append(
                f'<text x="{x(i):.1f}" y="{pad_t + ih + 13}" font-size="10" text-anchor="middle">'
                f"{escape(text)}</text>"
            )
    parts.append(
        f'<text x="{pad_l + iw / 2:.1f}" y="{height - 3}" font-size="10" text-anchor="middle" '
        f'fill="#777">commit</text></svg>'
    )
    return Markup("".join(parts))


def _ticks(lo: float, hi: float, target: int) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _short_number(v: float) -> str:
    """12.5, 1250, 0.034: at most 4 significant digits, no exponent for the sizes a chart shows."""
    a = abs(v)
    if a >= 1e5:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def bar_pair(base: float, target: float, scale: float, *, width: int = 160) -> Markup:
    """Two horizontal bars (base grey, target blue) scaled to `scale`, for a diff table row."""
    if scale <= 0:
        return Markup("")
    wb = max(0.0, width * base / scale)
    wt = max(0.0, width * target / scale)
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="14">'
        f'<rect x="0" y="1" width="{wb:.1f}" height="5" fill="#999"/>'
        f'<rect x="0" y="8" width="{wt:.1f}" height="5" fill="#3182bd"/></svg>'
    )


def point_dict(point) -> dict:
    """A trend point (dataclass) as the dict line_chart reads."""
    return {
        "x_label": point.commit or point.run_id,
        "value": point.value,
        "baseline": point.baseline,
        "noise": point.noise,
        "band": point.band,
        "flagged": point.flagged,
    }
