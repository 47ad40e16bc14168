"""Benchmark: `tracehouse diff A B` of two stored runs answers in ~1-2 s (issue 17; it took 10-17 s).

Two synthesized serving-decode runs (--ranks, --steps; the second with its nvjet GEMMs 8 % slower) are
ingested and derived as `tracehouse ingest --wait` does (warehouse.derived: the diff's views kept), or real traces
given with --files A B. Timed, each as a fresh process (`python cli.py diff`: interpreter and imports
included), in md, html and json, best of --reps:
  - stored: the diff's views read kept from derived/ (what every diff after the derive does)
  - cold:   the derived rows removed first, so the diff computes every figure from the tables (a run
            ingested with --no-derive, or not derived yet); derived again after each
Wall and CPU seconds (user + system of the process) are printed; exits 1 when a stored diff takes 2 CPU
seconds or more (CPU, so that a machine shared with other work does not fail it; wall is what a person
waits on an idle machine).

    .venv/bin/python bench/diff_bench.py [--ranks 4] [--steps 16] [--reps 3] [--files A B]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_S = 2.0


def _diff(wh: Path, a: str, b: str, fmt: str, out: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one `python cli.py diff` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "cli.py"),
            "--warehouse",
            str(wh),
            "diff",
            a,
            b,
            "--format",
            fmt,
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--files", nargs=2, type=Path, help="two trace files or run folders instead of synthetic runs"
    )
    a = ap.parse_args(argv)
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse.derived import derive
    from tracehouse.warehouse.store import Warehouse

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if a.files:
            paths = a.files
        else:
            paths = [
                write_scenario("serving-decode", root / "a", ranks=a.ranks, steps=a.steps, seed=0),
                write_scenario(
                    "serving-decode",
                    root / "b",
                    ranks=a.ranks,
                    steps=a.steps,
                    seed=1,
                    slow_kernel=("nvjet", 1.08),
                ),
            ]
        wh = Warehouse(root / "wh")
        ids = [ingest_paths(wh, [p])[0].run_id for p in paths]
        print(f"diff: {' vs '.join(str(p) for p in paths)}")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print("| format | stored: wall / CPU s | cold: wall / CPU s |\n|---|---:|---:|")
        worst = 0.0
        for fmt in ("md", "html", "json"):
            stored = min(_diff(wh.root, *ids, fmt, root / f"x.{fmt}") for _ in range(a.reps))
            cold = []
            for _ in range(a.reps):
                shutil.rmtree(wh.root / "derived", ignore_errors=True)
                cold.append(_diff(wh.root, *ids, fmt, root / f"x.{fmt}"))
                derive(wh, ids)
            worst = max(worst, stored[1])
            c = min(cold)
            print(f"| {fmt} | {stored[0]:.2f} / {stored[1]:.2f} | {c[0]:.2f} / {c[1]:.2f} |")
    if worst >= TARGET_S:
        print(f"FAIL: a stored diff took {worst:.2f} CPU s (target < {TARGET_S} s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
