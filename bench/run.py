"""Every tracehouse benchmark in one command; prints a table of ratios and writes bench/results.md.

    python bench/run.py [--size BYTES] [--only NAME[,NAME...]] [--quick] [--reps N] [--out FILE]

Benchmarks (NAME): real, synth, rss, ranks, reports.  See bench/README.md for what each ratio means
and its target.  Everything that is compared is measured in this one process, interleaved (A, B, C,
A, B, C, ...), and each figure is the best of its repetitions, so that a noisy machine moves both
sides of a ratio together; read the ratios, not the bare times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import types
import zlib
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb
import orjson
import tracehouse.ingest.run as ingest_run
from tracehouse.warehouse.memory import memory_limit
from tracehouse.warehouse.quoting import sql_string

from bench.decoders import inflate, isal_zlib, msgspec
from bench.ingest_timing import ingest_by_stage, ingest_end_to_end
from bench.measure import MB, Report, Timing, mbps, md_table, measure, say, verdict
from bench.trace_bench import bench_trace

REAL_TRACE = ROOT.parent / "shared" / "traces" / "nvidia" / "trace_diff" / "control.json.gz"
DEFAULT_SIZE = 300_000_000
QUICK_SIZE = 50_000_000
ALL = ("real", "synth", "rss", "ranks", "tuning", "reports")

# Targets (issue 2 and issue 8); see bench/README.md.
TARGET_RSS_4GB = 1024.0  # MB of peak RSS for a 4 GB trace
TARGET_RANKS = 1.7  # speed-up of 4 ranks in parallel on 2 cores


# --------------------------------------------------------------------------------------------------
# benchmark: peak RSS


RSS_CHILD = r"""
import json, sys, tempfile, shutil
from pathlib import Path
sys.path.insert(0, sys.argv[1])
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
from tracehouse.warehouse.derived import is_derived
from tracehouse.ingest.load import ingest_paths
from tracehouse.warehouse.store import Warehouse
base = hwm()
wh = tempfile.mkdtemp(dir=sys.argv[3])
try:
    out = ingest_paths(Warehouse(wh), [Path(sys.argv[2])])  # as `tracehouse ingest --wait`: derive included
    ok = bool(out) and out[0].stored and not out[0].problems
    analysed = ok and is_derived(Warehouse(wh), out[0].run_id)
finally:
    shutil.rmtree(wh, ignore_errors=True)
