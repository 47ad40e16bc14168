"""`tracehouse demo`: a history of synthetic benchmark runs, ingested and reported, in one command.

Two series (SGLang-style DeepSeek decode on 2 and 4 ranks) over 12 commits, with the synthesizer's
run-to-run noise and an 8 % slowdown of the nvjet GEMMs from the 9th commit on. Everything lands in
one folder: the traces, the warehouse, and the reports.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tracehouse.ingest.load import Ingestor
from tracehouse.ingest.run import capture_folder
from tracehouse.synth.history import write_history
from tracehouse.warehouse.derived import derive
from tracehouse.warehouse.engine import open as open_connection
from tracehouse.warehouse.engine import store_of
from tracehouse.warehouse.store import Warehouse

REGRESSION_AT = 8
SLOW_KERNEL = ("nvjet", 1.08)


@dataclass
class DemoResult:
    folder: Path
    warehouse: Path
    runs: int
    latest_run: str
    reports: list[Path] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_demo(folder: str | Path, progress=None) -> DemoResult:
    started = time.perf_counter()
    folder = Path(folder).resolve()
    history = write_history(folder / "traces", regression_at=REGRESSION_AT, slow_kernel=SLOW_KERNEL)
    warehouse = Warehouse(folder / "warehouse")
    run_ids = []
    # published first, then derived together: the demo leaves a derived warehouse, so every command a user
    # tries on it afterwards reads kept rows (the trend reads each run's kept run_metrics)
    with Ingestor(warehouse, analyse=False) as ingestor:
        for i, run in enumerate(history, 1):
            # the capture traces named, as the demo wrote them: no "capture traces found" line per run
            [outcome] = ingestor.ingest([run.path], run.labels, capture=capture_folder(run.path))
            run_ids.append(outcome.run_id)
            if progress:
                progress(f"ingested {i}/{len(history)}: {run.series} @ {run.commit}")
    failed = {r: why for r, why in derive(warehouse, run_ids).items() if why}  # together: small runs
    if progress:
        progress(f"derived {len(run_ids) - len(failed)}/{len(run_ids)}")
        for run_id, why in failed.items():
            progress(f"  {run_id} not kept: {why}")
    latest = run_ids[len(history) // 2 - 1]  # the newest run of the first series
    result = DemoResult(folder, warehouse.root, len(run_ids), latest)
    result.reports, trend = _write_reports(warehouse, latest, folder / "reports")
    result.summary = _summary(warehouse, latest, history, trend)
    result.seconds = time.perf_counter() - started
    return result


def _write_reports(warehouse: Warehouse, run_id: str, out: Path):
    """Every report that this version of tracehouse has: the run report and the trend report."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    from tracehouse.reports.write import write_run_report

    for fmt in ("md", "html"):
        path = out / f"run-{run_id}.{fmt}"
        write_run_report(warehouse, run_id, fmt, path)
        written.append(path)
    from tracehouse.reports.trend import build_trend, render_trend

    con = open_connection(warehouse)
    trend = build_trend(con, warehouse=store_of(con))
    for fmt in ("md", "html"):
        path = out / f"trend.{fmt}"
        path.write_text(render_trend(trend, fmt))
        written.append(path)
    return written, trend


def _summary(warehouse: Warehouse, run_id: str, history, trend) -> list[str]:
    con = open_connection(warehouse)
    busy, span, comm = con.execute(
        "SELECT sum(busy_ns), sum(span_ns), sum(exposed_comm_ns) FROM gpu_timeline "
        "WHERE run_id = ? AND variant = 'exact' AND step IS NULL",
        [run_id],
    ).fetchone()
    top = con.execute(
        "SELECT category, share FROM category_summary WHERE run_id = ? ORDER BY share DESC LIMIT 3", [run_id]
    ).fetchall()
    regressed = next(r for r in history if r.regressed)
    found = sorted({(g.series, g.metric, g.first_commit) for g in trend.regressions if g.first_commit})
    caught = (
        "; ".join(f"{series}: {metric} from {commit}" for series, metric, commit in found[:4]) or "nothing"
    )
    return [
        (
            f"{len(history)} runs in 2 series ingested; latest {run_id}: GPU busy {100 * busy / span:.1f}% of the span, "
            f"exposed communication {comm / 1e3:.0f} µs"
        ),
        "top categories: " + ", ".join(f"{c} {100 * s:.1f}%" for c, s in top),
        f"injected: nvjet GEMMs x{SLOW_KERNEL[1]} from commit {regressed.commit}; the trend flags {caught}",
    ]


def main(folder: str) -> None:  # pragma: no cover - exercised through the CLI
    result = run_demo(folder, progress=lambda m: print(m, file=sys.stderr))
    print("\n".join(result.summary))
