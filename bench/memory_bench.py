"""Peak RSS and time of ingest and derive under the memory policy (warehouse.memory), per trace size and setting.

    python bench/memory_bench.py [--sizes 1GB,4GB] [--settings default,640MB] [--tmp DIR] [--out FILE]
    python bench/memory_bench.py --derive-only WAREHOUSE [--settings 640MB] [--out FILE]

For each size, a synthesized serving-decode trace of one rank (`tracehouse synth serving-decode --ranks 1
--target-size SIZE`, kept in --tmp between runs: a 4 GB one takes minutes to write); for each setting
(`default`: TRACEHOUSE_MEMORY_LIMIT unset; else its value), a fresh warehouse, then two processes, each
timed: `tracehouse ingest --no-derive FOLDER` and `tracehouse derive`. Peak RSS is the largest resident set
of the process or any process it waited for (wait4's ru_maxrss, what `/usr/bin/time -v` reports); time is
wall clock. A step that fails is a row with its one-line error. Writes a markdown table to --out
(default bench/results-memory.md) and prints it. The target (issue 36): peak RSS < 1 GB at the
low-memory setting (640MB), ingest and derive, at 1 GB and 4 GB, never failing.

--derive-only WAREHOUSE: no synthesis nor ingest; for each setting, the derive of every run of that warehouse
(ingested with --no-derive: its kept rows are removed first), one process, with each view's wall time and the
largest RSS sampled while it ran (/proc, every 0.2 s), a line per view as it is done (a derive that does not
finish still says how far it got), then the process's peak RSS (wait4).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACEHOUSE = [str(Path(sys.executable).with_name("tracehouse"))]  # the venv's command
TARGET_MB = 1000  # peak RSS at the low-memory setting (10^6 bytes)
LOW = "640MB"


def size_bytes(text: str) -> int:
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9}
    text = text.strip().upper()
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(text)


def timed(cmd: list[str], env: dict) -> tuple[float, float, int, str]:
    """(wall s, peak RSS MB, exit status, last line of stderr) of one process."""
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - began
    last = [line for line in err.splitlines() if line.strip()]
    return wall, usage.ru_maxrss * 1024 / 1e6, proc.returncode, shortened(last[-1] if last else "")


def shortened(line: str, keep: int = 120) -> str:
    """A long error line cut in the middle, so that both its kind and its cause (an OS error's reason comes
    last, after a long spill path) stay."""
    return line if len(line) <= 2 * keep else f"{line[:keep]} ... {line[-keep:]}"


def trace_for(size: str, tmp: Path) -> Path:
    """The folder of the synthesized run (its trace file and capture traces, as `tracehouse synth` writes
    it), written once."""
    folder = tmp / f"trace-{size}"
    if not (folder / "ground_truth.json.gz").is_file() and not (folder / "ground_truth.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        cmd = [
            *TRACEHOUSE,
            "synth",
            "serving-decode",
            "--ranks",
            "1",
            "--target-size",
            size,
            "-o",
            str(folder),
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return folder


def measure(trace: Path, setting: str, tmp: Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRACEHOUSE_MEMORY_LIMIT", "TRACEHOUSE_DERIVE")}
    if setting != "default":
        env["TRACEHOUSE_MEMORY_LIMIT"] = setting
    wh = tmp / "wh"
    shutil.rmtree(wh, ignore_errors=True)
    rows = []
    for step, args in (("ingest", ["ingest", "--no-derive", str(trace)]), ("derive", ["derive"])):
        wall, rss, status, err = timed([*TRACEHOUSE, "--warehouse", str(wh), *args], env)
        rows.append(
            {"step": step, "setting": setting, "wall": wall, "rss": rss, "ok": status == 0, "err": err}
        )
        print(f"  {step} at {setting}: {wall:.0f} s, {rss:.0f} MB{'' if status == 0 else ' FAILED: ' + err}")
        if status != 0:
            break
    shutil.rmtree(wh, ignore_errors=True)
    return rows


def table(results: list[tuple[str, int, dict]]) -> str:
    lines = [
        "| trace (JSON) | setting | step | wall (s) | peak RSS (MB) | target |",
        "|---|---|---|---|---|---|",
    ]
    for size, json_bytes, r in results:
        target = ""
        if r["setting"] == LOW:
            target = "< 1000 MB: " + ("ok" if r["ok"] and r["rss"] < TARGET_MB else "MISSED")
        status = "" if r["ok"] else f" FAILED ({r['err']})"
        lines.append(
            f"| {size} ({json_bytes / 1e9:.2f} GB) | {r['setting']} | {r['step']}{status} | {r['wall']:.0f} | "
            f"{r['rss']:.0f} | {target} |"
        )
    return "\n".join(lines)


def json_size(trace: Path) -> int:
    if trace.suffix != ".gz":
        return trace.stat().st_size
    with open(trace, "rb") as f:  # the gzip trailer: size mod 4 GiB
        f.seek(-4, 2)
        size = int.from_bytes(f.read(4), "little")
    compressed = trace.stat().st_size
    while size < compressed * 3:  # JSON inflates well over 3x; add the wrapped 4 GiB
        size += 1 << 32
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1GB,4GB")
    parser.add_argument("--settings", default=f"default,{LOW}")
    parser.add_argument("--tmp", default="/tmp/tracehouse-memory-bench")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results-memory.md"))
    parser.add_argument("--derive-only", metavar="WAREHOUSE", help="derive this warehouse's runs, per view")
    parser.add_argument("--child", metavar="WAREHOUSE", help=argparse.SUPPRESS)  # the derive process itself
    opts = parser.parse_args()
    if opts.child:
        return derive_child(Path(opts.child))
    if opts.derive_only:
        return derive_only(Path(opts.derive_only), opts.settings.split(","), Path(opts.out))
    tmp = Path(opts.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    began = time.time()
    load = os.getloadavg()
    results = []
    for size in opts.sizes.split(","):
        folder = trace_for(size, tmp)
        (trace,) = sorted(folder.glob("*.trace.json*"))
        print(f"{size}: {folder}")
        for setting in opts.settings.split(","):
            results.extend((size, json_size(trace), r) for r in measure(folder, setting, tmp))
    text = table(results)
    print(text)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    Path(opts.out).write_text(
        "# tracehouse benchmarks: memory (ingest and derive under the memory policy)\n\n"
        f"Written by `python bench/memory_bench.py --sizes {opts.sizes} --settings {opts.settings}` in "
        f"{time.time() - began:.0f} s on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC: {os.cpu_count()} "
        f"cores, {memory:.1f} GiB, load average at start {load[0]:.1f}, python {platform.python_version()}. "
        "Each step is its own process (`tracehouse ingest --no-derive`, then `tracehouse derive`) on a fresh "
        "warehouse; peak RSS is wait4's ru_maxrss (as `/usr/bin/time -v`). The machine was shared: times "
        "move with its load, the memory figures do not.\n\n" + text + "\n"
    )


def derive_child(warehouse: Path) -> None:
    """The derive of every run of the warehouse, from nothing; a line per view on stderr as it is done."""
    from tracehouse.warehouse.catalog import published_runs
    from tracehouse.warehouse.derived import derive, forget_derived
    from tracehouse.warehouse.store import Warehouse

    store = Warehouse(warehouse)
    for run_id in published_runs(store):
        forget_derived(store, run_id)
    failed = derive(store, progress=lambda line: print(f"view {line}", file=sys.stderr, flush=True))
    for run_id, why in failed.items():
        print(f"run {run_id}: {why or 'derived'}", file=sys.stderr, flush=True)
    sys.exit(1 if any(failed.values()) else 0)


def derive_only(warehouse: Path, settings: list[str], out: Path) -> None:
    """Per setting: the derive process's views, each with its wall time and largest sampled RSS."""
    lines = [
        "| setting | view | wall (s) | largest RSS while it ran (MB) |",
        "|---|---|---:|---:|",
    ]
    for setting in settings:
        env = {
            k: v for k, v in os.environ.items() if k not in ("TRACEHOUSE_MEMORY_LIMIT", "TRACEHOUSE_DERIVE")
        }
        if setting != "default":
            env["TRACEHOUSE_MEMORY_LIMIT"] = setting
        cmd = [sys.executable, __file__, "--child", str(warehouse)]
        began = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sampler = RssSampler(proc.pid)
        sampler.start()
        last = ""
        for line in proc.stderr:
            line = line.rstrip()
            if line.startswith("view "):  # "view NAME (i/n): S s"
                name, _, secs = line[5:].rpartition(": ")
                lines.append(
                    f"| {setting} | {name} | {secs.removesuffix(' s')} | {sampler.take() / 1e6:.0f} |"
                )
                print(lines[-1], flush=True)
                out.write_text("\n".join(lines) + "\n")
            elif line.strip():
                last = line
        _, status, usage = os.wait4(proc.pid, 0)
        sampler.done = True
        wall = time.perf_counter() - began
        code = os.waitstatus_to_exitcode(status)
        lines.append(
            f"| {setting} | **the derive**{'' if code == 0 else ' FAILED (' + shortened(last) + ')'} | "
            f"{wall:.0f} | {usage.ru_maxrss * 1024 / 1e6:.0f} (peak, wait4) |"
        )
        print(lines[-1], flush=True)
        out.write_text("\n".join(lines) + "\n")


class RssSampler(threading.Thread):
    """The largest resident set of a process since the last take(), sampled from /proc every 0.2 s."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.largest, self.done = pid, 0, False

    def run(self) -> None:
        while not self.done and self.sample():
            time.sleep(0.2)

    def sample(self) -> bool:
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return False
        for row in text.splitlines():
            if row.startswith("VmRSS:"):
                self.largest = max(self.largest, int(row.split()[1]) * 1024)
        return True

    def take(self) -> int:
        """The largest RSS since the last take (a view shorter than a sample: the RSS now)."""
        self.sample()
        largest, self.largest = self.largest, 0
        return largest


if __name__ == "__main__":
    main()