print(json.dumps({"baseline_mb": base, "peak_mb": hwm(), "ok": ok, "analysed": analysed}))
"""


def peak_rss(path: Path, tmp: Path) -> dict:
    """Ingest in a fresh process; VmHWM from its own /proc/<pid>/status (one file: ingest is in-process)."""
    # the low-memory path: a fixed 640MB DuckDB limit (unset, the limit follows the machine's free memory)
    env = {**os.environ, "TRACEHOUSE_MEMORY_LIMIT": os.environ.get("TRACEHOUSE_MEMORY_LIMIT", "640MB")}
    proc = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, str(ROOT), str(path), str(tmp)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"RSS child failed: {proc.stderr[-2000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr[-2000:]}


def bench_rss(traces: list[tuple[str, Path]], tmp: Path, report: Report) -> None:
    points = []
    for label, path in traces:
        say(f"[rss] {label}: {path}")
        json_bytes, _ = inflate(path, isal_zlib or zlib, keep=False)
        r = peak_rss(path, tmp)
        gb = json_bytes / 1e9
        points.append((gb, r["peak_mb"]))
        report.add(
            "rss",
            f"peak RSS, {label} ({json_bytes / MB:.0f} MB JSON)",
            f"{r['peak_mb']:.0f} MB ({r['peak_mb'] / gb:.0f} MB/GB; imports alone {r['baseline_mb']:.0f} MB; "
            f"derive {'included' if r['analysed'] else 'FAILED (see the notes)'})",
        )
        if not r["analysed"]:
            report.notes.append(f"rss, {label}: the run was not derived: {r['stderr']}")
    if len(points) >= 2:
        (g1, p1), (g2, p2) = min(points), max(points)
        slope = (p2 - p1) / (g2 - g1) if g2 > g1 else 0.0
        at4 = max(p1, p2) + max(slope, 0.0) * (4.0 - g2)
        report.add("rss", "growth of peak RSS with trace size (between the two)", f"{slope:.0f} MB per GB")
        measured = g2 >= 3.9  # run with --size 4000000000: the synth row is the 4 GB measurement itself
        report.add(
            "rss",
            "peak RSS for a 4 GB trace, "
            + ("measured (the synth row)" if measured else "extrapolated linearly"),
            f"{p2 if measured else at4:.0f} MB",
            f"< {TARGET_RSS_4GB:.0f} MB",
            verdict((p2 if measured else at4) < TARGET_RSS_4GB),
        )
        fixed = os.environ.get("TRACEHOUSE_MEMORY_LIMIT", "640MB")
        report.notes.append(
            f"rss: DuckDB's memory_limit (TRACEHOUSE_MEMORY_LIMIT, here {fixed}) caps most of the peak; if "
            "the cap holds, the linear 4 GB extrapolation overstates it. Measure it: "
            "`python bench/run.py --size 4000000000 --only rss` (needs ~12 GB free in --tmp)."
        )
        report.details.append(
            "Peak RSS: each ingest runs in a fresh Python process that reads VmHWM from its own "
            "/proc/self/status when done (a single file is ingested in-process, DuckDB included). The 4 GB "
            "figure extrapolates the line through the two points (flat when it falls); it is an estimate, not a measurement."
        )


# --------------------------------------------------------------------------------------------------
# benchmark: ranks in parallel


class _OneCPU(types.ModuleType):
    """Stands in for `os` inside ingest.run so that ingest_files sees one CPU and runs ranks in turn.
    Only ingest/run.py sees it; DuckDB's thread count (set in ingest/rank.py) is unchanged."""

    def __init__(self):
        super().__init__("os_one_cpu")

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def cpu_count():
        return 1


def ingest_run_dir(run_dir: Path, tmp: Path, sequential: bool) -> None:
    saved = ingest_run.os
    if sequential:
        ingest_run.os = _OneCPU()
    try:
        ingest_end_to_end(run_dir, tmp)
    finally:
        ingest_run.os = saved


def bench_ranks(run_dir: Path, reps: int, tmp: Path, report: Report) -> None:
    files = sorted(p for p in run_dir.iterdir() if ingest_run.is_trace_file(p))
    json_bytes = sum(inflate(p, isal_zlib or zlib, keep=False)[0] for p in files)
    t: dict[str, Timing] = {}
    for rnd in range(reps):
        say(f"[ranks] round {rnd + 1}/{reps}: {len(files)} files, {json_bytes / MB:.0f} MB JSON")
        measure(t, "sequential", lambda: ingest_run_dir(run_dir, tmp, sequential=True))
        measure(t, "parallel", lambda: ingest_run_dir(run_dir, tmp, sequential=False))
    speedup = t["sequential"].best / t["parallel"].best
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    report.add(
        "ranks",
        f"{len(files)} ranks ({json_bytes / MB:.0f} MB JSON): sequential",
        f"{mbps(json_bytes, t['sequential'].best):.1f} MB/s",
    )
    report.add(
        "ranks",
        f"{len(files)} ranks: parallel ({min(len(files), os.cpu_count() or 1)} processes)",
        f"{mbps(json_bytes, t['parallel'].best):.1f} MB/s",
    )
    report.add(
        "ranks",
        f"**parallel / sequential speed-up on {os.cpu_count()} cores**",
        f"**{speedup:.2f}x**",
        f">= {TARGET_RANKS}x",
        verdict(speedup >= TARGET_RANKS),
    )
    if load > 1.5:
        report.notes.append(
            f"ranks: the 1-minute load average was {load:.1f} when the ranks benchmark ended; with "
            "other processes on the 2 cores, a parallel speed-up cannot show; rerun it "
            "(`--only ranks`) on an idle machine."
        )


