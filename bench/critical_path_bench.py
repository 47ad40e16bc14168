"""Benchmark: the critical path of one step of ~50,000 GPU activities (target: under 2 s).

Synthesizes one serving-decode step with 2,500 layers (20 activities per layer, a CUDA-graph replay on
two streams, plus the eager setup), ingests it, then times the `critical_path` view (with its helper
`_critical_path_pred`) and the summaries, on DuckDB over the warehouse's Parquet files.

    .venv/bin/python bench/critical_path_bench.py [--layers 2500] [--keep DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracehouse.ingest.load import ingest_paths
from tracehouse.synth import write_scenario
from tracehouse.warehouse.catalog import connect_base
from tracehouse.warehouse.store import Warehouse

VIEWS = [
    "kernel_category",
    "_critical_path_pred",
    "critical_path",
    "critical_stream",
    "critical_path_summary",
]
TARGET_S = 2.0


def connect(wh: Warehouse) -> duckdb.DuckDBPyConnection:
    """Only the tables and views the critical path reads (the rest of the catalogue is not timed)."""
    con = connect_base(wh)
    for name in VIEWS:
        con.execute((ROOT / "sql" / f"{name}.sql").read_text(encoding="utf-8"))
    return con


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="cp_bench_"))
    try:
        t = time.perf_counter()
        out = write_scenario("serving-decode", work / "run", ranks=1, steps=1, layers=args.layers)
        synth_s = time.perf_counter() - t
        wh = Warehouse(work / "wh")
        t = time.perf_counter()
        [outcome] = ingest_paths(wh, sorted(out.glob("*.trace.json.gz")))
        ingest_s = time.perf_counter() - t
        con = connect(wh)
        (activities,) = con.execute(
            "SELECT count(*) FROM kernels WHERE run_id = ?", [outcome.run_id]
        ).fetchone()
        (per_step,) = con.execute(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM kernels GROUP BY run_id, rank, step)"
        ).fetchone()
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            segs, total, span = con.execute(
                "SELECT count(*), sum(dur_ns), max(start_ns + dur_ns) - min(start_ns) FROM critical_path"
            ).fetchone()
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        summary = con.execute(
            "SELECT kind, sum(time_ns), max(critical_stream) FROM critical_path_summary "
            "GROUP BY kind ORDER BY 2 DESC"
        ).fetchall()
        summary_s = time.perf_counter() - t
        best = min(times)
        print(f"activities: {activities} (largest step: {per_step})")
        print(f"synthesize: {synth_s:.2f} s, ingest: {ingest_s:.2f} s")
        print(
            f"critical_path: {best:.3f} s best of {args.repeat} ({', '.join(f'{x:.3f}' for x in times)}); "
            f"{segs} segments, sum {total} ns = span {span} ns: {total == span}"
        )
        print(
            f"critical_path_summary: {summary_s:.3f} s; "
            + ", ".join(f"{k} {v / 1e6:.2f} ms" for k, v, _ in summary)
            + f"; critical stream {summary[0][2] if summary else None}"
        )
        print(f"target < {TARGET_S} s: {'met' if best < TARGET_S else 'MISSED'}")
        return 0 if best < TARGET_S and total == span else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
