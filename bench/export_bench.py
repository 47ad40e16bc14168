"""Benchmark: `tracehouse export` of a large synthesized run, peak memory bounded (issue 18).

A synthesized serving-decode run is grown to about --size bytes of uncompressed trace JSON (one or more
ranks), ingested once (analyses stored, as `tracehouse ingest` does), then exported in a child process per row, exactly as
`tracehouse export` does it (a fresh connection, every table streamed in start order); the child's peak RSS
(ru_maxrss of the waited child) and wall time are the row. Rows: perfetto with and without the analysis
tracks, and the Chrome-JSON variant. Several --size values show whether the peak grows with the run: the
exporter holds only the open slices of each track, DuckDB's sorts and the analysis views spill past the
connection's memory limit (reports.export.MEMORY_LIMIT: the memory policy's, warehouse.memory;
TRACEHOUSE_MEMORY_LIMIT sets it, and is passed to the children). Each row records the machine's
load average when it ended (the machine may be shared) and the notes of tracks the export could not draw.

    python bench/export_bench.py [--size 300000000 [--size ...]] [--ranks 1] [--tmp DIR] [--keep DIR] [--out FILE]

Prints one markdown table; --out appends it to FILE (bench/results.md's "export" section).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracehouse.ingest.load import ingest_paths
from tracehouse.reports.export import MEMORY_LIMIT
from tracehouse.synth import write_scenario
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

ROWS = [("perfetto", []), ("perfetto, no analysis", ["--no-analysis"]), ("json", ["--format", "json"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, action="append", help="uncompressed JSON bytes (repeatable)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--keep",
        default=None,
        help="keep the synthesized runs and their warehouse in this folder, and reuse them when there (a "
        "1 GB run takes ~15 min to write and ingest on 2 cores)",
    )
    ap.add_argument(
        "--rows",
        default=",".join(label for label, _ in ROWS),
        help="comma-separated rows to run (default all: " + ", ".join(label for label, _ in ROWS) + ")",
    )
    a = ap.parse_args()
    rows = [(label, extra) for label, extra in ROWS if label in {r.strip() for r in a.rows.split(",")}]
    sizes = sorted(a.size or [300_000_000])
    lines = [
        f"export: {platform.node()}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f}",
        "",
        f"memory limit {MEMORY_LIMIT}",
        "",
        "| trace JSON | GPU activities | host ops | ingest | row | wall | peak RSS | file | load | not drawn |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    with contextlib.ExitStack() as stack:
        tmp = a.keep or stack.enter_context(tempfile.TemporaryDirectory(dir=a.tmp))
        for size in sizes:
            root = Path(tmp) / f"s{size}-r{a.ranks}"
            json_bytes = size
            wh = Warehouse(root / "wh")
            done_file = root / "ingested"
            if done_file.exists():  # --keep: written and ingested by an earlier run
                run_id, ingest_s = done_file.read_text().split()
                ingest_s = float(ingest_s)
            else:
                run_dir = write_scenario(
                    "serving-decode", root / "run", ranks=a.ranks, layers=8, target_size=size, seed=1
                )
                t = time.perf_counter()
                [outcome] = ingest_paths(wh, [run_dir])  # analyses stored, as `tracehouse ingest`
                ingest_s = time.perf_counter() - t
                run_id = outcome.run_id
                done_file.write_text(f"{run_id} {ingest_s:.1f}")
            print(
                f"  {size / 1e6:.0f} MB ingested in {ingest_s:.0f} s (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            con = connect(wh)
            (gpu,) = con.execute("SELECT count(*) FROM kernels").fetchone()
            (host,) = con.execute("SELECT count(*) FROM cpu_ops").fetchone()
            con.close()
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            # a child per row; RUSAGE_CHILDREN only grows, so each row runs in its own grandchild measurer
            for label, extra in rows:
                out = root / ("x.json" if "json" in extra else "x.pftrace")
                measure = (
                    "import resource, subprocess, sys, time; t = time.perf_counter(); "
                    "r = subprocess.run(sys.argv[1:], check=False); w = time.perf_counter() - t; "
                    "print(w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)"
                )
                done = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        measure,
                        sys.executable,
                        str(ROOT / "cli.py"),
                        "--warehouse",
                        str(wh.root),
                        "export",
                        run_id,
                        "-o",
                        str(out),
                    ]
                    + extra,
                    check=False,
                    env=env,
                    capture_output=True,
                    text=True,
                )
                if done.returncode:
                    raise SystemExit(f"export failed: {done.stderr.strip()}")
                wall, peak_kb = done.stdout.strip().splitlines()[-1].split()
                skipped = [n for n in done.stderr.splitlines() if "not drawn" in n]
                counts = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
                print(f"  {label}: {counts}", flush=True)
                lines.append(
                    f"| {json_bytes / 1e6:.0f} MB | {gpu:,} | {host:,} | {ingest_s:.0f} s | {label} | "
                    f"{float(wall):.1f} s | {int(peak_kb) / 1024:.0f} MB | {out.stat().st_size / 1e6:.0f} MB | "
                    f"{os.getloadavg()[0]:.1f} | {len(skipped) or ''} |"
                )
                for n in skipped:
                    print(f"  {n}", flush=True)
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
