"""Benchmark: the run report of a large run, after ingest (issue 6: a run with one million GPU activities
renders in under 2 s).

A synthesized SGLang-style decode run (CUDA-graph replays, two streams, 2 ranks) is grown to about
--activities GPU activities by its layer count, ingested once, and the report is rendered in each format.
Each render is what `tracehouse report` does: a fresh connection, the run's shared views computed, the
report built and written; nothing is kept between renders. Prints the activities, the synthesis and ingest
times, each format's time and its ratio to the target, and (--profile) where one render's time goes.

    python bench/report_bench.py [--activities 1000000] [--keep DIR [--reuse]] [--reps N] [--profile]

--keep DIR keeps the run and the warehouse in DIR; --reuse then skips synthesis and ingest when DIR
already holds them (for iterating on the report).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracehouse.ingest.load import ingest_paths
from tracehouse.synth import write_scenario
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

TARGET_S = 2.0
ACTIVITIES_PER_LAYER_STEP_RANK = 20  # serving-decode: 16 on the main stream + 4 routed-expert kernels
STEPS, RANKS = 10, 2
FORMATS = ("md", "html", "json")


@dataclass
class ReportBench:
    activities: int
    shape: str
    synth_s: float | None  # None: the kept warehouse was reused
    ingest_s: float | None
    render_s: dict[str, float] = field(default_factory=dict)  # format -> best seconds (wall clock)
    render_cpu_s: dict[str, float] = field(default_factory=dict)  # format -> CPU seconds of that render
    profile: list[tuple[float, str]] = field(default_factory=list)  # (seconds, what), one md render


def run(
    activities: int = 1_000_000,
    keep: Path | None = None,
    reuse: bool = False,
    reps: int = 1,
    profile: bool = False,
) -> ReportBench:
    root = keep or Path(tempfile.mkdtemp(prefix="tracehouse-report-bench-"))
    wh = Warehouse(root / "wh")
    synth_s = ingest_s = None
    if reuse and (root / "wh" / "tables").is_dir():
        run_id = connect(wh).execute("SELECT run_id FROM runs ORDER BY run_id LIMIT 1").fetchone()[0]
    else:
        layers = max(1, activities // (ACTIVITIES_PER_LAYER_STEP_RANK * STEPS * RANKS))
        t0 = time.perf_counter()
        run_dir = write_scenario(
            "serving-decode", root / "run", ranks=RANKS, steps=STEPS, layers=layers, seed=1
        )
        t1 = time.perf_counter()
        [outcome] = ingest_paths(wh, [run_dir])
        synth_s, ingest_s = t1 - t0, time.perf_counter() - t1
        run_id = outcome.run_id
    con = connect(wh)
    n, ranks, steps = con.execute(
        "SELECT count(*), count(DISTINCT rank), count(DISTINCT step) FROM kernels WHERE run_id = ?", [run_id]
    ).fetchone()
    layers = round(n / (ACTIVITIES_PER_LAYER_STEP_RANK * ranks * steps)) if ranks and steps else 0
    result = ReportBench(n, f"{ranks} ranks x {steps} steps x ~{layers} layers", synth_s, ingest_s)

    from tracehouse.reports.write import write_run_report

    for fmt in FORMATS:
        times = []
        for _ in range(reps):
            start, cpu = time.perf_counter(), _cpu_s()
            write_run_report(wh, run_id, fmt, root / f"report.{fmt}")
            times.append((time.perf_counter() - start, _cpu_s() - cpu))
        result.render_s[fmt], result.render_cpu_s[fmt] = min(times)
    if profile:
        result.profile = _profile(wh, run_id, root / "report.profile.md")
    return result


def _cpu_s() -> float:
    """CPU seconds of this process, all threads (less sensitive than the wall clock to other load)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _profile(wh: Warehouse, run_id: str, path: Path) -> list[tuple[float, str]]:
    """One more md render with each query and each materialization timed (module functions wrapped)."""
    import tracehouse.reports.run as rr
    import tracehouse.warehouse.stored as st
    from tracehouse.reports.write import write_run_report

    spent: list[tuple[float, str]] = []
    originals = {"_rows": rr._rows, "stored_rows": st._rows, "materialize": st.materialize}

    def rows(con, sql, params):
        start = time.perf_counter()
        out = originals["_rows"](con, sql, params)
        spent.append((time.perf_counter() - start, "query " + " ".join(sql.split())[:90]))
        return out

    def materialize(con, views, **kw):
        start = time.perf_counter()
        originals["materialize"](con, views, **kw)
        scope = " (one step)" if kw.get("where") else ""
        spent.append((time.perf_counter() - start, f"materialize {', '.join(views)}{scope}"))

    rr._rows, st._rows, st.materialize = rows, rows, materialize  # the report's queries and its step pick's
    try:
        start = time.perf_counter()
        write_run_report(wh, run_id, "md", path)
        total = time.perf_counter() - start
    finally:
        rr._rows, st._rows, st.materialize = (
            originals["_rows"],
            originals["stored_rows"],
            originals["materialize"],
        )
    spent.append((total - sum(s for s, _ in spent), "the rest (connect, small queries, rendering)"))
    return sorted(spent, reverse=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--activities", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="Keep the run and warehouse in this folder.")
    ap.add_argument("--reuse", action="store_true", help="With --keep: reuse the warehouse kept there.")
    ap.add_argument("--reps", type=int, default=1, help="Render each format this many times (best is shown).")
    ap.add_argument("--profile", action="store_true", help="Print where one render's time goes.")
    args = ap.parse_args()
    b = run(args.activities, args.keep, args.reuse, args.reps, args.profile)
    print(f"| run | {b.activities:,} GPU activities, {b.shape} |")
    ingest = "reused" if b.ingest_s is None else f"{b.synth_s:.1f} s / {b.ingest_s:.1f} s"
    print(f"| synthesize / ingest | {ingest} |")
    for fmt, seconds in b.render_s.items():
        print(
            f"| report {fmt} | {seconds:.2f} s ({seconds / TARGET_S:.2f} x the {TARGET_S:.0f} s target; "
            f"{b.render_cpu_s[fmt]:.2f} CPU-s) |"
        )
    for seconds, what in b.profile:
        if seconds >= 0.005:
            print(f"| {what} | {seconds:.3f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
