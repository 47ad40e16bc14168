"""Write a run report: resolve the run, open the report's connection, build, optionally export the trace of
the step it shows beside it, render, write. The one function `tracehouse report`, the demo and the
benchmarks call.

Apart from reports.run because the trace beside the report is the export's (reports.export), and the
export itself reads the run report (its takeaways as a track): run <- export <- this module, one way.
"""

from __future__ import annotations

import sys
from pathlib import Path

from reports.export import export_run
from reports.run import RunParams, build, render_run_report
from warehouse.derived import derive, is_derived
from warehouse.engine import open as open_connection
from warehouse.engine import reads_derived
from warehouse.runs import resolve_run
from warehouse.store import Warehouse


def write_run_report(
    warehouse: Warehouse | str,
    run: str,
    fmt: str,
    path: str | Path | None = None,
    phase: str | None = None,
    mapping_run: str | None = None,
    template_dir: str | Path | None = None,
    engine: str = "duckdb",
    master: str | None = None,
    trace_path: str | Path | None = None,
) -> str:
    """engine, master: warehouse.engine.open's (the warehouse may be a URI for an engine that reads one)."""
    lookup = open_connection(warehouse, engine, master=master)
    run_id = resolve_run(lookup, run)
    mapping_id = resolve_run(lookup, mapping_run) if mapping_run else None
    lookup.close()
    runs = [run_id] + ([mapping_id] if mapping_id else [])
    if reads_derived(engine, warehouse):
        derive_first(Warehouse(warehouse) if isinstance(warehouse, str) else warehouse, runs)
    con = open_connection(warehouse, engine, runs, master=master)
    report = build(con, RunParams(run_id, phase, mapping_id))
    if trace_path is not None:  # the step the report shows, on every rank (the whole run when it has no step)
        export_run(warehouse, run_id, trace_path, step=report.step.step if report.step else None)
        report.trace_file = Path(trace_path).name
    text = render_run_report(report, fmt, template_dir)
    if path is not None:
        Path(path).write_text(text)
    return text


def derive_first(warehouse: Warehouse, runs: list[str]) -> None:
    """A report derives its runs before reading (warehouse.derived.derive: nothing when they are derived
    already), so its views read kept rows; where they cannot be kept (a warehouse this user may only read),
    the report computes them, with a note."""
    runs = [run for run in runs if not is_derived(warehouse, run)]
    if not runs:
        return
    if sys.stderr.isatty():  # progress on a terminal only, as the CLI's
        print(f"  deriving run(s) {', '.join(runs)} (once: kept for their later readers)", file=sys.stderr)
    failed = {run: why for run, why in derive(warehouse, runs).items() if why}
    if failed:
        print(
            f"note: the rows of run(s) {', '.join(failed)} could not be kept ({next(iter(failed.values()))}); "
            "computing them for this report only (slower)",
            file=sys.stderr,
        )
