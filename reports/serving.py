"""The run report's serving section: step time by batch size, the roofline of the kernels whose work is
known, and collective bandwidth (sql/step_latency, kernel_roofline, step_roofline, collective_bandwidth).

`serving_section` reads the figures; `latency_chart` and `roofline_chart` draw them as inline SVG from
numbers and escaped text only (no trace string reaches the markup unescaped).
"""

from __future__ import annotations

import math
from html import escape

from markupsafe import Markup
from tracehouse.warehouse.engine import Connection

TOP_ROOFLINE = 15
TOP_REQUESTS = 10
SPLIT_WORDS = {
    "tokens_x_kv": "tokens × KV tokens",
    "tokens": "tokens",
    "equal": "equal shares (tokens not stated)",
}
PHASE_COLOR = {"prefill": "#1f77b4", "decode": "#ff7f0e", "mixed": "#2ca02c"}


def _rows(con: Connection, sql: str, params: list) -> list[dict]:
    cursor = con.execute(sql, params)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def serving_section(con: Connection, run_id: str, phase: str | None = None) -> dict | None:
    """The section's figures, or None when the run has neither a known batch size nor a kernel with known
    work nor a sized collective (nothing to show)."""
    return _section(con, run_id, phase)


def _section(con: Connection, run_id: str, phase: str | None) -> dict | None:
    clause, params = ("AND phase = ?", [phase]) if phase else ("", [])
    latency = _rows(
        con,
        f"""
        SELECT phase, batch_size, steps, median_tokens, median_step_ns, p90_step_ns, median_gpu_busy_ns
        FROM step_latency WHERE run_id = ? AND batch_size IS NOT NULL {clause}
        ORDER BY phase, batch_size""",
        [run_id] + params,
    )
    roofline = _rows(
        con,
        f"""
        SELECT phase, kernel, family, precision, launches, dur_ns, achieved_tflops, achieved_tbps, intensity,
               bound, pct_of_bound, peak_tflops, peak_tbps, device
        FROM kernel_roofline WHERE run_id = ? {clause}
        ORDER BY dur_ns DESC, kernel LIMIT {TOP_ROOFLINE}""",
        [run_id] + params,
    )
    utilization = _rows(
        con,
        f"""
        SELECT phase, count(*) AS steps, median(mfu_pct) AS median_mfu_pct, median(mbu_pct) AS median_mbu_pct,
               median(known_gpu_pct) AS median_known_gpu_pct
        FROM step_roofline WHERE run_id = ? {clause} GROUP BY phase ORDER BY phase""",
        [run_id] + params,
    )
    collectives = _rows(
        con,
        f"""
        SELECT collective, size_bucket_bytes, count(*) AS calls, sum(bytes) AS bytes, sum(dur_ns) AS dur_ns,
               median(busbw_gbps) AS median_busbw_gbps, max(busbw_gbps) AS max_busbw_gbps,
               any_value(link_gbps) AS link_gbps
        FROM collective_bandwidth WHERE run_id = ? {clause}
        GROUP BY collective, size_bucket_bytes ORDER BY collective, size_bucket_bytes""",
        [run_id] + params,
    )
    requests = _requests(con, run_id)
    if not (latency or roofline or collectives or requests):
        return None
    device = next((r["device"] for r in roofline if r["device"]), None)
    return {
        "step_latency": latency,
        "roofline": roofline,
        "utilization": utilization,
        "collectives": collectives,
        "device": device,
        "requests": requests,
        "peak_tflops": max((r["peak_tflops"] for r in roofline if r["peak_tflops"]), default=None),
        "peak_tbps": next((r["peak_tbps"] for r in roofline if r["peak_tbps"]), None),
    }


