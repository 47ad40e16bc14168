"""Benchmark: the derive of a run (warehouse.derived.derive: every `materialized: per_run` view kept) as a
multiple of its ingest time (issue 35: <= 1x; 1.83x on a 1 GB run before the one store).

A synthesized serving-decode run of one rank (`--size`, uncompressed JSON; default 200 MB) is ingested into
a fresh warehouse without deriving (`ingest_paths(..., derive="none")`), then derived, each timed, in the
same process, round after round (`--reps`); each side is the best of its rounds (bench/README.md: why
ratios). The catalogue file is built before the first round. Prints a markdown table with each view's
seconds of the best derive, and exits 1 when the ratio is over the target.

    python bench/derive_bench.py                      # 200 MB, 2 rounds
    python bench/derive_bench.py --size 1GB --reps 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 1.0  # derive time / ingest time


def _size(text: str) -> int:
    units = {"GB": 10**9, "MB": 10**6, "KB": 10**3}
    for unit, factor in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="200MB", help="uncompressed JSON of the run (e.g. 200MB, 1GB)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tmp", type=Path, default=None, help="scratch folder (about 2x the size free)")
    a = ap.parse_args(argv)
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.derived import derive
    from tracehouse.warehouse.store import Warehouse

    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        root = Path(tmp)
        run = write_scenario("serving-decode", root / "run", ranks=1, target_size=_size(a.size))
        connect(Warehouse(root / "warm")).close()  # the catalogue file, built once, outside the timings
        ingests, derives = [], []
        for _ in range(a.reps):
            wh = Warehouse(root / "wh")
            shutil.rmtree(wh.root, ignore_errors=True)
            t = time.perf_counter()
            [outcome] = ingest_paths(wh, [run], derive="none")
            ingests.append(time.perf_counter() - t)
            lines: list[str] = []
            t = time.perf_counter()
            failed = derive(wh, [outcome.run_id], progress=lines.append)[outcome.run_id]
            derives.append((time.perf_counter() - t, lines))
            if failed:
                print(f"FAIL: the derive failed: {failed}")
                return 1
        ingest_s, (derive_s, lines) = min(ingests), min(derives)
    ratio = derive_s / ingest_s
    print(
        f"derive of a {a.size} serving-decode run; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print("| row | value | target |\n|---|---:|---:|")
    print(f"| ingest (no derive) | {ingest_s:.1f} s | |")
    print(f"| derive | {derive_s:.1f} s | |")
    print(f"| **derive / ingest** | {ratio:.2f}x | <= {TARGET:.1f}x |")
    print("\nthe best derive, view by view (warehouse.derived's progress lines):\n")
    for line in lines:
        print(f"- {line}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
