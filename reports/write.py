"""Write a run report: resolve the run, open the report's connection, build, optionally export the trace of
the step it shows beside it, render, write. The one function `tracehouse report`, the demo and the
benchmarks call.

Apart from reports.run because the trace beside the report is the export's (reports.export), and the
export itself reads the run report (its takeaways as a track): run <- export <- this module, one way.
With the trace (DuckDB), one connection does everything: opened with the export's memory settings, the
run resolved on it, then focused on the report's runs (engine.open_resolved); the report is built once
and its takeaways drawn into the trace.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tracehouse.reports.export import export_run, export_settings
from tracehouse.reports.run import RunParams, build, render_run_report
from tracehouse.reports.triage import TriageParams, render_triage
from tracehouse.reports.triage import build as build_triage
from tracehouse.warehouse.derived import derive, is_derived
from tracehouse.warehouse.engine import is_uri, open_resolved, store_of
from tracehouse.warehouse.runs import resolve_run
from tracehouse.warehouse.store import Warehouse


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
    store = warehouse if isinstance(warehouse, Warehouse) or is_uri(str(warehouse)) else Warehouse(warehouse)
    # the export's memory settings where the trace is written beside (a local warehouse's connection)
    settings = export_settings(store) if trace_path is not None and isinstance(store, Warehouse) else None
    con, (run_id, mapping_id) = open_resolved(
        store,
        engine,
        lambda c: _resolve(c, run, mapping_run),
        master=master,
        settings=settings,
        before_reading=derive_first,  # DuckDB's kept rows: the runs derived first where they are not
    )
    try:
        report = build(con, RunParams(run_id, phase, mapping_id))
        if trace_path is not None:  # the step the report shows, on every rank (the whole run without one)
            # on the report's own connection where it reads this warehouse (DuckDB), else on the export's
            own = store_of(con)
            export_run(
                own or store,
                run_id,
                trace_path,
                step=report.step.step if report.step else None,
                con=con if own else None,
                report=report,
            )
    finally:
        con.close()
    if trace_path is not None:
        report.trace_file = Path(trace_path).name
    text = render_run_report(report, fmt, template_dir)
    if path is not None:
        Path(path).write_text(text)
    return text


def _resolve(con, run: str, mapping_run: str | None) -> tuple[str, str | None]:
    """The run's id and the mapping run's (or None)."""
    return resolve_run(con, run), (resolve_run(con, mapping_run) if mapping_run else None)


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


def derives_first(con) -> Callable[[list[str]], None] | None:
    """A diff's or a trend's before_reading on `con`: its runs derived first (derive_first) where `con`
    reads a local warehouse, as a report's are; None for another engine, which computes every figure."""
    store = store_of(con)
    return None if store is None else partial(derive_first, store)


def write_triage_report(
    warehouse: Warehouse | str,
    run: str,
    phase: str | None = None,
    mapping_run: str | None = None,
    template_dir: str | Path | None = None,
    engine: str = "duckdb",
    master: str | None = None,
) -> str:
    """`tracehouse report --format triage`: the kernel, overlap and fuse tables per phase (reports.triage)."""
    store = warehouse if isinstance(warehouse, Warehouse) or is_uri(str(warehouse)) else Warehouse(warehouse)
    con, (run_id, mapping_id) = open_resolved(
        store, engine, lambda c: _resolve(c, run, mapping_run), master=master, before_reading=derive_first
    )
    try:
        view = build_triage(con, TriageParams(run_id, phase, mapping_id))
    finally:
        con.close()
    return render_triage(view, template_dir)