def _requests(con: Connection, run_id: str) -> dict | None:
    """What the run's requests cost (sql/request_cost), over every phase: how many, the spread of a request's
    prefill GPU time and of its decode GPU time per token, and the costliest ones; None when no request is
    named (the section then says how to name them, where it shows a batch size)."""
    [summary] = _rows(
        con,
        """
        SELECT count(*) AS requests,
               quantile_disc(prefill_gpu_ns, 0.5) FILTER (WHERE prefill_steps > 0) AS median_prefill_gpu_ns,
               quantile_disc(prefill_gpu_ns, 0.9) FILTER (WHERE prefill_steps > 0) AS p90_prefill_gpu_ns,
               quantile_disc(decode_gpu_ns_per_token, 0.5) AS median_decode_gpu_ns_per_token,
               quantile_disc(decode_gpu_ns_per_token, 0.9) AS p90_decode_gpu_ns_per_token,
               sum(gpu_ns) AS gpu_ns
        FROM request_cost WHERE run_id = ?""",
        [run_id],
    )
    if not summary["requests"]:
        return None
    top = _rows(
        con,
        f"""
        SELECT request_id, steps, prefill_tokens, decode_tokens, max_kv_tokens, prefill_gpu_ns, decode_gpu_ns,
               gpu_ns, decode_gpu_ns_per_token
        FROM request_cost WHERE run_id = ? ORDER BY gpu_ns DESC, request_id LIMIT {TOP_REQUESTS}""",
        [run_id],
    )
    how = _rows(
        con,
        """
        SELECT attention_split, other_split, count(*) AS steps, min(source) AS source
        FROM (SELECT DISTINCT rank, step, attention_split, other_split, source
              FROM request_step_cost WHERE run_id = ?) AS step_splits
        GROUP BY attention_split, other_split ORDER BY steps DESC, attention_split, other_split""",
        [run_id],
    )
    splits = [
        f"{h['steps']} rank-step{'s' if h['steps'] != 1 else ''}: attention by "
        f"{SPLIT_WORDS[h['attention_split']]}, the rest by {SPLIT_WORDS[h['other_split']]}"
        for h in how
    ]
    return {**summary, "top": top, "splits": splits, "sources": sorted({h["source"] for h in how})}


def latency_chart(rows: list[dict], *, width: int = 520, height: int = 180) -> Markup:
    """Median step time (ms) against batch size, one line per phase; p90 as a tick above each point."""
    pts = [r for r in rows if r.get("batch_size") is not None and r.get("median_step_ns") is not None]
    if not pts:
        return Markup("")
    pad_l, pad_r, pad_t, pad_b = 56, 12, 14, 30
    iw, ih = width - pad_l - pad_r, height - pad_t - pad_b
    xs = [r["batch_size"] for r in pts]
    ys = [r["median_step_ns"] / 1e6 for r in pts] + [
        r["p90_step_ns"] / 1e6 for r in pts if r.get("p90_step_ns")
    ]
    x_lo, x_hi = min(xs), max(xs)
    y_hi = max(ys) * 1.08 or 1.0

    def x(v: float) -> float:
        return pad_l + (iw / 2 if x_hi == x_lo else iw * (v - x_lo) / (x_hi - x_lo))

    def y(v: float) -> float:
        return pad_t + ih * (1 - v / y_hi)

    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} '
            f'{height}" role="img"><title>step time by batch size</title>'
        ),
        f'<rect x="{pad_l}" y="{pad_t}" width="{iw}" height="{ih}" fill="#fafafa" stroke="#ddd"/>',
    ]
    for phase in sorted({r["phase"] for r in pts}):
        color = PHASE_COLOR.get(phase, "#555")
        series = sorted((r for r in pts if r["phase"] == phase), key=lambda r: r["batch_size"])
        line = " ".join(f"{x(r['batch_size']):.1f},{y(r['median_step_ns'] / 1e6):.1f}" for r in series)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for r in series:
            cx, cy = x(r["batch_size"]), y(r["median_step_ns"] / 1e6)
            label = (
                f"{phase} bs={r['batch_size']}: median {r['median_step_ns'] / 1e6:.3f} ms, "
                f"p90 {(r['p90_step_ns'] or 0) / 1e6:.3f} ms, {r['steps']} steps"
            )
            if r.get("p90_step_ns"):
                parts.append(
                    f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{cy:.1f}" y2="{y(r["p90_step_ns"] / 1e6):.1f}" '
                    f'stroke="{color}" stroke-opacity="0.5"/>'
                )
            parts.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{color}"><title>{escape(label)}</title></circle>'
            )
    parts.append(
        f'<text x="{pad_l - 4}" y="{pad_t + 8}" font-size="10" text-anchor="end">{y_hi:.3g} ms</text>'
    )
    parts.append(f'<text x="{pad_l - 4}" y="{pad_t + ih}" font-size="10" text-anchor="end">0</text>')
    parts.append(f'<text x="{pad_l}" y="{height - 16}" font-size="10">bs {x_lo}</text>')
    parts.append(
        f'<text x="{pad_l + iw}" y="{height - 16}" font-size="10" text-anchor="end">bs {x_hi}</text>'
    )
    legend = "; ".join(sorted({r["phase"] for r in pts}))
    parts.append(
        f'<text x="{pad_l}" y="{height - 3}" font-size="10">{escape(legend)} (median, p90 tick)</text>'
    )
    parts.append("</svg>")
    return Markup("".join(parts))