# --------------------------------------------------------------------------------------------------
# benchmark: candidate settings, measured against ingest as shipped (nothing in ingest/ is edited)


def _connect_in_memory(work: Path):
    """ingest.rank.work_connection, but an in-memory database: same memory_limit, same spill folder."""
    con = duckdb.connect()
    con.execute(f"SET memory_limit = {sql_string(memory_limit())}")
    con.execute(f"SET temp_directory = {sql_string(work / 'spill')}")
    con.execute("SET preserve_insertion_order = true")
    return con


def _no_insertion_order(con) -> None:
    con.execute("SET preserve_insertion_order = false")


TUNING = {
    "as shipped (on-disk rank.duckdb)": {},
    "in-memory DuckDB (same memory_limit and spill folder)": {"connect": _connect_in_memory},
    "preserve_insertion_order = false for the transforms": {"before_transforms": _no_insertion_order},
    "both": {"connect": _connect_in_memory, "before_transforms": _no_insertion_order},
}
STAGE_KEYS = {"decode": "2 ", "transforms": "3 ", "parquet": "4 ", "close": "5 "}


def bench_tuning(label: str, path: Path, reps: int, tmp: Path, report: Report) -> None:
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in TUNING}
    for rnd in range(reps):
        say(f"[tuning] {label} round {rnd + 1}/{reps}")
        for name, kw in TUNING.items():
            runs[name].append(ingest_by_stage(path, tmp, **kw))

    def total(s: dict[str, float]) -> float:
        return sum(v for k, v in s.items() if not k.startswith(" "))

    base = min(total(s) for s in runs[next(iter(TUNING))])
    rows = []
    for name, got in runs.items():
        best = min(total(s) for s in got)
        cells = [name] + [
            f"{min(next(v for k, v in s.items() if k.startswith(p)) for s in got):.3f}"
            for p in STAGE_KEYS.values()
        ]
        rows.append(cells + [f"{best:.3f}", f"{base / best:.2f}x"])
        if name != next(iter(TUNING)):
            report.add("tuning", f"{label}: stages with {name}", f"{base / best:.2f}x as fast")
    report.details.append(
        f"### tuning on {label} (`{path.name}`), best of {reps}\n\n"
        + md_table(
            ["variant", "decode s", "transforms s", "parquet s", "close s", "all stages s", "speed-up"], rows
        )
    )


# --------------------------------------------------------------------------------------------------
# benchmark: run report latency (issue 6)


TARGET_REPORT_S = 2.0  # `tracehouse report` of a run with 1M GPU activities, after ingest
REPORT_ACTIVITIES = 1_000_000
QUICK_REPORT_ACTIVITIES = 100_000


