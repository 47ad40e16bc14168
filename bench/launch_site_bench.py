"""Benchmark: the trace's Python stacks of kernel_launch_site as the frames grow (linear, not quadratic).

A launch's stack is every Python frame of its thread that encloses its launch frame. The plain join (each
launch frame against every frame of its thread) grows as frames x launches; the view finds the same pairs
in a sorted pass and a bucketed join. This ingests one run (a real trace given with --trace, else a
synthesized serving run), then copies its frames and launches K times along the time axis (temp tables
over the warehouse's, so the view reads K times the frames of one thread) and times both on each K,
checking that they give the same rows.

    .venv/bin/python bench/launch_site_bench.py [--trace FILE] [--copies 1,4,16] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracehouse.ingest.load import ingest_paths
from tracehouse.synth import write_scenario
from tracehouse.warehouse.catalog import connect, view_files
from tracehouse.warehouse.store import Warehouse

# the definition the view's CTEs from frame_marks to enclosing replace (tests/test_sites_layers_situations.py)
PLAIN_JOIN = """
enclosing AS (
    SELECT l.run_id, l.rank, l.leaf_id, a.frame_id, a.start_ns, a.dur_ns
    FROM launch_frames AS l
    JOIN python_frames AS a
      ON a.run_id = l.run_id AND a.rank = l.rank AND a.pid = l.pid AND a.tid = l.tid
     AND a.start_ns <= l.start_ns AND a.start_ns + a.dur_ns >= l.end_ns
),
"""


def with_plain_join(text: str) -> str:
    """kernel_launch_site's SQL with its enclosing frames found by the plain join (the definition)."""
    return (
        text[: text.index("frame_marks AS (")]
        + PLAIN_JOIN.lstrip("\n")
        + text[text.index("-- innermost first") :]
    )


def stacks_query(plain: bool) -> str:
    """The view's trace stacks (its CTEs up to trace_frames), with the plain join when `plain`."""
    text = view_files()["kernel_launch_site"].read_text()
    head = text[text.index("WITH launch_frames AS (") : text.index("-- the capture's stacks")]
    if plain:
        head = with_plain_join(head)
    return head.rstrip().rstrip(",") + "\nSELECT count(*), sum(hash(key_id, depth, name)) FROM trace_frames"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, help="a trace with Python stacks (default: a synthesized run)")
    parser.add_argument("--copies", default="1,4,16", help="K values: the frames copied K times")
    parser.add_argument("--keep", type=Path, help="keep the warehouse here")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="site-bench-"))
    try:
        if args.trace is None:
            args.trace = write_scenario("serving-decode", tmp / "run", ranks=1, steps=8, layers=24, seed=3)
        wh = Warehouse(args.keep or tmp / "wh")
        [outcome] = ingest_paths(wh, [args.trace], derive="none")
        con = connect(wh, lockdown=False, kept=False)
        frames, launches = con.execute(
            "SELECT (SELECT count(*) FROM python_frames), "
            "(SELECT count(DISTINCT python_frame_id) FROM kernels WHERE python_frame_id IS NOT NULL)"
        ).fetchone()
        print(
            f"{args.trace.name}: {frames:,} Python frames, {launches:,} launch frames (run {outcome.run_id})"
        )
        print(
            "| copies | frames | launch frames | plain join (s) | the view's (s) | plain / view | same rows |"
        )
        print("|---:|---:|---:|---:|---:|---:|---|")
        span = con.execute("SELECT max(start_ns + dur_ns) - min(start_ns) + 1 FROM python_frames").fetchone()[
            0
        ]
        for k in [int(x) for x in args.copies.split(",")]:
            shift = f"k * {span}"
            con.execute(
                "CREATE OR REPLACE TEMP TABLE python_frames AS SELECT * REPLACE "
                f"(frame_id + k * 1000000000 AS frame_id, start_ns + {shift} AS start_ns) "
                f"FROM catalog.main.python_frames, range({k}) AS t(k)"
            )
            con.execute(
                "CREATE OR REPLACE TEMP TABLE kernels AS SELECT * REPLACE "
                "(python_frame_id + k * 1000000000 AS python_frame_id) "
                f"FROM catalog.main.kernels, range({k}) AS t(k)"
            )
            timed = {}
            for plain in (False, True):
                t0 = time.perf_counter()
                timed[plain] = (con.execute(stacks_query(plain)).fetchone(), time.perf_counter() - t0)
            same = timed[True][0] == timed[False][0]
            print(
                f"| {k} | {frames * k:,} | {launches * k:,} | {timed[True][1]:.3f} | {timed[False][1]:.3f} "
                f"| {timed[True][1] / timed[False][1]:.1f}x | {'yes' if same else 'NO'} |"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
