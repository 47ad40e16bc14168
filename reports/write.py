"""Write a run report: resolve the run, open the report's connection, build, optionally export the trace of
the step it shows beside it, render, write. The one function `tracehouse report`, the demo and the
benchmarks call.

Apart from reports.run because the trace beside the report is the export's (reports.export), and the
export itself reads the run report (its takeaways as a track): run <- export <- this module, one way.
"""

from __future__ import annotations

from pathlib import Path

from reports.export import export_run
from reports.run import RunParams, build, render_run_report
from warehouse.engine import open as open_connection
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
    con = open_connection(
        warehouse, engine, [run_id] + ([mapping_id] if mapping_id else []), stored=True, master=master
    )
    report = build(con, RunParams(run_id, phase, mapping_id))
    if trace_path is not None:  # the step the report shows, on every rank (the whole run when it has no step)
        export_run(warehouse, run_id, trace_path, step=report.step.step if report.step else None)
        report.trace_file = Path(trace_path).name
    text = render_run_report(report, fmt, template_dir)
    if path is not None:
        Path(path).write_text(text)
    return text
