"""A cold `tracehouse sql` process on a derived warehouse, beside its floor, and beside other checkouts.

    python bench/cold_sql.py                              # this checkout, 5 rounds
    python bench/cold_sql.py --code /tmp/before --reps 9  # and another checkout, interleaved
    python bench/cold_sql.py --importtime                 # also where the process's imports go

Builds a warehouse once (`synth serving-decode`, `ingest` with TRACEHOUSE_DERIVE=wait: derived), then times whole processes,
interleaved (A, B, C, A, B, C, ...), as a user runs them: `python cli.py --warehouse W sql "select count(*)
from kernels"` of each checkout (its own code on PYTHONPATH; TRACEHOUSE_SERVE=off, so that a checkout that
still has a query server answers in its own process too), and the floor of any such process: a Python
process that imports duckdb and answers `select 1`. Reports the median wall and CPU seconds (user +
system: steadier than the wall on a shared machine) of each and their ratios to the floor. Target (issue 35): this checkout's median <= 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERY = "select count(*) from kernels"
FLOOR = "import duckdb; duckdb.connect().execute('select 1').fetchall()"
TARGET_S = 0.3


def wall(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed: {proc.stderr[-1500:]}")
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def build(tmp: Path) -> Path:
    """A derived warehouse of a synthesized decode run (untimed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACEHOUSE_DERIVE": "wait"}
    cli = [sys.executable, str(ROOT / "cli.py")]
    subprocess.run(
        cli + ["synth", "serving-decode", "-o", str(tmp / "run")], env=env, check=True, capture_output=True
    )
    wh = tmp / "wh"
    subprocess.run(
        cli + ["--warehouse", str(wh), "ingest", str(tmp / "run")], env=env, check=True, capture_output=True
    )
    return wh


def importtime(code: Path, wh: Path, env: dict, top: int = 12) -> list[str]:
    """The slowest imports (cumulative µs) of one `sql` process of this checkout."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(code / "cli.py"), "--warehouse", str(wh), "sql", QUERY],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (x.strip() for x in line.split(":", 1)[1].split("|"))
            if cumulative.isdigit():
                rows.append((int(cumulative), name))
    return [f"{us / 1000:7.1f} ms  {name}" for us, name in sorted(rows, reverse=True)[:top]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--code", action="append", type=Path, default=[], help="another checkout to time (repeatable)"
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--importtime", action="store_true", help="also list the slowest imports of each checkout"
    )
    args = ap.parse_args(argv)
    codes = [ROOT, *[c.resolve() for c in args.code]]
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base["TRACEHOUSE_SERVE"] = "off"
    with tempfile.TemporaryDirectory(prefix="tracehouse-cold-sql-") as tmp:
        wh = build(Path(tmp))
        sides = {"floor: import duckdb + select 1": ([sys.executable, "-c", FLOOR], base)}
        for code in codes:
            env = {**base, "PYTHONPATH": str(code)}
            cmd = [sys.executable, str(code / "cli.py"), "--warehouse", str(wh), "sql", QUERY]
            wall(cmd, env)  # untimed: bytecode compiled, the catalogue file built
            sides[f"tracehouse sql ({code})"] = (cmd, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for _ in range(args.reps):
            for name, (cmd, env) in sides.items():
                times[name].append(wall(cmd, env))
        median = {name: statistics.median(w for w, _ in values) for name, values in times.items()}
        cpu = {name: statistics.median(c for _, c in values) for name, values in times.items()}
        floor, floor_cpu = median["floor: import duckdb + select 1"], cpu["floor: import duckdb + select 1"]
        print("| process | median wall s | walls | / floor (wall) | median CPU s | / floor (CPU) |")
        print("|---|---|---|---|---|---|")
        for name, values in times.items():
            walls = " ".join(f"{w:.3f}" for w, _ in values)
            print(
                f"| {name} | {median[name]:.3f} | {walls} | {median[name] / floor:.2f}x | {cpu[name]:.3f} | "
                f"{cpu[name] / floor_cpu:.2f}x |"
            )
        mine = median[f"tracehouse sql ({ROOT})"]
        print(
            f"\nthis checkout: {mine:.3f} s median, target <= {TARGET_S} s: {'met' if mine <= TARGET_S else 'NOT met'}"
        )
        load = os.getloadavg()
        print(
            f"machine: {os.cpu_count()} cores, load {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; {args.reps} rounds"
        )
        if args.importtime:
            for code in codes:
                print(f"\nslowest imports, {code}:")
                print("\n".join(importtime(code, wh, {**base, "PYTHONPATH": str(code)})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
