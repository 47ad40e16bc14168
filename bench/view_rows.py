"""Every view's rows and time, to compare two versions of sql/ (a refactor must not change a row).

    python bench/view_rows.py build WAREHOUSE [--real]       # ingest the synthesized runs (and real traces)
    python bench/view_rows.py dump WAREHOUSE OUT [--views a,b] [--reps N]
    python bench/view_rows.py compare OUT_BEFORE OUT_AFTER

`build` ingests synthesized scenarios and situations (`tracehouse synth`) into one warehouse, one run
each, and with --real a few traces of ../shared/traces that exist. `dump` computes every view of sql/ over
that warehouse from the tables (no kept rows), sorts its rows by every column, writes them to
OUT/<view>.parquet and the best of N timed reads (a fresh query each, all rows fetched) to
OUT/times.json. `compare` says, view by view, whether the sorted rows are identical (same columns and
types, same rows, bit for bit) and the time before and after; it exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SYNTHESIZED = (
    ("serving-decode", ["--ranks", "2"]),
    ("serving-prefill", []),
    ("training", ["--ranks", "2"]),
    ("overlap-same-stream", []),
    ("same-stream-overlap", []),
    ("steps-interleaved", []),
    ("async-launch-ahead", []),
    ("host-runs-ahead", []),
    ("gpu-queued-at-window-start", []),
    ("stream-sync-wait", []),
    ("dataloader-stall", []),
    ("two-stream-overlap", []),
    ("ddp-backward-thread", []),
    ("kineto-2021", []),
    ("ranks-two-hosts-clock-offset", []),
    ("serving-requests", []),
    ("report-step-figures", []),
    ("vllm-piecewise-graphs", []),
    ("warmup-in-window", []),
    ("cpu-only", []),
)
REAL = (
    "nvidia/b200_eager_rank0.json.gz",
    "nvidia/a100_multistream_rank0.json.gz",
    "nvidia/a100_nccl_rank0.json.gz",
    "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "amd/mi300_qwen1.5-0.5b.json.gz",
    "legacy/resnet50_2021_v100.pt.trace.json.gz",
    "nvidia/critical_path/alexnet.json.gz",
    "nsys/h100_2gpu_1s.sqlite",
    "multirank/sampled_2ranks",
)
TRACES = ROOT.parent / "shared" / "traces"


def build(warehouse: Path, real: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="view-rows-") as tmp:
        sources = []
        for name, options in SYNTHESIZED:
            out = Path(tmp) / name
            subprocess.run(
                ["tracehouse", "synth", name, "-o", str(out), *options], check=True, capture_output=True
            )
            sources.append(out)
        if real:
            sources += [TRACES / p for p in REAL if (TRACES / p).exists()]
        for source in sources:
            subprocess.run(
                ["tracehouse", "--warehouse", str(warehouse), "ingest", "--no-derive", str(source)],
                check=True,
                capture_output=True,
            )
            print("ingested", source.name, flush=True)


def dump(warehouse: Path, out: Path, views: list[str] | None, reps: int) -> None:
    from tracehouse.warehouse.catalog import connect, ordered_views
    from tracehouse.warehouse.quoting import sql_string
    from tracehouse.warehouse.store import Warehouse

    out.mkdir(parents=True, exist_ok=True)
    con = connect(Warehouse(warehouse), lockdown=False, kept=False)
    times, types = {}, {}
    for name, _ in ordered_views():
        if views and name not in views:
            continue
        best = None
        for _ in range(reps):
            start = time.perf_counter()
            con.execute(f"SELECT * FROM {name}").to_arrow_table()
            best = min(best or 1e9, time.perf_counter() - start)
        described = con.execute(f"DESCRIBE {name}").fetchall()
        columns = [r[0] for r in described]
        order = ", ".join(f'"{c}"' for c in columns)
        target = out / f"{name}.parquet"
        con.execute(
            f"COPY (SELECT * FROM {name} ORDER BY {order}) TO {sql_string(str(target))} (FORMAT parquet)"
        )
        times[name] = best
        types[name] = [list(r[:2]) for r in described]
        print(f"{name:32s} {best:8.3f} s", flush=True)
    (out / "times.json").write_text(json.dumps(times, indent=1))
    (out / "types.json").write_text(json.dumps(types, indent=1))


def compare(before: Path, after: Path) -> int:
    import duckdb

    con = duckdb.connect()
    t0 = json.loads((before / "times.json").read_text())
    t1 = json.loads((after / "times.json").read_text())
    failed = 0
    for view in sorted(set(t0) | set(t1)):
        a, b = before / f"{view}.parquet", after / f"{view}.parquet"
        if not (a.exists() and b.exists()):
            print(f"{view:32s} only {'before' if a.exists() else 'after'}")
            failed += 1
            continue
        cols_a = json.loads((before / "types.json").read_text())[view]
        cols_b = json.loads((after / "types.json").read_text())[view]
        n = con.execute(f"SELECT count(*) FROM '{a}'").fetchone()[0]
        same = (
            cols_a == cols_b
            and not con.execute(
                f"SELECT count(*) FROM ((SELECT * FROM '{a}' EXCEPT ALL SELECT * FROM '{b}') "
                f"UNION ALL (SELECT * FROM '{b}' EXCEPT ALL SELECT * FROM '{a}'))"
            ).fetchone()[0]
        )
        failed += not same
        print(
            f"{view:32s} {n:8d} rows  {'identical' if same else 'DIFFERENT'}  {t0[view]:7.3f} s -> {t1[view]:7.3f} s"
        )
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("warehouse", type=Path)
    b.add_argument("--real", action="store_true")
    d = sub.add_parser("dump")
    d.add_argument("warehouse", type=Path)
    d.add_argument("out", type=Path)
    d.add_argument("--views", default="")
    d.add_argument("--reps", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "build":
        build(args.warehouse, args.real)
    elif args.command == "dump":
        dump(args.warehouse, args.out, [v for v in args.views.split(",") if v], args.reps)
    else:
        return compare(args.before, args.after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
