"""Benchmark: the run report of a large run, after ingest (issue 6: a run with one million GPU activities
renders in under 2 s).

A synthesized SGLang-style decode run (CUDA-graph replays, two streams, 2 ranks) is grown to about
--activities GPU activities by its layer count, ingested once, and the report is rendered in each format.
Prints the activities, the ingest time and the report times, and the ratio to the target.

    python bench/report_bench.py [--activities 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synth import write_scenario
from warehouse.catalog import connect
from warehouse.load import ingest_paths
from warehouse.store import Warehouse

TARGET_S = 2.0
ACTIVITIES_PER_LAYER_STEP_RANK = 20  # serving-decode: 16 on the main stream + 4 routed-expert kernels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--activities", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="Keep the run and warehouse in this folder.")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="tracehouse-report-bench-"))
    steps, ranks = 10, 2
    layers = max(1, args.activities // (ACTIVITIES_PER_LAYER_STEP_RANK * steps * ranks))
    t0 = time.perf_counter()
    run_dir = write_scenario("serving-decode", root / "run", ranks=ranks, steps=steps, layers=layers, seed=1)
    t1 = time.perf_counter()
    wh = Warehouse(root / "wh")
    [outcome] = ingest_paths(wh, [run_dir])
    t2 = time.perf_counter()
    n = connect(wh).execute("SELECT count(*) FROM kernels").fetchone()[0]
    from reports.run import write_run_report

    rows = []
    for fmt in ("md", "html", "json"):
        start = time.perf_counter()
        write_run_report(wh, outcome.run_id, fmt, root / f"report.{fmt}")
        rows.append((fmt, time.perf_counter() - start))
    print(f"| run | {n:,} GPU activities, {ranks} ranks x {steps} steps x {layers} layers |")
    print(f"| synthesize / ingest | {t1 - t0:.1f} s / {t2 - t1:.1f} s |")
    for fmt, seconds in rows:
        print(f"| report {fmt} | {seconds:.2f} s ({seconds / TARGET_S:.2f} x the {TARGET_S:.0f} s target) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