def bench_report(report: Report, reps: int, activities: int, tmp: Path) -> None:
    """bench/report_bench.py: a synthesized decode run of `activities` GPU activities, ingested, then its
    run report written in each format (each a fresh connection, as `tracehouse report` does)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("report_bench", Path(__file__).parent / "report_bench.py")
    report_bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = report_bench  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(report_bench)
    say(
        f"[report] synthesizing and ingesting a run of {activities:,} GPU activities; {reps} render(s) per format"
    )
    b = report_bench.run(activities, keep=tmp / "report-bench", reps=reps, profile=True)
    for fmt, seconds in b.render_s.items():
        report.add(
            "reports",
            f"`tracehouse report` ({fmt}) of a run of {b.activities:,} GPU activities, after ingest "
            f"(best of {reps})",
            f"{seconds:.2f} s ({b.render_cpu_s[fmt]:.1f} CPU-s)",
            f"< {TARGET_REPORT_S:.0f} s" if b.activities >= REPORT_ACTIVITIES else "",
            verdict(seconds < TARGET_REPORT_S) if b.activities >= REPORT_ACTIVITIES else "",
        )
    top = "; ".join(f"{what} {seconds:.2f} s" for seconds, what in b.profile[:4])
    report.details.append(
        f"report: {b.activities:,} GPU activities ({b.shape}), synthesized in {b.synth_s:.0f} s and ingested in "
        f"{b.ingest_s:.0f} s. Where one md render's time goes, largest first: {top}."
    )


# --------------------------------------------------------------------------------------------------
# benchmark: trend latency (issue 7)


TARGET_TREND_S = 3.0  # `tracehouse trend` over 1,000 runs


def bench_trend(report: Report, reps: int) -> None:
    """bench/trend_bench.py: `tracehouse trend` (the CLI's code path: runs from Parquet, run metrics from
    the per-run store, the rule SQL, Markdown) over a warehouse of 1,000 runs in 4 series."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("trend_bench", Path(__file__).parent / "trend_bench.py")
    trend_bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = trend_bench  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(trend_bench)
    say(f"[trend] building a warehouse of 1,000 runs; {reps} timed round(s)")
    b = trend_bench.run(1000, 4, reps)
    report.add(
        "reports",
        f"`tracehouse trend` over {b.runs:,} runs, {b.series} series (in process, best of {reps})",
        f"{b.in_process_s:.2f} s",
        f"< {TARGET_TREND_S:.0f} s",
        verdict(b.in_process_s < TARGET_TREND_S),
    )
    if b.fresh_process_s is not None:
        report.add(
            "reports",
            "`tracehouse trend` over 1,000 runs, fresh process (imports included)",
            f"{b.fresh_process_s:.2f} s",
        )
    report.details.append(
        f"trend: {b.runs:,} runs in {b.series} series (4 ingested, the rest copies with their own run id, commit "
        f"and noisy metrics in the per-run store), built in {b.build_s:.0f} s; {b.flagged_shifts} shifts flagged "
        f"({b.series * 2} injected). A run not yet in the metric store costs {b.first_metrics_s_per_run:.2f} s "
        "once (its run_metrics are computed by the first trend that needs them)."
    )


# --------------------------------------------------------------------------------------------------
# the machine, the synthesized traces, main


