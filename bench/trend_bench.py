"""Benchmark: `trend` over 1,000 runs answers in under 3 s (issue 7).

Synthesized metric rows are written straight into runs / run_metrics-shaped tables (40 metrics per run,
like a serving-decode run: step times, per-category and top-kernel times per step, idle %, critical-path
shares) and the same code as `tracehouse trend` runs over them: reports.trend.build_trend_from_tables
(the SQL of sql/trend_params.sql, trend.sql, regression.sql in an in-memory DuckDB) and the Markdown
rendering. Prints the timings; exits 1 when the answer takes 3 s or more.

    .venv/bin/python bench/trend_bench.py [--runs 1000] [--series 4]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

METRICS = (["step_time_median_ns", "step_time_p90_ns", "wall_time_median_ns", "gpu_busy_ns_per_step",
            "exposed_comm_ns_per_step", "idle_pct", "gpu_busy_pct", "activities_per_step", "steps"]
           + [f"category.{c}_ns_per_step" for c in ("gemm", "attention", "moe", "communication", "norm",
                                                    "activation", "rope", "elementwise", "reduction", "memory")]
           + [f"kernel.k{i}_ns_per_step" for i in range(10)]
           + [f"critical_path.{c}_share" for c in ("gemm", "attention", "moe", "communication", "norm",
                                                   "kernel_gap", "cpu", "launch_delay", "memory", "rope", "other")])


def synthesize(n_runs: int, n_series: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    rng = random.Random(seed)
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    base = {m: rng.uniform(1e3, 3e5) for m in METRICS}
    runs, rows = [], []
    for i in range(n_runs):
        s = i % n_series
        run_id = f"{i:016x}"
        runs.append({"run_id": run_id, "ingested_at": t0 + timedelta(minutes=i), "labels": [("series", f"s{s}")],
                     "framework": "sglang", "model": "m", "hardware": "H100", "commit": f"{i:07x}",
                     "commit_time": (t0 + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ"), "series": f"s{s}"})
        shift = 1.08 if i > n_runs * 3 // 4 else 1.0
        for m in METRICS:
            better = "none" if m == "steps" or m.startswith("critical_path.") else (
                "higher" if m == "gpu_busy_pct" else "lower")
            v = base[m] * rng.gauss(1.0, 0.005) * (shift if m == "category.attention_ns_per_step" else 1.0)
            rows.append({"run_id": run_id, "rank": None, "phase": "decode", "metric": m, "value": v,
                         "better": better, "spread": base[m] * 0.004})
    runs_t = pa.Table.from_pylist(runs, schema=pa.schema([
        ("run_id", pa.string()), ("ingested_at", pa.timestamp("us", tz="UTC")),
        ("labels", pa.map_(pa.string(), pa.string())), ("framework", pa.string()), ("model", pa.string()),
        ("hardware", pa.string()), ("commit", pa.string()), ("commit_time", pa.string()), ("series", pa.string())]))
    rows_t = pa.Table.from_pylist(rows, schema=pa.schema([
        ("run_id", pa.string()), ("rank", pa.int32()), ("phase", pa.string()), ("metric", pa.string()),
        ("value", pa.float64()), ("better", pa.string()), ("spread", pa.float64())]))
    return runs_t, rows_t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--series", type=int, default=4)
    args = ap.parse_args()
    from reports.trend import build_trend_from_tables, render_trend

    runs, rows = synthesize(args.runs, args.series)
    t = time.perf_counter()
    report = build_trend_from_tables(runs, rows)
    t_eval = time.perf_counter() - t
    md = render_trend(report, "md")
    t_total = time.perf_counter() - t
    flagged = {(g.series, g.metric, g.first_commit) for g in report.regressions}
    print(f"trend over {args.runs} runs, {rows.num_rows} metric rows, {args.series} series: "
          f"rule {t_eval:.2f} s, with Markdown {t_total:.2f} s ({len(md)} chars); "
          f"{len(report.regressions)} flagged points, {len(flagged)} shifts")
    return 0 if t_total < 3.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