def roofline_chart(
    rows: list[dict],
    peak_tflops: float | None,
    peak_tbps: float | None,
    *,
    width: int = 520,
    height: int = 240,
) -> Markup:
    """Log-log roofline: achieved TFLOP/s against arithmetic intensity for the kernels with FLOPs, under
    the device's roof (min(peak, intensity × HBM bandwidth))."""
    pts = [
        r
        for r in rows
        if r.get("intensity") and r.get("achieved_tflops") and r["intensity"] > 0 and r["achieved_tflops"] > 0
    ]
    if not pts or not peak_tflops or not peak_tbps:
        return Markup("")
    pad_l, pad_r, pad_t, pad_b = 56, 12, 14, 30
    iw, ih = width - pad_l - pad_r, height - pad_t - pad_b
    ridge = peak_tflops / peak_tbps
    xs = [r["intensity"] for r in pts] + [ridge]
    x_lo, x_hi = math.log10(min(xs)) - 0.3, math.log10(max(xs)) + 0.3
    y_vals = [r["achieved_tflops"] for r in pts] + [peak_tflops, 10**x_lo * peak_tbps]
    y_lo, y_hi = math.log10(max(min(y_vals), 1e-6)) - 0.3, math.log10(peak_tflops) + 0.2

    def x(v: float) -> float:
        return pad_l + iw * (math.log10(v) - x_lo) / (x_hi - x_lo)

    def y(v: float) -> float:
        return pad_t + ih * (1 - (math.log10(max(v, 10**y_lo)) - y_lo) / (y_hi - y_lo))

    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} '
            f'{height}" role="img"><title>roofline</title>'
        ),
        f'<rect x="{pad_l}" y="{pad_t}" width="{iw}" height="{ih}" fill="#fafafa" stroke="#ddd"/>',
    ]
    a, b = 10**x_lo, 10**x_hi
    roof = [(a, a * peak_tbps), (ridge, peak_tflops), (b, peak_tflops)]
    parts.append(
        '<polyline points="'
        + " ".join(f"{x(u):.1f},{y(v):.1f}" for u, v in roof)
        + '" fill="none" stroke="#999" stroke-width="1.5"><title>roof: min(peak, intensity × HBM)</title></polyline>'
    )
    for r in pts:
        color = PHASE_COLOR.get(r["phase"], "#555")
        label = (
            f"{r['kernel'][:90]} ({r['phase']}): {r['achieved_tflops']:.3g} TFLOP/s at {r['intensity']:.3g} "
            f"FLOP/B, {r['pct_of_bound'] or 0:.1f} % of its bound"
        )
        parts.append(
            f'<circle cx="{x(r["intensity"]):.1f}" cy="{y(r["achieved_tflops"]):.1f}" r="3.5" '
            f'fill="{color}" fill-opacity="0.75"><title>{escape(label)}</title></circle>'
        )
    parts.append(
        f'<text x="{pad_l - 4}" y="{pad_t + 8}" font-size="10" text-anchor="end">{10**y_hi:.3g}</text>'
    )
    parts.append(
        f'<text x="{pad_l - 4}" y="{pad_t + ih}" font-size="10" text-anchor="end">{10**y_lo:.2g}</text>'
    )
    parts.append(f'<text x="{pad_l}" y="{height - 16}" font-size="10">{10**x_lo:.2g} FLOP/B</text>')
    parts.append(
        f'<text x="{pad_l + iw}" y="{height - 16}" font-size="10" text-anchor="end">{10**x_hi:.3g}</text>'
    )
    parts.append(
        f'<text x="{pad_l}" y="{height - 3}" font-size="10">TFLOP/s (log) against arithmetic intensity '
        f"(log); ridge {ridge:.3g} FLOP/B</text>"
    )
    parts.append("</svg>")
    return Markup("".join(parts))