def machine() -> list[tuple[str, str]]:
    import duckdb
    import pyarrow

    cpu = _proc_field("/proc/cpuinfo", "model name", lambda v: v) or platform.processor() or "unknown"
    mem = (
        _proc_field("/proc/meminfo", "MemTotal", lambda v: f"{int(v.split()[0]) / 1024 / 1024:.1f} GiB")
        or "unknown"
    )
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    rows = [
        ("date (UTC)", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")),
        ("nproc", str(os.cpu_count())),
        ("memory", mem),
        ("CPU", cpu),
        ("load average at start (1, 5, 15 min)", ", ".join(f"{x:.2f}" for x in load)),
        ("OS", platform.platform()),
        ("python", platform.python_version()),
        ("duckdb", duckdb.__version__),
        ("pyarrow", pyarrow.__version__),
        ("orjson", orjson.__version__),
        ("msgspec", getattr(msgspec, "__version__", "not installed")),
        ("isal", _version("isal") or "not installed (zlib inflates)"),
        ("HTA", _version("HolisticTraceAnalysis") or "not installed"),
    ]
    return rows


def _proc_field(path: str, key: str, fmt) -> str | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return fmt(line.split(":", 1)[1].strip())
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def synthesize(out: Path, ranks: int, size: int) -> Path:
    from tracehouse.synth import write_scenario

    t0 = time.perf_counter()
    write_scenario("serving-prefill", out, ranks=ranks, target_size=size)
    say(
        f"[synth] wrote {ranks} rank(s), {size / MB:.0f} MB target, in {time.perf_counter() - t0:.1f} s: {out}"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--size",
        type=int,
        default=None,
        help=f"bytes of uncompressed JSON of the synthesized trace (default {DEFAULT_SIZE:,}; "
        f"--quick {QUICK_SIZE:,})",
    )
    ap.add_argument(
        "--ranks-size",
        type=int,
        default=None,
        help="bytes of JSON over the 4 ranks of the parallel benchmark (default: half of --size)",
    )
    ap.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(ALL)}")
    ap.add_argument("--quick", action="store_true", help="small synthesized traces, one round each")
    ap.add_argument(
        "--reps", type=int, default=None, help="rounds per comparison (default 3 real, 2 synth; quick 1)"
    )
    ap.add_argument(
        "--out", default=str(Path(__file__).parent / "results.md"), help="the markdown file to write"
    )
    ap.add_argument("--tmp", default=None, help="scratch folder (default: a new temp folder)")
    args = ap.parse_args(argv)

    only = set(ALL) if not args.only else {n.strip() for n in args.only.split(",")}
    unknown = only - set(ALL)
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; choose from {', '.join(ALL)}")
    size = args.size or (QUICK_SIZE if args.quick else DEFAULT_SIZE)
    ranks_size = args.ranks_size or size // 2
    reps_real = args.reps or (1 if args.quick else 3)
    reps_big = args.reps or (1 if args.quick else 2)

    started = time.perf_counter()
    described = machine()
    report = Report()
    tmp = Path(tempfile.mkdtemp(prefix="tracehouse-bench-", dir=args.tmp))
    try:
        real = REAL_TRACE if REAL_TRACE.is_file() else None
        if real is None and (only & {"real", "rss"}):
            report.notes.append(f"{REAL_TRACE} is missing (no ../shared checkout): real-trace rows skipped.")
        synth_file = None
        if only & {"synth", "rss", "tuning"}:
            d = synthesize(tmp / "synth-1rank", 1, size)
            synth_file = next(p for p in d.iterdir() if ingest_run.is_trace_file(p))
        if "real" in only and real is not None:
            bench_trace("real", real, reps_real, tmp, report)
        if "synth" in only:
            bench_trace("synth", synth_file, reps_big, tmp, report)
        if "rss" in only:
            traces = ([("real", real)] if real is not None else []) + [("synth", synth_file)]
            bench_rss(traces, tmp, report)
        if "tuning" in only:
            if real is not None:
                bench_tuning("real", real, reps_real, tmp, report)
            if synth_file is not None:
                bench_tuning("synth", synth_file, 1, tmp, report)
        if synth_file is not None:
            shutil.rmtree(synth_file.parent, ignore_errors=True)
        if "ranks" in only:
            bench_ranks(synthesize(tmp / "synth-4ranks", 4, ranks_size), reps_big, tmp, report)
        if "reports" in only:
            bench_report(report, reps_big, QUICK_REPORT_ACTIVITIES if args.quick else REPORT_ACTIVITIES, tmp)
            bench_trend(report, reps_real)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.perf_counter() - started

    table = md_table(
        ["bench", "measured", "value", "target", ""],
        [[r.bench, r.what, r.value, r.target, r.verdict] for r in report.rows],
    )
    print(table)
    for note in report.notes:
        print(f"note: {note}")
    cmd = "python bench/run.py" + (
        "" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:])
    )
    text = (
        "\n\n".join(
            [
                "# tracehouse benchmarks",
                (
                    f"Written by `{cmd}` in {elapsed:.0f} s. Every ratio compares figures measured side by side in this "
                    "run (interleaved rounds, best of each); see bench/README.md for what they mean."
                ),
                "## Machine",
                md_table(["", ""], [[k, v] for k, v in described]),
                "## Ratios",
                table,
                *(["Notes:\n\n" + "\n".join(f"- {n}" for n in report.notes)] if report.notes else []),
                "## Details",
                *report.details,
            ]
        )
        + "\n"
    )
    Path(args.out).write_text(text)
    say(f"wrote {args.out} ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
