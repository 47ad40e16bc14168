"""First answer and repeated questions, as a user runs them: whole processes, HTA 0.5.0 beside tracehouse.

    python bench/first_answer.py                    # real traces of 10-60 MB JSON from ../shared/traces
    python bench/first_answer.py --reps 3 --out bench/results-first-answer.md
    python bench/first_answer.py --trace a.json.gz  # any trace file

For each trace, in the same run, interleaved (A, B, A, B, ...) and best of --reps rounds:
- **first answer**: HTA: one process that loads the trace (`TraceAnalysis`) and asks its temporal and
  GPU kernel breakdowns. tracehouse: `tracehouse ingest FILE` into a fresh warehouse, then the two
  equivalent answers as one `tracehouse sql` process reading both queries from stdin (gpu_timeline's
  `hta` rows; kernel_summary). As a user runs it: ingest publishes the run and returns (the `sql`
  process computes what it reads); also with `ingest --wait` (the run derived before ingest returns, in
  its own process, and the `sql` process reads kept rows).
- **repeated question**: HTA has no store: a new question is a new process that loads the trace again
  and asks one breakdown. tracehouse: one `tracehouse sql` process on the warehouse already built and
  derived (gpu_timeline's rows kept).
- `tracehouse sql "select count(*) from runs"` as one process, beside its floor (a Python process that
  imports duckdb and answers `select 1`: no `sql` process can be faster), and the two answers asked again on one
  Python Session (warehouse.session: the long-lived reader; catalogue opened once).

HTA is an optional extra (`pip install 'tracehouse[bench]'`, which pins pandas<3); without it, its rows
are skipped with the reason. Targets (issue 15): first answer >= 2x faster than HTA on 10-60 MB traces;
a repeated question >= 10x faster than HTA's reload; `sql` of a simple query <= 0.15 s.
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
CLI = [sys.executable, str(ROOT / "cli.py")]

TEMPORAL = "SELECT * FROM gpu_timeline WHERE variant = 'hta' ORDER BY rank, device"
KERNELS = "SELECT * FROM kernel_summary ORDER BY gpu_time_ns DESC, name"

HTA_FIRST = """
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_temporal_breakdown(visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
"""
HTA_ONE = """
import sys
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
"""

DUCKDB_FLOOR = "import duckdb; duckdb.connect().execute('select 1').fetchall()"

TARGET_FIRST = 2.0
TARGET_REPEAT = 10.0
TARGET_SQL_S = 0.3  # issue 35: a cold `tracehouse sql` process on a derived warehouse (no server)


def hta_available() -> str | None:
    """None when HTA 0.5.0 can be imported, else why not."""
    proc = subprocess.run(
        [sys.executable, "-c", "import hta, pandas; from hta.trace_analysis import TraceAnalysis"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        return (
            "HTA is not installed (pip install 'tracehouse[bench]': HolisticTraceAnalysis 0.5.0, pandas<3): "
            + (proc.stderr.strip().splitlines() or ["import failed"])[-1]
        )
    return None


def json_size(path: Path) -> int:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 24), b""))
    return path.stat().st_size


def default_traces(low: int = 10 * 10**6, high: int = 60 * 10**6) -> list[Path]:
    if not SHARED.is_dir():
        return []
    found = []
    for p in sorted(SHARED.rglob("*.json*")):
        if "capture_traces" in p.parts or not p.name.endswith((".json", ".json.gz")):
            continue
        if p.name == "execution_details.json":
            continue
        size = json_size(p)
        if low <= size <= high:
            found.append((size, p))
    return [p for _, p in sorted(found)]


CPU: dict[
    str, list[float]
] = {}  # CPU seconds (user + sys) of each measure's processes: less sensitive to load


def timed(cmd: list[str], stdin: str | None = None, env: dict | None = None) -> float:
    """Wall seconds of one process (its CPU seconds are added to LAST_CPU; its output is LAST_OUT)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    LAST_OUT[:] = [proc.stdout]
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed: {proc.stderr[-1500:]}")
    return seconds


LAST_CPU: list[float] = []
LAST_OUT: list[str] = []
# ingest's default is not to derive (issue 35); on a tree from before it, the default derived: "none" names the
# flag so that both trees answer the same two measures
DERIVE_MODES = {"none": ["--no-derive"], "wait": ["--wait"]}
FIRST_SUFFIX = {"none": "", "wait": " (ingest --wait)"}


def bench_trace(trace: Path, reps: int, tmp: Path, hta_skip: str | None) -> dict:
    # as an installed tool runs: its modules' bytecode cached (pip compiles what it installs; this checkout's
    # own modules are compiled once into __pycache__), also where PYTHONDONTWRITEBYTECODE is set
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "TRACEHOUSE_DERIVE")}
    env |= {"PYTHONPATH": str(ROOT)}

    trace_dir = tmp / "hta-trace"
    trace_dir.mkdir(exist_ok=True)
    link = trace_dir / trace.name
    if not link.exists():
        link.symlink_to(trace.resolve())
    times: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        times.setdefault(name, []).append(seconds)
        CPU.setdefault(name, []).append(sum(LAST_CPU))  # the processes timed since the last add
        LAST_CPU.clear()

    built = tmp / "wh-built"
    for r in range(reps):
        for mode, flags in DERIVE_MODES.items():
            wh = tmp / f"wh-{r}-{mode}"
            t = timed(CLI + ["--warehouse", str(wh), "ingest", str(trace)] + flags, env=env)
            t += timed(
                CLI + ["--warehouse", str(wh), "sql", "-"], stdin=f"{TEMPORAL};\n{KERNELS};\n", env=env
            )
            add("tracehouse first answer" + FIRST_SUFFIX[mode], t)
            if mode == "wait" and not built.exists():  # the repeated question reads a derived warehouse
                wh.rename(built)
            else:
                shutil.rmtree(wh, ignore_errors=True)
        if hta_skip is None:
            add("hta first answer", timed([sys.executable, "-c", HTA_FIRST, str(trace_dir)], env=env))
            add(
                "hta repeated question (reload)",
                timed([sys.executable, "-c", HTA_ONE, str(trace_dir)], env=env),
            )
        # a repeated question: one process on the built, derived warehouse
        add(
            "tracehouse repeated question", timed(CLI + ["--warehouse", str(built), "sql", TEMPORAL], env=env)
        )
        add(
            "tracehouse sql count(*) from runs",
            timed(CLI + ["--warehouse", str(built), "sql", "select count(*) from runs"], env=env),
        )
        # the floor of any `sql` process: the interpreter, and importing DuckDB to answer one query
        add("floor: python -c pass", timed([sys.executable, "-c", "pass"], env=env))
        add("floor: import duckdb + one query", timed([sys.executable, "-c", DUCKDB_FLOOR], env=env))
    sys.path.insert(0, str(ROOT))
    from tracehouse.warehouse.session import Session

    with Session(built) as th:
        for _ in range(reps):
            t = time.perf_counter()
            th.sql(TEMPORAL)
            add("repeated question on a Session (in process)", time.perf_counter() - t)
            t = time.perf_counter()
            th.sql(KERNELS)
            add("kernel_summary on a Session (in process)", time.perf_counter() - t)
    return {name: min(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--trace", action="append", type=Path, help="a trace file (repeatable; default: real 10-60 MB)"
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, help="also write the markdown table here")
    args = ap.parse_args(argv)
    traces = args.trace or default_traces()
    if not traces:
        print("no traces: ../shared/traces is missing; pass --trace FILE", file=sys.stderr)
        return 1
    hta_skip = hta_available()
    start_load = os.getloadavg()
    lines = [
        "| trace (JSON MB) | measure | seconds | CPU s | ratio (wall; CPU) | target |",
        "|---|---|---|---|---|---|",
    ]
    ok = True
    for trace in traces:
        mb = json_size(trace) / 1e6
        with tempfile.TemporaryDirectory(prefix="tracehouse-first-") as tmp:
            best = bench_trace(trace, args.reps, Path(tmp), hta_skip)
        label = f"{trace.name} ({mb:.1f})"
        cpu = {name: min(values) for name, values in CPU.items()}
        CPU.clear()
        for name, seconds in best.items():
            lines.append(
                f"| {label} | {name} | {seconds:.3f} | {cpu[name]:.2f} | | |"
                if cpu.get(name)
                else f"| {label} | {name} | {seconds:.4f} | | | |"
            )
        if hta_skip is None:
            first = best["hta first answer"] / best["tracehouse first answer"]
            repeat = best["hta repeated question (reload)"] / best["tracehouse repeated question"]
            session = (
                best["hta repeated question (reload)"] / best["repeated question on a Session (in process)"]
            )
            ok &= first >= TARGET_FIRST and repeat >= TARGET_REPEAT

            def both(a: str, b: str, best=best, cpu=cpu) -> str:
                return f"{best[a] / best[b]:.2f}x; {cpu[a] / cpu[b]:.2f}x"

            lines.append(
                f"| {label} | HTA / tracehouse, first answer | | | "
                f"{both('hta first answer', 'tracehouse first answer')} | >= {TARGET_FIRST:.0f}x |"
            )
            for suffix in list(FIRST_SUFFIX.values())[1:]:
                lines.append(
                    f"| {label} | HTA / tracehouse, first answer{suffix} | | | "
                    f"{both('hta first answer', f'tracehouse first answer{suffix}')} | |"
                )
            lines.append(
                f"| {label} | HTA reload / tracehouse sql, repeated question | | | "
                f"{both('hta repeated question (reload)', 'tracehouse repeated question')} | "
                f">= {TARGET_REPEAT:.0f}x |"
            )
            lines.append(
                f"| {label} | HTA reload / Session, repeated question (wall) | | | {session:.0f}x | |"
            )
        sql_s = best["tracehouse sql count(*) from runs"]
        lines.append(
            f"| {label} | `tracehouse sql` one process vs target | {sql_s:.3f} | | "
            f"{sql_s / TARGET_SQL_S:.2f}x the target | <= {TARGET_SQL_S} s |"
        )
        floor = best["floor: import duckdb + one query"]
        lines.append(
            f"| {label} | `tracehouse sql` one process vs its floor (import duckdb + one query) | | | "
            f"{sql_s / floor:.2f}x the floor | |"
        )
    if hta_skip:
        lines.append(f"\nHTA rows skipped: {hta_skip}")
    load = os.getloadavg()
    lines.append(f"\nLoad average at start: {start_load[0]:.1f} / {start_load[1]:.1f} / {start_load[2]:.1f}.")
    lines.append(
        f"\nMachine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        f"when done; best of {args.reps} rounds, interleaved."
    )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
