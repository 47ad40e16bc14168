"""Benchmark: `tracehouse trend` over 1,000 runs answers in under 3 s (issue 7).

The warehouse: one synthesized serving-decode run (2 ranks) per series is ingested; each series is then
grown to its share of --runs as the warehouse would hold it after those runs were ingested and trended
once: every further run is the ingested run's `runs` row (one Parquet partition per run) with its own
run id, commit and commit time, and its run_metrics rows (every rank and the aggregate) in the per-run
metric store (warehouse/metrics.py) with run-to-run noise (0.7 %) and, from 3/4 of each series on,
the attention family +8 %. Nothing is read from memory: the timed command is the CLI's, `tracehouse
trend` (runs from Parquet, metrics from the per-run store, the rule SQL, the Markdown report), once in
this process (click's runner; best of --reps, after one warm-up that builds the view catalogue) and
once as a fresh process (`python cli.py trend`: interpreter and imports included).

Also printed: what computing run_metrics costs a run that is not in the store yet (the first trend
after an ingest pays it once per new run). Exits 1 when the in-process answer takes 3 s or more.

    .venv/bin/python bench/trend_bench.py [--runs 1000] [--series 4] [--reps 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_S = 3.0
ATTENTION = (
    "category.attention_ns_per_step",
    "kernel.flashinfer::mla::BatchMLAPagedAttentionKernel_ns_per_step",
)


@dataclass
class TrendBench:
    runs: int
    series: int
    metric_files: int
    in_process_s: float  # best of the repetitions
    fresh_process_s: float | None
    first_metrics_s_per_run: float
    flagged_shifts: int
    build_s: float


def build_warehouse(root: Path, n_runs: int, n_series: int, seed: int = 0) -> tuple[Path, float]:
    """A warehouse of n_runs runs in n_series series (see the module docstring); returns (its folder, the
    seconds that computing run_metrics took per ingested run)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import tracehouse.ingest.run  # noqa: F401
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse.metrics import run_metric_rows
    from tracehouse.warehouse.store import Warehouse

    from tracehouse import ingest

    wh = Warehouse(root / "wh")
    saved = ingest.run.os.cpu_count
    ingest.run.os.cpu_count = lambda: 1  # small runs: in-process ingest, no pool to spawn
    try:
        templates = []
        for s in range(n_series):
            run_dir = write_scenario(
                "serving-decode", root / f"series{s}", ranks=2, steps=3, layers=2, seed=s
            )
            shutil.rmtree(run_dir / "capture_traces", ignore_errors=True)
            [out] = ingest_paths(
                wh,
                [run_dir],
                labels={"series": f"bench-{s}", "commit": "seed", "commit_time": "2025-01-01T00:00:00Z"},
            )
            if out.problems:
                raise RuntimeError(f"ingest failed: {out.problems}")
            templates.append(out.run_id)
    finally:
        ingest.run.os.cpu_count = saved
    t = time.perf_counter()
    metrics = run_metric_rows(wh, templates)  # the first trend's cost, once per run
    first_per_run = (time.perf_counter() - t) / n_series
    store = _store_dir(wh.root)  # the derived run_metrics (again: an edit of sql/ meanwhile moves the store)

    rng = random.Random(seed)
    t0 = datetime(2025, 1, 2, tzinfo=timezone.utc)
    per_series = [n_runs // n_series + (1 if s < n_runs % n_series else 0) for s in range(n_series)]
    for s, template in enumerate(templates):
        row = pq.read_table(wh.partition("runs", template) / "run.parquet")
        rows = metrics.filter(pc.equal(metrics.column("run_id"), template))
        values = rows.column("value").to_pylist()
        names = rows.column("metric").to_pylist()
        attention = [name in ATTENTION for name in names]
        kept = {  # the template's other kept views: each fake run is derived as the template is
            view.name: view / f"run_id={template}"
            for view in store.parent.iterdir()
            if view.name != store.name
        }
        for i in range(per_series[s] - 1):  # the ingested run is the series' first
            run_id = f"b{s:02d}{i:013x}"
            when = (t0 + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
            commit = f"{s:02d}{i:010x}"
            labels = [("series", f"bench-{s}"), ("commit", commit), ("commit_time", when)]
            new = (
                row.set_column(row.schema.get_field_index("run_id"), "run_id", pa.array([run_id]))
                .set_column(row.schema.get_field_index("commit"), "commit", pa.array([commit]))
                .set_column(row.schema.get_field_index("commit_time"), "commit_time", pa.array([when]))
                .set_column(
                    row.schema.get_field_index("labels"),
                    "labels",
                    pa.array([labels], type=row.schema.field("labels").type),
                )
            )
            part = wh.partition("runs", run_id)
            part.mkdir(parents=True)
            pq.write_table(new, part / "run.parquet")
            shift = 1.08 if i >= per_series[s] * 3 // 4 else 1.0
            jitter = [
                v * rng.gauss(1.0, 0.007) * (shift if a else 1.0) if v is not None else None
                for v, a in zip(values, attention)
            ]
            m = rows.set_column(
                rows.schema.get_field_index("run_id"), "run_id", pa.array([run_id] * rows.num_rows)
            ).set_column(rows.schema.get_field_index("value"), "value", pa.array(jitter, pa.float64()))
            (store / f"run_id={run_id}").mkdir()
            pq.write_table(m.drop(["run_id"]), store / f"run_id={run_id}" / "rows.parquet")
            for view, folder in kept.items():  # hard links: a derived warehouse's layout, no copy
                shutil.copytree(folder, store.parent / view / f"run_id={run_id}", copy_function=os.link)
    shutil.copytree(store.parent, root / "bench-derived")  # see _ensure_store
    return wh.root, first_per_run


def _store_dir(wh: Path) -> Path:
    """The run_metrics folder of the warehouse's derived store (warehouse.catalog: kept rows)."""
    from tracehouse.warehouse.catalog import store_dir
    from tracehouse.warehouse.store import Warehouse

    return store_dir(Warehouse(wh)) / "run_metrics"


def _ensure_store(wh: Path) -> Path:
    """The current derived store's run_metrics, filled from the store the warehouse was built with if sql/
    has changed since (the store's folder is named by the catalogue's fingerprint)."""
    store = _store_dir(wh)
    built = wh.parent / "bench-derived"
    if not store.is_dir():
        shutil.copytree(built, store.parent, dirs_exist_ok=True)
    return store


def run(
    n_runs: int = 1000, n_series: int = 4, reps: int = 3, keep: Path | None = None, fresh_process: bool = True
) -> TrendBench:
    from click.testing import CliRunner

    from tracehouse.cli import main

    root = keep or Path(tempfile.mkdtemp(prefix="tracehouse-trend-bench-"))
    try:
        t = time.perf_counter()
        wh, first_per_run = build_warehouse(root, n_runs, n_series)
        build_s = time.perf_counter() - t
        args = ["--warehouse", str(wh), "trend", "-o", str(root / "trend.md")]
        runner = CliRunner()

        def timed(call) -> float | None:
            """Seconds of one call; None when sql/ changed meanwhile (the metric store moves with the
            catalogue's fingerprint: that call computed run_metrics afresh and measured nothing useful)."""
            store = _ensure_store(wh)
            t = time.perf_counter()
            call()
            seconds = time.perf_counter() - t
            return seconds if _store_dir(wh) == store else None

        def in_process() -> None:
            res = runner.invoke(main, args)
            if res.exit_code != 0:
                raise RuntimeError(f"tracehouse trend failed: {res.output}")

        timed(in_process)  # builds the view catalogue (once per change of sql/)
        times = [s for s in (timed(in_process) for _ in range(reps)) if s is not None]
        fresh = None
        if fresh_process:
            timed(
                lambda: subprocess.run([sys.executable, "-c", "import cli"], check=True, cwd=ROOT)
            )  # warm caches
            fresh = timed(
                lambda: subprocess.run(
                    [sys.executable, str(ROOT / "cli.py")] + args, check=True, capture_output=True
                )
            )
        _ensure_store(wh)
        res = runner.invoke(main, args[:-2] + ["--format", "json"])
        import json

        doc = json.loads(res.stdout)
        shifts = {(g["series"], g["metric"], g["first_commit"]) for g in doc["regressions"]}
        if not times:
            raise RuntimeError("sql/ changed during every timed round: rerun on a quiet checkout")
        n_files = sum(1 for _ in _store_dir(wh).glob("*.parquet"))
        return TrendBench(n_runs, n_series, n_files, min(times), fresh, first_per_run, len(shifts), build_s)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--series", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="Build the warehouse in this folder and keep it.")
    args = ap.parse_args()
    b = run(args.runs, args.series, args.reps, args.keep)
    print(
        f"| warehouse | {b.runs:,} runs in {b.series} series ({b.metric_files:,} per-run metric files), "
        f"built in {b.build_s:.1f} s |"
    )
    print(
        f"| tracehouse trend, in process (best of {args.reps}) | {b.in_process_s:.2f} s "
        f"({b.in_process_s / TARGET_S:.2f} x the {TARGET_S:.0f} s target) |"
    )
    if b.fresh_process_s is not None:
        print(f"| tracehouse trend, fresh process (imports included) | {b.fresh_process_s:.2f} s |")
    print(
        f"| run_metrics of a run not yet in the store (first trend after ingest) | "
        f"{b.first_metrics_s_per_run:.2f} s per run |"
    )
    print(f"| shifts flagged | {b.flagged_shifts} (series x metric; {b.series * len(ATTENTION)} injected) |")
    return 0 if b.in_process_s < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
